"""Dequantizers and quantizers against the `gguf` package, bit for bit; Tensor's block helpers."""

import gguf
import numpy as np
import pytest
from formats_helpers import F16_FIELDS, random_blocks
from gguf import GGMLQuantizationType as GGMLType

from fakcore.formats import QTYPES, FormatError, Tensor, tensor
from fakcore.formats.quants import UNSUPPORTED, layout, quantize

N_BLOCKS = 512
GGUF_DECODED = ["F32", "F16", "BF16", *F16_FIELDS]  # every type gguf.quants.dequantize knows that we do


def bits(values: np.ndarray) -> np.ndarray:
    """f32 as raw bits, so +0/-0 and NaN payloads count as different."""
    return np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)


@pytest.mark.parametrize("qtype", GGUF_DECODED)
def test_block_dequantizer_matches_gguf_bit_for_bit(qtype):
    blocks = random_blocks(qtype, N_BLOCKS, seed=QTYPES[qtype].ggml_type)
    expected = gguf.quants.dequantize(blocks, GGMLType[qtype]).reshape(N_BLOCKS, -1)
    got = QTYPES[qtype].dequantize(blocks)
    assert got.dtype == np.float32 and got.shape == (N_BLOCKS, QTYPES[qtype].block_size)
    assert np.array_equal(bits(got), bits(expected))


@pytest.mark.parametrize("qtype", GGUF_DECODED)
def test_tensor_dequantize_in_chunks_matches_gguf(qtype, monkeypatch):
    monkeypatch.setattr(tensor, "CHUNK_ELEMENTS", 3000)  # several uneven chunks
    qt = QTYPES[qtype]
    rows, cols = 8, 4 * max(qt.block_size, 32)
    blocks = random_blocks(qtype, rows * cols // qt.block_size, seed=7)
    t = Tensor("w", qtype, (rows, cols), blocks.reshape(-1), "mem")
    expected = gguf.quants.dequantize(blocks.reshape(rows, -1), GGMLType[qtype]).reshape(rows, cols)
    assert np.array_equal(bits(t.dequantize()), bits(expected))


def test_bf16_random_bits_including_nan_and_inf():
    raw = np.random.default_rng(1).integers(0, 256, size=(4096, 2), dtype=np.uint8)
    expected = gguf.quants.dequantize(raw, GGMLType.BF16).reshape(-1, 1)
    assert np.array_equal(bits(QTYPES["BF16"].dequantize(raw)), bits(expected))


@pytest.mark.parametrize("qtype, dtype", [("F64", "<f8"), ("I8", "i1"), ("I16", "<i2"), ("I32", "<i4"), ("I64", "<i8")])
def test_plain_types_decode_like_numpy(qtype, dtype):
    values = np.array([0, 1, -2, 100, -128, 127], dtype=dtype)
    t = Tensor("x", qtype, (2, 3), values.view(np.uint8), "mem")
    assert np.array_equal(t.dequantize(), values.astype(np.float32).reshape(2, 3))


def quantizer_inputs() -> np.ndarray:
    """(n, 32) f32 blocks covering the corner cases of the reference quantizers."""
    rng = np.random.default_rng(3)
    normal = rng.standard_normal((300, 32)).astype(np.float32) * np.exp2(rng.uniform(-12, 12, (300, 1)))
    special = np.zeros((6, 32), dtype=np.float32)  # all zero
    special[1] = 0.75  # constant: d = 0 for Q4_1
    special[2] = np.linspace(-1, 1, 32)  # +-max tie: the first one wins
    special[3, ::2], special[3, 1::2] = 2.5, -2.5
    special[4] = np.arange(32) * 0.5 - 8  # halves: roundf rounds away from zero
    special[5] = rng.standard_normal(32) * 1e-30  # scales underflow f16
    return np.concatenate([normal, special]).astype(np.float32)  # ggml quantizes f32


@pytest.mark.parametrize("qtype", ["Q8_0", "Q4_0", "Q4_1", "BF16", "F16", "TQ1_0", "TQ2_0", "MXFP4"])
def test_quantizer_matches_gguf_bit_for_bit(qtype):
    values = quantizer_inputs()
    if QTYPES[qtype].block_size == 256:  # the ternary types: the same values, eight to a block
        values = values[: len(values) // 8 * 8].reshape(-1, 256)
    expected = gguf.quants.quantize(values, GGMLType[qtype])
    got = quantize(values, qtype)
    assert got.dtype == np.uint8
    assert np.array_equal(got, np.ascontiguousarray(expected).view(np.uint8).reshape(got.shape))


@pytest.mark.parametrize("qtype, tolerance", [("Q8_0", 0.01), ("Q4_0", 0.15), ("Q4_1", 0.1), ("MXFP4", 0.26)])
def test_quantize_round_trip_is_close(qtype, tolerance):
    values = np.random.default_rng(4).standard_normal((16, 256)).astype(np.float32)
    t = Tensor.from_array("w", values, qtype)
    assert t.shape == (16, 256) and t.raw.size == t.nbytes
    error = np.abs(t.dequantize() - values).max(axis=1) / np.abs(values).max(axis=1)
    assert error.max() < tolerance


def test_ternary_round_trip_keeps_signs_and_the_block_maximum():
    """Ternary blocks hold -d, 0 or d: every value rounds to the nearest of them (d = the block's max |x|)."""
    values = np.random.default_rng(8).standard_normal((6, 512)).astype(np.float32)
    for qtype in ("TQ1_0", "TQ2_0"):
        got = Tensor.from_array("w", values, qtype).dequantize().reshape(-1, 256)
        blocks = values.reshape(-1, 256)
        d = np.abs(blocks).max(axis=1, keepdims=True).astype(np.float16).astype(np.float32)
        expected = np.where(np.abs(blocks) >= d / 2, np.sign(blocks) * d, 0)
        assert np.array_equal(got, expected), qtype


def test_quantize_rejects_bad_row_length():
    with pytest.raises(ValueError, match="multiple of 32"):
        quantize(np.zeros((2, 33), np.float32), "Q4_0")
    with pytest.raises(ValueError, match="no quantizer for Q6_K"):
        quantize(np.zeros((1, 256), np.float32), "Q6_K")


def test_table_agrees_with_gguf_sizes():
    for name, qt in (QTYPES | UNSUPPORTED).items():
        if name == "Q8_1":  # gguf-py's entry predates ggml's 36-byte block_q8_1
            continue
        assert GGMLType[name].value == qt.ggml_type
        assert gguf.GGML_QUANT_SIZES[GGMLType[name]] == (qt.block_size, qt.type_size), name


# --- Tensor ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("qtype", ["Q4_1", "Q8_0", "Q6_K", "Q3_K", "F16", "BF16", "F32"])
def test_take_rows_equals_dequantize_then_index(qtype):
    qt = QTYPES[qtype]
    rows, cols = 12, 2 * max(qt.block_size, 32)
    t = Tensor("w", qtype, (rows, cols), random_blocks(qtype, rows * cols // qt.block_size, seed=5).reshape(-1), "f")
    index = np.array([11, 0, 3, 3, 7, 1])
    picked = t.take_rows(index)
    assert picked.shape == (6, cols) and picked.qtype == qtype and picked.name == "w"
    assert np.array_equal(bits(picked.dequantize()), bits(t.dequantize()[index]))


def test_take_rows_on_3d_tensor_moves_whole_first_axis_slices():
    values = np.random.default_rng(6).standard_normal((4, 3, 64)).astype(np.float32)
    t = Tensor.from_array("experts", values, "Q8_0")
    assert np.array_equal(t.take_rows(np.array([2, 0])).dequantize(), t.dequantize()[[2, 0]])


def test_take_rows_rejects_bad_index():
    t = Tensor.from_array("w", np.zeros((4, 32)), "Q4_0", source="model.gguf")
    with pytest.raises(IndexError, match="'w'"):
        t.take_rows(np.array([4]))
    with pytest.raises(TypeError):
        t.take_rows(np.array([0.5]))
    with pytest.raises(FormatError, match="2\\+ dims"):
        Tensor.from_array("b", np.zeros(32), "Q4_0").take_rows(np.array([0]))


def test_as_blocks_is_a_zero_copy_row_view():
    t = Tensor.from_array("w", np.ones((2, 3, 64)), "Q4_1")
    blocks = t.as_blocks()
    assert blocks.shape == (6, 2 * 20) and np.shares_memory(blocks, t.raw)
    assert Tensor.from_array("v", np.ones(64), "F32").as_blocks().shape == (1, 256)


def test_tensor_validates_layout():
    with pytest.raises(FormatError, match="file.bin: tensor 'w'.*multiple of the Q4_0 block size 32"):
        Tensor("w", "Q4_0", (2, 16), np.zeros(18, np.uint8), "file.bin")
    with pytest.raises(FormatError, match="file.bin: tensor 'w'.*needs 36 bytes, got 35"):
        Tensor("w", "Q4_0", (2, 32), np.zeros(35, np.uint8), "file.bin")
    with pytest.raises(FormatError, match="unknown quant type 'Q9_9'"):
        Tensor("w", "Q9_9", (32,), np.zeros(18, np.uint8), "file.bin")


def test_unsupported_type_fails_on_use_naming_the_type():
    t = Tensor("w", "IQ2_XXS", (1, 256), np.zeros(66, np.uint8), "file.gguf")
    assert t.block_size == 256 and t.type_size == 66 and layout("IQ2_XXS").dequantize is None
    with pytest.raises(FormatError, match=r"file.gguf: tensor 'w': IQ2_XXS \(ggml type 16\) is not supported"):
        t.dequantize()


def test_f32_dequantize_is_a_view():
    raw = np.arange(6, dtype=np.float32).view(np.uint8)
    out = Tensor("w", "F32", (2, 3), raw, "mem").dequantize()
    assert np.shares_memory(out, raw) and out.shape == (2, 3) and out.dtype == np.float32
