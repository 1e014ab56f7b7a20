"""GPTQ and AWQ layouts (formats/gptq.py, formats/awq.py) and fak's Q4_G block they are repacked into.

The packers quantize as the reference algorithms round (GPTQ's Quantizer, AutoAWQ's pseudo_quantize_tensor,
round-to-nearest); what they write must decode, through the numpy reference dequantizers and through the Q4_G
tensor the loader makes, to exactly the values they quantized to. The bit positions are also checked by hand,
so that a packer and a dequantizer cannot agree on a wrong layout.
"""

from __future__ import annotations

import numpy as np
import pytest

from fakcore.formats import awq, gptq
from fakcore.formats.quants import grouped
from fakcore.formats.quants.unpack import unpack

OUT, IN = 48, 256


def weights(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(0, 0.2, (OUT, IN)).astype(np.float32)


@pytest.mark.parametrize("group_size", [32, 64, 128, -1])
@pytest.mark.parametrize("sym", [True, False], ids=["sym", "asym"])
@pytest.mark.parametrize("act_order", [False, True], ids=["trivial", "act-order"])
@pytest.mark.parametrize("fmt", ["gptq", "gptq_v2"])
def test_gptq_pack_then_dequantize_is_exact(group_size, sym, act_order, fmt):
    w = weights()
    perm = np.random.default_rng(3).permutation(IN) if act_order else None
    offset = gptq.ZERO_OFFSET[fmt]
    t, deq = gptq.quantize(w, group_size, sym, perm, zero_offset=offset)
    size = IN if group_size == -1 else group_size
    assert t["qweight"].shape == (IN // 8, OUT) and t["qweight"].dtype == np.int32
    assert t["qzeros"].shape == (IN // size, OUT // 8) and t["scales"].shape == (IN // size, OUT)
    assert t["scales"].dtype == np.float16 and t["g_idx"].shape == (IN,)
    assert np.abs(deq - w).max() <= t["scales"].astype(np.float32).max() / 2 + 1e-6  # round to nearest
    assert np.array_equal(gptq.dequantize(t["qweight"], t["qzeros"], t["scales"], t["g_idx"], offset), deq)
    q4g = gptq.to_q4g("w", t["qweight"], t["qzeros"], t["scales"], t["g_idx"], offset, "f")
    assert q4g.qtype == "Q4_G" and q4g.shape == (OUT, IN)
    assert (q4g.columns is not None) == (act_order and group_size != -1)
    assert np.array_equal(q4g.dequantize(), deq)


@pytest.mark.parametrize("group_size", [32, 64, 128])
def test_awq_pack_then_dequantize_is_exact(group_size):
    w = weights(1)
    t, deq = awq.quantize(w, group_size)
    assert t["qweight"].shape == (IN, OUT // 8) and t["qzeros"].shape == (IN // group_size, OUT // 8)
    assert t["scales"].shape == (IN // group_size, OUT) and t["scales"].dtype == np.float16
    assert np.array_equal(awq.dequantize(t["qweight"], t["qzeros"], t["scales"], group_size), deq)
    q4g = awq.to_q4g("w", t["qweight"], t["qzeros"], t["scales"], group_size, "f")
    assert q4g.qtype == "Q4_G" and q4g.columns is None
    assert np.array_equal(q4g.dequantize(), deq)


def test_gptq_bits_by_hand():
    q = np.zeros((16, 8), np.uint32)  # (in, out)
    q[3, 5] = 9  # input 3 = row 0, nibble 3
    q[10, 0] = 0xF  # input 10 = row 1, nibble 2
    packed = gptq.pack_nibbles(q, axis=0)
    assert packed.shape == (2, 8) and packed.view(np.uint32)[0, 5] == 9 << 12 and packed.view(np.uint32)[1, 0] == 0xF << 8
    assert np.array_equal(gptq.unpack_input(packed), q)
    # v1 zeros are stored minus one: symmetric quantization's zero 8 is the well-known 0x77777777
    t, _ = gptq.quantize(weights(), 32, sym=True)
    assert np.all(t["qzeros"].view(np.uint32) == 0x77777777)
    t, _ = gptq.quantize(weights(), 32, sym=True, zero_offset=0)
    assert np.all(t["qzeros"].view(np.uint32) == 0x88888888)


def test_awq_bits_by_hand():
    q = np.zeros((1, 8), np.uint32)
    q[0, 2] = 7  # output 2 sits in nibble 1 (ORDER[1] == 2)
    q[0, 1] = 5  # output 1 in nibble 4
    packed = awq.pack_output(q).view(np.uint32)
    assert packed[0, 0] == (7 << 4) | (5 << 16)
    assert np.array_equal(awq.unpack_output(packed.view(np.int32)), q)


def test_act_order_columns_and_dequantize():
    g_idx = np.repeat(np.arange(4), 32)[np.random.default_rng(0).permutation(128)]
    columns, groups = grouped.block_groups(g_idx)
    assert np.array_equal(groups, np.arange(4)) and np.all(np.diff(g_idx[columns]) >= 0)
    assert grouped.block_groups(np.repeat(np.arange(4), [16, 48, 32, 32])) is None  # 16 + 48: no whole blocks


def test_q4g_unpacks_to_the_nibble_layout():
    rng = np.random.default_rng(2)
    q = rng.integers(0, 16, (5, 32))
    scale, offset = rng.uniform(0.01, 1, 5).astype(np.float32), rng.uniform(-1, 1, 5).astype(np.float32)
    blocks = grouped.pack_q4_g(q, scale, offset)
    assert blocks.shape == (5, 24) and np.array_equal(blocks[:, 8] & 0xF, q[:, 0]) and np.array_equal(blocks[:, 8] >> 4, q[:, 16])
    u = unpack("Q4_G", blocks)
    assert np.array_equal(u.q.reshape(5, 32), q) and np.array_equal(u.scale[:, 0], scale)
    assert np.array_equal(grouped.dequantize_q4_g(blocks), scale[:, None] * q.astype(np.float32) + offset[:, None])
