"""ALiBi in engine-cuda's attention kernel (ModelConfig.alibi_max_bias): against the reference's attention with
the same slopes, over a fresh sequence and one with history (6 query heads on 2 key/value heads: the
non-power-of-two slope rule), and the same bits for a query alone as in a batch. An MPT model still cannot run
on this backend: it has no LayerNorm or plain-MLP activation, and says so by name when the model is built."""

from __future__ import annotations

import numpy as np
import pytest

from fak_engine_cuda.backend import CudaKVCache, KVPages
from fakcore.engine.backend import Segment
from fakcore.engine.kvcache import KVCache
from fakcore.engine.reference import ReferenceBackend
from fakcore.models.config import alibi_slopes
from tests.cuda.support import cuda_backend

TOL = 1e-5
N_HEADS, N_KV, HD = 6, 2, 16
ref = ReferenceBackend()
rng = np.random.default_rng(11)


@pytest.fixture(scope="module")
def be():
    return cuda_backend()


def dev(be, a):
    return be.cuda.to_device(np.ascontiguousarray(a, dtype=np.float32))


def attend(backend, caches, q, k, v, rows, slopes, device):
    put = (lambda a: dev(backend, a)) if device else (lambda a: a)
    out = backend.attention(put(q), put(k), put(k), put(v), [Segment(c, r) for c, r in zip(caches, rows, strict=True)],
                            0, 0, 0.25, 0.0, alibi=slopes)
    for c, r in zip(caches, rows, strict=True):  # what the forward pass does once every layer has its rows
        c.commit([0] * (r.stop - r.start))
    return backend.to_host(out)


def caches(kind, be, history):
    host = [KVCache(1, N_KV, HD, capacity=4) for _ in range(2)]
    host[1].write(0, 0, history[0], history[0], history[1])
    host[1].commit([1, 2, 3, 4])
    if kind != "cuda":
        return host
    pages = KVPages(be, (1, N_KV, HD), 2)
    made = [CudaKVCache(be, pages, 1, N_KV, HD, capacity=4, rope=be.host_rope) for _ in range(2)]
    made[1].copy_prefix(host[1], 4)  # the history up into the second cache's pages
    return made


def test_alibi_attention_matches_the_reference(be):
    slopes = np.asarray(alibi_slopes(N_HEADS, 8.0), np.float32)
    q = rng.standard_normal((5, N_HEADS, HD)).astype(np.float32)
    k, v = (rng.standard_normal((5, N_KV, HD)).astype(np.float32) for _ in range(2))
    history = (3 * rng.standard_normal((2, 4, N_KV, HD))).astype(np.float32)  # the second sequence: 4 cached tokens
    rows = [slice(0, 2), slice(2, 5)]
    got = attend(be, caches("cuda", be, history), q, k, v, rows, slopes, True)
    want = attend(ref, caches("ref", be, history), q, k, v, rows, slopes, False)
    err = np.abs(got - want).max()
    assert err <= TOL * max(1.0, np.abs(want).max()), f"max |Δ| {err:.3g}"
    plain = attend(ref, caches("ref", be, history), q, k, v, rows, None, False)
    assert np.abs(plain - want).max() > 1e-2  # the bias matters at these slopes


def test_alibi_attention_is_batch_invariant(be):
    slopes = np.asarray(alibi_slopes(N_HEADS, 4.0), np.float32)
    q = rng.standard_normal((3, N_HEADS, HD)).astype(np.float32)
    k, v = (rng.standard_normal((3, N_KV, HD)).astype(np.float32) for _ in range(2))
    history = rng.standard_normal((2, 4, N_KV, HD)).astype(np.float32)
    together = attend(be, caches("cuda", be, history), q, k, v, [slice(0, 1), slice(1, 3)], slopes, True)
    alone = caches("cuda", be, history)
    # the second sequence's two rows, one call each: the same bits as inside the batch
    one = attend(be, [alone[1]], q[1:2], k[1:2], v[1:2], [slice(0, 1)], slopes, True)
    two = attend(be, [alone[1]], q[2:3], k[2:3], v[2:3], [slice(0, 1)], slopes, True)
    assert np.array_equal(np.concatenate([one, two]), together[1:3])
