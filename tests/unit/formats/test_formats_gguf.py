"""GGUFFile against files written by gguf.GGUFWriter (checked with gguf's own GGUFReader), and against
hand-built broken files, each of which must fail naming the file and what was wrong."""

import gguf
import numpy as np
import pytest
from formats_helpers import gguf_file, random_blocks
from gguf import GGMLQuantizationType as GGMLType
from gguf import GGUFValueType as VType

from fakcore.formats import FormatError, GGUFError, GGUFFile, Tensor
from fakcore.formats.quants import QTYPES

# (key, value type, value) for every metadata kind the writer can express, incl. typed and nested arrays.
METADATA = [
    ("t.u8", VType.UINT8, 200),
    ("t.i8", VType.INT8, -100),
    ("t.u16", VType.UINT16, 65000),
    ("t.i16", VType.INT16, -32000),
    ("t.u32", VType.UINT32, 4_000_000_000),
    ("t.i32", VType.INT32, -2_000_000_000),
    ("t.u64", VType.UINT64, 2**63 + 5),
    ("t.i64", VType.INT64, -(2**62)),
    ("t.f32", VType.FLOAT32, 0.1),
    ("t.f64", VType.FLOAT64, 0.1),
    ("t.bool", VType.BOOL, True),
    ("t.str", VType.STRING, "héllo\nwörld ✓"),
    ("t.arr.str", VType.ARRAY, ["a", "", "Ġthe", "<|im_end|>", "日本"]),
    ("t.arr.i32", VType.ARRAY, [1, -2, 3]),
    ("t.arr.f32", VType.ARRAY, [0.5, -1.25, 1e-3]),
    ("t.arr.bool", VType.ARRAY, [True, False, True]),
    ("t.nested.i32", VType.ARRAY, [[1, 2], [3], [4, 5, 6]]),
    ("t.nested.str", VType.ARRAY, [["a", "b"], ["c"]]),
]
TYPED_ARRAYS = [  # (key, element type, values)
    ("t.arr.u8", VType.UINT8, [0, 1, 255]),
    ("t.arr.i16", VType.INT16, [-5, 7]),
    ("t.arr.u64", VType.UINT64, [2**64 - 1, 0]),
    ("t.arr.f64", VType.FLOAT64, [1.0 / 3.0, -2.5]),
]


def write_model(path, alignment: int | None = None) -> dict[str, np.ndarray]:
    """A GGUF with every supported tensor type; returns name -> the values as written (F32 inputs)."""
    rng = np.random.default_rng(0)
    writer = gguf.GGUFWriter(str(path), "llama")
    if alignment:
        writer.add_custom_alignment(alignment)
    for key, vtype, value in METADATA:
        writer.add_key_value(key, value, vtype)
    for key, elem_type, values in TYPED_ARRAYS:
        writer.add_key_value(key, values, VType.ARRAY, sub_type=elem_type)
    written = {}
    f32 = rng.standard_normal((3, 5, 7)).astype(np.float32)  # 3-D, odd sizes: shape order must reverse
    writer.add_tensor("f32", f32)
    writer.add_tensor("f16", rng.standard_normal((4, 9)).astype(np.float16))
    writer.add_tensor("vector", rng.standard_normal(11).astype(np.float32))
    bf16 = rng.standard_normal((2, 16)).astype(np.float32)
    writer.add_tensor("bf16", gguf.quants.quantize(bf16, GGMLType.BF16), raw_dtype=GGMLType.BF16)
    for qtype in ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0"]:  # quantized by gguf from real values
        values = rng.standard_normal((6, 64)).astype(np.float32)
        writer.add_tensor(qtype.lower(), gguf.quants.quantize(values, GGMLType[qtype]), raw_dtype=GGMLType[qtype])
        written[qtype.lower()] = values
    for qtype in ["Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"]:  # gguf cannot quantize these: random blocks
        blocks = random_blocks(qtype, 6, seed=QTYPES[qtype].ggml_type).reshape(3, -1)
        writer.add_tensor(qtype.lower(), blocks, raw_dtype=GGMLType[qtype])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return written


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("gguf") / "model.gguf"
    write_model(path)
    return path


def test_metadata_round_trip(model_path):
    with GGUFFile(model_path) as f:
        reader = gguf.GGUFReader(model_path)
        assert f.version == 3 and f.architecture == "llama"
        assert set(f.metadata) == {k for k in reader.fields if not k.startswith("GGUF.")}
        for key, field in reader.fields.items():
            if key.startswith("GGUF.") or key.startswith("t.nested"):
                continue  # GGUFReader flattens nested arrays
            assert f.metadata[key] == field.contents(), key
        assert f.metadata["t.nested.i32"] == [[1, 2], [3], [4, 5, 6]]
        assert f.metadata["t.nested.str"] == [["a", "b"], ["c"]]
        assert f.metadata["t.f32"] == float(np.float32(0.1)) and f.metadata["t.f64"] == 0.1
        assert f.metadata["t.str"] == "héllo\nwörld ✓" and f.metadata["t.arr.u64"] == [2**64 - 1, 0]
        assert f.metadata["t.bool"] is True and f.metadata["t.arr.bool"] == [True, False, True]


def test_tensors_round_trip(model_path):
    reader = gguf.GGUFReader(model_path)
    with GGUFFile(model_path) as f:
        assert list(f.tensors) == [t.name for t in reader.tensors]
        for ref in reader.tensors:
            t = f.tensor(ref.name)
            assert t.qtype == ref.tensor_type.name and t.source == str(model_path)
            assert t.shape == tuple(int(d) for d in reversed(ref.shape))
            assert np.shares_memory(t.raw, t.raw.base) and not t.raw.flags.writeable  # a view of the mmap
            expected = gguf.quants.dequantize(ref.data, ref.tensor_type)
            got = t.dequantize()
            assert got.shape == t.shape and got.dtype == np.float32
            assert np.array_equal(got.view(np.uint32), np.ascontiguousarray(expected, np.float32).view(np.uint32))
        assert f.tensor("f32").shape == (3, 5, 7) and f.tensor("vector").shape == (11,)


def test_quantized_tensors_decode_close_to_what_was_written(tmp_path):
    written = write_model(tmp_path / "m.gguf")
    with GGUFFile(tmp_path / "m.gguf") as f:
        for name, values in written.items():
            assert np.abs(f.tensor(name).dequantize() - values).max() < 0.35, name


def test_custom_alignment(tmp_path):
    write_model(tmp_path / "aligned.gguf", alignment=64)
    reader = gguf.GGUFReader(tmp_path / "aligned.gguf")
    with GGUFFile(tmp_path / "aligned.gguf") as f:
        assert f.alignment == 64 and f.data_offset == reader.data_offset and f.data_offset % 64 == 0
        for ref in reader.tensors:
            assert np.array_equal(f.tensor(ref.name).raw, ref.data.reshape(-1).view(np.uint8))


def test_version_2_and_hand_built_file(tmp_path):
    q8 = Tensor.from_array("w", np.linspace(-1, 1, 64).reshape(2, 32), "Q8_0")
    data = gguf_file(
        metadata=[
            ("general.architecture", "str", "llama"),
            ("deep", "arr:arr:arr:u16", [[[1], [2, 3]], []]),
            ("empty.str", "arr:str", []),
            ("empty.f32", "arr:f32", []),
            ("empty.string", "str", ""),
        ],
        tensors=[("w", [32, 2], 8, q8.raw.tobytes()), ("scalar", [], 0, np.float32(4).tobytes())],
        version=2,
    )
    (tmp_path / "v2.gguf").write_bytes(data)
    with GGUFFile(tmp_path / "v2.gguf") as f:
        assert f.version == 2 and f.metadata["deep"] == [[[1], [2, 3]], []]
        assert f.metadata["empty.str"] == [] == f.metadata["empty.f32"] and f.metadata["empty.string"] == ""
        assert f.tensor("scalar").shape == () and f.tensor("scalar").dequantize() == 4.0
        assert np.array_equal(f.tensor("w").dequantize(), q8.dequantize())


def test_get_and_missing_things_name_file_and_key(model_path):
    with GGUFFile(model_path) as f:
        assert f.get("t.i8") == -100 and f.get("nope", None) is None and f.get("nope", 3) == 3
        with pytest.raises(GGUFError, match=rf"{model_path}: missing metadata key 'llama.block_count'"):
            f.get("llama.block_count")
        with pytest.raises(GGUFError, match=rf"{model_path}: missing tensor 'output.weight'"):
            f.tensor("output.weight")


def test_close_keeps_handed_out_tensors_valid(model_path):
    f = GGUFFile(model_path)
    t = f.tensor("q4_0")
    expected = t.dequantize().copy()
    f.close()
    f.close()  # idempotent
    assert np.array_equal(t.dequantize(), expected)
    with pytest.raises(GGUFError, match="closed"):
        f.tensor("q4_0")


# --- broken files -----------------------------------------------------------------------------------------

GOOD_TENSORS = [("ok", [32, 2], 2, bytes(36)), ("ok2", [4], 0, np.ones(4, np.float32).tobytes())]
GOOD_METADATA = [("general.architecture", "str", "llama"), ("tokens", "arr:str", ["a", "bb", "ccc"])]


def write(tmp_path, data: bytes, name: str = "broken.gguf"):
    path = tmp_path / name
    path.write_bytes(data)
    return path


def open_fails(path, *fragments: str) -> str:
    with pytest.raises(GGUFError) as info:
        GGUFFile(path)
    message = str(info.value)
    assert str(path) in message
    for fragment in fragments:
        assert fragment in message, message
    return message


def test_every_truncation_fails_cleanly(tmp_path):
    data = gguf_file(GOOD_METADATA, GOOD_TENSORS)
    header_end = len(data) - 64 - 32  # tensor data: 36 bytes padded to 64, then 16 padded to 32
    for cut in [*range(0, header_end), header_end + 10]:
        path = write(tmp_path, data[:cut], f"cut{cut}.gguf")
        message = open_fails(path)
        assert "truncated" in message or "empty" in message or "past the end" in message or "magic" in message


def test_truncated_in_tensor_data_names_the_tensor(tmp_path):
    data = gguf_file(GOOD_METADATA, GOOD_TENSORS)
    open_fails(write(tmp_path, data[:-20]), "tensor 'ok2'", "past the end")


def test_truncated_in_token_list_names_the_key(tmp_path):
    data = gguf_file(GOOD_METADATA, GOOD_TENSORS)
    open_fails(write(tmp_path, data[: data.index(b"ccc") + 1]), "metadata 'tokens'", "truncated")


def test_bad_magic(tmp_path):
    open_fails(write(tmp_path, b"GGML" + gguf_file(GOOD_METADATA)[4:]), "not a GGUF file", "magic")


@pytest.mark.parametrize("version, fragment", [(1, "version 1"), (4, "version 4"), (3 << 24, "big-endian")])
def test_unsupported_versions(tmp_path, version, fragment):
    open_fails(write(tmp_path, gguf_file(GOOD_METADATA, version=version)), fragment)


def test_unknown_ggml_type_id(tmp_path):
    data = gguf_file(GOOD_METADATA, [*GOOD_TENSORS, ("mystery", [32], 99, bytes(64))])
    open_fails(write(tmp_path, data), "tensor 'mystery'", "unknown ggml type id 99")


def test_known_but_unsupported_type_opens_and_fails_on_use(tmp_path):
    data = gguf_file(GOOD_METADATA, [*GOOD_TENSORS, ("iq", [256, 2], 16, bytes(132))])
    path = write(tmp_path, data)
    with GGUFFile(path) as f:
        assert f.tensor("ok").dequantize().shape == (2, 32)
        iq = f.tensor("iq")
        assert iq.qtype == "IQ2_XXS" and iq.shape == (2, 256) and iq.nbytes == 132
        with pytest.raises(FormatError, match=rf"{path}: tensor 'iq': IQ2_XXS \(ggml type 16\) is not supported"):
            iq.dequantize()


def test_row_not_a_whole_number_of_blocks(tmp_path):
    open_fails(write(tmp_path, gguf_file(GOOD_METADATA, [("odd", [33, 2], 2, bytes(64))])),
               "tensor 'odd'", "ne[0]=33", "Q4_0 block size 32")


def test_tensor_offset_past_end_of_file(tmp_path):
    data = bytearray(gguf_file(GOOD_METADATA, GOOD_TENSORS))
    at = data.index(b"ok2") + 3 + 4 + 8 + 4  # name, n_dims, ne[0], type -> offset field
    data[at : at + 8] = (1 << 20).to_bytes(8, "little")
    open_fails(write(tmp_path, bytes(data)), "tensor 'ok2'", "past the end")


def test_misaligned_tensor_offset(tmp_path):
    data = bytearray(gguf_file(GOOD_METADATA, GOOD_TENSORS))
    at = data.index(b"ok2") + 3 + 4 + 8 + 4
    data[at : at + 8] = (36).to_bytes(8, "little")
    open_fails(write(tmp_path, bytes(data)), "tensor 'ok2'", "not a multiple of the alignment 32")


def test_too_many_dimensions(tmp_path):
    open_fails(write(tmp_path, gguf_file(GOOD_METADATA, [("big", [1, 1, 1, 1, 1], 0, bytes(4))])),
               "tensor 'big'", "5 dimensions")


def test_duplicate_key_and_tensor(tmp_path):
    open_fails(write(tmp_path, gguf_file([*GOOD_METADATA, ("tokens", "u8", 1)]), "dup_key.gguf"),
               "duplicate metadata key 'tokens'")
    open_fails(write(tmp_path, gguf_file(GOOD_METADATA, [*GOOD_TENSORS, GOOD_TENSORS[0]]), "dup_tensor.gguf"),
               "tensor 'ok' appears twice")


def test_bad_alignment_metadata(tmp_path):
    open_fails(write(tmp_path, gguf_file([("general.alignment", "u64", 32)]), "a.gguf"), "'general.alignment' must be uint32")
    open_fails(write(tmp_path, gguf_file([("general.alignment", "u32", 48)]), "b.gguf"), "not a power of two")


def test_unknown_value_type_and_bad_utf8(tmp_path):
    data = bytearray(gguf_file([("weird", "u8", 1)]))
    data[data.index(b"weird") + 5] = 13  # value type 13 does not exist
    open_fails(write(tmp_path, bytes(data), "t.gguf"), "metadata 'weird'", "unknown value type 13")
    open_fails(write(tmp_path, gguf_file([("s", "str", b"\xff\xfe")]), "u.gguf"), "metadata 's'", "UTF-8")
    open_fails(write(tmp_path, gguf_file([("l", "arr:str", ["ok", b"\xc3"])]), "v.gguf"), "metadata 'l'[1]", "UTF-8")


def test_missing_and_empty_files(tmp_path):
    with pytest.raises(GGUFError, match="nothing.gguf: cannot open"):
        GGUFFile(tmp_path / "nothing.gguf")
    open_fails(write(tmp_path, b"", "empty.gguf"), "empty")
