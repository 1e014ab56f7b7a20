"""The attention kernel's register tiles: every shape gives the same bits (each score is one chain of FMAs
over the features in order, each output element one chain over the keys), so the AVX-512 and AVX2 shapes
agree and a query's result never depends on the tile it lands in; and the values are the products asked."""

from __future__ import annotations

import numpy as np
import pytest
from numba import njit

from fak_engine_cpu import attention

SHAPES = [(1, 1), (1, 8), (2, 3), (3, 2), (4, 1), (4, 4)]  # (query heads, 16-float vectors) per tile


def scores_with(heads: int, vectors: int, half: bool = False):
    qk = attention._make_qk(heads, vectors, half)

    @njit
    def run(q, keys_t, kvh, lo, count, scores):
        G = scores.shape[0]
        for g0 in range(0, G - G % heads, heads):
            for j0 in range(0, count, 16 * vectors):
                qk(q, keys_t, kvh, lo, count, g0, j0, scores)

    return run


def values_with(heads: int, vectors: int, half: bool = False):
    pv = attention._make_pv(heads, vectors, half)

    @njit
    def run(p, values, kvh, lo, count, out):
        G, D = p.shape[0], values.shape[2]
        for g0 in range(0, G - G % heads, heads):
            for dd0 in range(0, D, 16 * vectors):
                pv(p, values, kvh, lo, count, g0, dd0, out)

    return run


@pytest.mark.parametrize("D,S,lo,count", [(64, 100, 0, 37), (72, 70, 5, 64), (256, 300, 11, 129)])
def test_every_tile_shape_gives_the_same_scores_and_outputs(D, S, lo, count):
    rng = np.random.default_rng(D + count)
    Hkv, G, kvh = 2, 12, 1  # 12 heads a group: every shape's head count divides it
    q = rng.standard_normal((Hkv * G, D)).astype(np.float32)
    keys_t = rng.standard_normal((Hkv, D, S)).astype(np.float32)
    values = rng.standard_normal((Hkv, S, D)).astype(np.float32)
    p = rng.random((G, count)).astype(np.float32)
    want_scores = q[kvh * G:(kvh + 1) * G].astype(np.float64) @ keys_t[kvh, :, lo:lo + count].astype(np.float64)
    want_out = p.astype(np.float64) @ values[kvh, lo:lo + count].astype(np.float64)
    got_scores, got_out = [], []
    for heads, vectors in SHAPES:
        scores = np.full((G, count), np.nan, np.float32)
        scores_with(heads, vectors)(q, keys_t, kvh, lo, count, scores)
        out = np.full((Hkv * G, D), np.nan, np.float32)
        values_with(heads, vectors)(p, values, kvh, lo, count, out)
        assert np.isnan(out[:G]).all()  # another key/value head's rows: untouched
        np.testing.assert_allclose(scores, want_scores, rtol=1e-4, atol=1e-4 * np.sqrt(D))
        np.testing.assert_allclose(out[G:], want_out, rtol=1e-4, atol=1e-4 * np.sqrt(count))
        got_scores.append(scores)
        got_out.append(out[G:])
    for scores, out in zip(got_scores[1:], got_out[1:], strict=True):
        assert np.array_equal(scores, got_scores[0]) and np.array_equal(out, got_out[0])


NAN_BITS = np.uint16(0x7E00)  # a half NaN: what the padding holds in the test below, never to be seen


@pytest.mark.parametrize("D,S,lo,count", [(64, 100, 0, 37), (72, 70, 5, 64), (256, 300, 11, 129), (64, 33, 0, 33)])
def test_half_tiles_equal_float_tiles_on_the_rounded_values(D, S, lo, count):
    """The int8 path's caches keep half-float copies of keys and values for the kernel to read (NumbaKVCache,
    half), loaded a whole vector at a time: the keys in blocks of 16 positions (a tile starts on a block, so
    the kernel scores from the block boundary before lo and keeps the rest, as here), the values padded. Every
    tile shape gives exactly the float32 tiles' bits on the same values rounded to half floats (widening is
    exact; the FMAs are the same), and nothing past the valid keys or features (NaN here) reaches a score or
    an output."""
    rng = np.random.default_rng(D + count + 1)
    Hkv, G, kvh = 2, 12, 1
    q = rng.standard_normal((Hkv * G, D)).astype(np.float32)
    keys_t = rng.standard_normal((Hkv, D, S)).astype(np.float16)
    values = rng.standard_normal((Hkv, S, D)).astype(np.float16)
    p = rng.random((G, count)).astype(np.float32)
    blocks = attention.key_blocks(S)
    keys_half = np.full((Hkv, D, blocks * attention.KEY_BLOCK), NAN_BITS, np.uint16)
    keys_half[:, :, :S] = keys_t.view(np.uint16)
    keys_half = np.ascontiguousarray(keys_half.reshape(Hkv, D, blocks, attention.KEY_BLOCK).transpose(0, 2, 1, 3))
    skip = lo % attention.KEY_BLOCK
    values_half = np.full((Hkv, S + 1, D), NAN_BITS, np.uint16)
    values_half[:, :S] = values.view(np.uint16)
    for heads, vectors in SHAPES:
        want, got = np.full((G, count), np.nan, np.float32), np.full((G, count), np.nan, np.float32)
        scores_with(heads, vectors)(q, keys_t.astype(np.float32), kvh, lo, count, want)
        scored = np.full((G, skip + count), np.nan, np.float32)
        scores_with(heads, vectors, half=True)(q, keys_half, kvh, lo - skip, skip + count, scored)
        got = scored[:, skip:]
        assert np.array_equal(got, want) and not np.isnan(scored).any()
        want, got = np.full((Hkv * G, D), np.nan, np.float32), np.full((Hkv * G, D), np.nan, np.float32)
        values_with(heads, vectors)(p, values.astype(np.float32), kvh, lo, count, want)
        values_with(heads, vectors, half=True)(p, values_half, kvh, lo, count, got)
        assert np.array_equal(got[G:], want[G:]) and not np.isnan(got[G:]).any() and np.isnan(got[:G]).all()
