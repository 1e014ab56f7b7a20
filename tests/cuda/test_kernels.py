"""Every engine-cuda kernel against the numpy reference (formats/quants, engine/reference.py).

- decoding (the row-lookup kernel of each format) is the reference's dequantization bit for bit;
- each matvec is within TOL of x @ dequantized.T (relative to sum |w x|: only the order of the sums
  differs), argmax-exact per token, and a token's row has the same bits alone as in a batch of five;
- norms, RoPE, gated activations, soft-capping and attention are within TOL of the reference's.
"""

from __future__ import annotations

import numpy as np
import pytest

from fak_engine_cuda.backend import CudaKVCache, KVPages
from fakcore.engine.backend import BackendError, Segment
from fakcore.engine.kvcache import KVCache
from fakcore.engine.reference import ReferenceBackend
from fakcore.formats.quants import QTYPES, layout
from fakcore.formats.tensor import Tensor
from fakcore.models.config import RopeScaling
from tests.cuda.support import cuda_backend, quant_blocks
from tests.unit.formats.formats_helpers import random_blocks

TOL = 1e-5  # |Δ| / (sum |w x| or the magnitude of the reference), float32 sums in another order
QUANTS = ["Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q4_K", "Q5_K", "Q6_K"]
FLOATS = ["F32", "F16", "BF16"]

ref = ReferenceBackend()
rng = np.random.default_rng(7)


@pytest.fixture(scope="module")
def be():
    return cuda_backend()


def dev(be, a):
    return be.cuda.to_device(np.ascontiguousarray(a, dtype=np.float32))


@pytest.mark.parametrize("qtype", FLOATS + QUANTS)
def test_decoding_is_the_reference_dequantization_bit_for_bit(be, qtype):
    cols = 512 if qtype.endswith("_K") else 64  # two super-blocks / blocks per row, every f16 value class
    raw = random_blocks(qtype, 3 * cols // QTYPES[qtype].block_size, seed=3).reshape(-1)
    t = Tensor("w", qtype, (3, cols), raw, "random")
    got, want = be.dequantize(be.matrix(t)), t.dequantize()
    assert np.array_equal(got, want, equal_nan=True)
    assert np.array_equal(np.signbit(got), np.signbit(want))


def weights(qtype: str, rows: int, cols: int) -> Tensor:
    if qtype in FLOATS:
        return Tensor.from_array("w", rng.standard_normal((rows, cols)).astype(np.float32) / np.sqrt(cols), qtype)
    return quant_blocks(qtype, rows, cols, seed=rows + cols)


@pytest.mark.parametrize("qtype", FLOATS + QUANTS)
def test_linear_matches_the_reference_and_is_batch_invariant(be, qtype):
    rows, cols = 9, 256 if qtype.endswith("_K") else 64  # 9 rows: a partial block of output rows
    t = weights(qtype, rows, cols)
    w, deq = be.matrix(t), t.dequantize()
    x = rng.standard_normal((5, cols)).astype(np.float32)
    bias = rng.standard_normal(rows).astype(np.float32)
    y = be.to_host(be.linear(dev(be, x), w, dev(be, bias)))
    want = x @ deq.T + bias
    scale = np.abs(x) @ np.abs(deq).T + np.abs(bias)
    assert (np.abs(y - want) <= TOL * scale).all(), f"max |Δ| {np.abs(y - want).max():.3g}"
    assert (y.argmax(axis=1) == want.argmax(axis=1)).all()
    for i in (0, 3):  # one token alone: the bits it had in the batch
        alone = be.to_host(be.linear(dev(be, x[i:i + 1]), w, dev(be, bias)))
        assert np.array_equal(alone[0], y[i])


def test_embedding_rows_are_decoded_rows_times_the_scale(be):
    t = quant_blocks("Q4_1", 6, 64)
    ids = np.array([5, 0, 5, 2])
    got = be.to_host(be.embed(be.matrix(t), ids, 2.5))
    assert np.array_equal(got, t.dequantize()[ids] * np.float32(2.5))


@pytest.mark.parametrize("qtype", ["Q2_K", "Q3_K", "IQ4_NL", "TQ2_0", "MXFP4"])
def test_a_type_without_a_kernel_is_an_error_naming_it(be, qtype):
    qt = layout(qtype)
    raw = np.zeros(2 * 256 // qt.block_size * qt.type_size, np.uint8)
    t = Tensor("blk.0.attn_q.weight", qtype, (2, 256), raw, "model.gguf")
    with pytest.raises(BackendError, match=f"blk.0.attn_q.weight.*no kernel for {qtype}"):
        be.matrix(t)


def close(got, want, tol=TOL):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape
    err = np.abs(got - want).max()
    assert err <= tol * max(1.0, np.abs(want).max()), f"max |Δ| {err:.3g}"


def test_elementwise_ops_match_the_reference(be):
    x = rng.standard_normal((3, 2, 16)).astype(np.float32)
    g, u = rng.standard_normal((3, 40)).astype(np.float32), rng.standard_normal((3, 40)).astype(np.float32)
    w = (1 + 0.1 * rng.standard_normal(16)).astype(np.float32)
    close(be.to_host(be.rmsnorm(dev(be, x), dev(be, w), 1e-6)), ref.rmsnorm(x, w, 1e-6))
    for act in ("silu", "gelu_tanh"):
        close(be.to_host(be.gated(dev(be, g), dev(be, u), act)), ref.gated(g, u, act))
    close(be.to_host(be.softcap(dev(be, g * 20), 30.0)), ref.softcap(g * 20, 30.0))
    assert np.array_equal(be.to_host(be.add(dev(be, g), dev(be, u))), g + u)
    assert np.array_equal(be.to_host(be.take_rows(dev(be, g), np.array([2, 0]))), g[[2, 0]])
    pos = np.array([0, 7, 300])
    for scaling in (RopeScaling("none"), RopeScaling("llama3", 8.0, 1.0, 4.0, 64)):
        table, rtable = be.rope_table(16, 10000.0, scaling), ref.rope_table(16, 10000.0, scaling)
        close(be.to_host(be.rope(dev(be, x), pos, table)), ref.rope(x, pos, rtable))


@pytest.mark.parametrize("window, softcap", [(0, 0.0), (3, 0.0), (0, 20.0)], ids=["causal", "window", "softcap"])
def test_attention_matches_the_reference_and_fills_the_cache(be, window, softcap):
    n_heads, n_kv, hd = 4, 2, 16
    q = rng.standard_normal((5, n_heads, hd)).astype(np.float32)
    k_pre, k, v = (rng.standard_normal((5, n_kv, hd)).astype(np.float32) for _ in range(3))
    pages = KVPages(be, (1, n_kv, hd), 1)  # one page of PAGE slots: the second cache makes the pool grow
    ours = [CudaKVCache(be, pages, 1, n_kv, hd, capacity=4, rope=be.host_rope) for _ in range(2)]
    theirs = [KVCache(1, n_kv, hd, capacity=4) for _ in range(2)]
    history = rng.standard_normal((2, 3, n_kv, hd)).astype(np.float32)  # the second sequence has 3 cached tokens
    theirs[1].write(0, 0, history[0], history[0], history[1])
    theirs[1].commit([1, 2, 3])
    ours[1].copy_prefix(theirs[1], 3)  # a host cache's slots up into the pages
    assert pages.total > 1 and ours[0].page_ids != ours[1].page_ids
    rows = [slice(0, 2), slice(2, 5)]  # 2 new tokens of a fresh sequence, 3 of the one with history
    got = be.to_host(be.attention(dev(be, q), dev(be, k_pre), dev(be, k), dev(be, v), [Segment(c, r) for c, r in zip(ours, rows, strict=True)],
                                  0, window, 0.25, softcap))
    want = ref.attention(q, k_pre, k, v, [Segment(c, r) for c, r in zip(theirs, rows, strict=True)], 0, window, 0.25, softcap)
    close(got, want)
    for a, b in zip(ours, theirs, strict=True):  # the pages hold exactly the rows written
        n = b.length + (2 if b is theirs[0] else 3)
        keys, values, pre = a.device_rows(0, n)
        assert np.array_equal(keys, b.k[:, :, :n]) and np.array_equal(values, b.v[:, :, :n])
        assert np.array_equal(pre, b.k_pre[:, :, :n])
