"""unpack(): integer values, scales and offsets that rebuild each type's dequantization bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

from fakcore.formats.quants import layout
from fakcore.formats.quants.unpack import INTEGER_TYPES, unpack


def random_blocks(qtype: str, n: int, rng: np.random.Generator) -> np.ndarray:
    qt = layout(qtype)
    blocks = rng.integers(0, 256, (n, qt.type_size), dtype=np.uint8)
    # finite f16 scale fields wherever the layout keeps them
    fields = {"Q4_0": [0], "Q4_1": [0, 2], "Q5_0": [0], "Q5_1": [0, 2], "Q8_0": [0], "Q2_K": [80, 82], "Q3_K": [108],
              "Q4_K": [0, 2], "Q5_K": [0, 2], "Q6_K": [208], "Q4_G": [], "TQ1_0": [52], "TQ2_0": [64],
              "MXFP4": []}[qtype]
    for at in fields:
        blocks[:, at:at + 2] = rng.uniform(-2, 2, n).astype(np.float16).view(np.uint8).reshape(n, 2)
    if qtype == "MXFP4":  # e8m0 scales of real weights, 2^-28 .. 2^12 (test_mxfp4_extreme_scales: the rest)
        blocks[:, 0] = rng.integers(100, 141, n, dtype=np.uint8)
    if qtype == "Q4_G":  # fak's own block: f32 scale and offset
        blocks[:, 0:8] = rng.uniform(-2, 2, (n, 2)).astype("<f4").view(np.uint8)
    return blocks


@pytest.mark.parametrize("qtype", INTEGER_TYPES)
def test_unpack_rebuilds_dequantize_exactly(qtype):
    rng = np.random.default_rng(7)
    blocks = random_blocks(qtype, 300, rng)
    u = unpack(qtype, blocks)
    assert u.q.dtype == np.int8 and u.scale.dtype == np.float32 and u.offset.dtype == np.float32
    rebuilt = (u.scale[:, :, None] * u.q.astype(np.float32) + u.offset[:, :, None]).reshape(len(blocks), -1)
    expected = layout(qtype).dequantize(blocks)
    # equal as numbers (a zero offset turns -0.0 into +0.0, which no kernel can tell apart)
    assert np.array_equal(rebuilt, expected.astype(np.float32))


def test_mxfp4_extreme_scales_unpack_exactly():
    """The subnormal half scales (e 0 and 1), the smallest normal one and the largest whose 12x is finite."""
    blocks = np.random.default_rng(9).integers(0, 256, (4, 17), dtype=np.uint8)
    blocks[:, 0] = [0, 1, 2, 250]
    u = unpack("MXFP4", blocks)
    assert u.scale.ravel().tolist() == [2.0 ** -128, 2.0 ** -127, 2.0 ** -126, 2.0 ** 122]
    rebuilt = (u.scale[:, :, None] * u.q.astype(np.float32)).reshape(4, -1)
    assert np.array_equal(rebuilt, layout("MXFP4").dequantize(blocks))
