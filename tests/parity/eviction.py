"""Exact eviction on an exported random-init model, shared by the family eviction tests: fill a cache in
chunks of 16, drop a middle span, recompute the suffix in chunks of 16; the cache must then be
bit-identical (max |Δ| = 0) to a fresh prefill of the sequence without the span (run in one call), and so
must the next greedy logits."""

from __future__ import annotations

import numpy as np

from fakcore.engine.eviction import evict_cache, prefill
from fakcore.engine.kvcache import cut_tokens
from fakcore.engine.transformer import Transformer, load_weights
from fakcore.models.checkpoint import load_checkpoint
from tests.unit.kv.rowwise import RowwiseBackend
from tests.unit.kv.support import greedy

from .support import export, fak_backend

N_TOKENS, SPAN, STEPS = 48, (16, 28), 32


def transformer(name: str, backend: str, fmt: str, tmp_path) -> Transformer:
    """Family `name` exported as `fmt`, on `backend` ("numba", or "rowwise": the reference's batch-invariant twin)."""
    _, path = export(name, fmt, tmp_path)
    ckpt = load_checkpoint(path)
    be = RowwiseBackend() if backend == "rowwise" else fak_backend(backend)
    assert be.batch_invariant
    return Transformer(ckpt.config, load_weights(ckpt.config, ckpt.tensors, be, ckpt.source), be)


def assert_exact_eviction(tf: Transformer) -> None:
    ids = np.random.default_rng(7).integers(0, tf.cfg.vocab_size, N_TOKENS + 1).tolist()
    prompt, last = ids[:-1], ids[-1]

    cache = tf.new_cache()
    prefill(tf, cache, prompt, chunk=16)
    r = evict_cache(tf, cache, [SPAN], "exact", chunk=16, verify=True)
    fresh = tf.new_cache()
    prefill(tf, fresh, cut_tokens(prompt, [SPAN]), chunk=N_TOKENS)

    assert r.identical and r.max_abs_dev == 0.0 and r.layer_dev == [0.0] * tf.cfg.n_layers
    assert r.tokens_recomputed == N_TOKENS - SPAN[1] and cache.length == fresh.length == N_TOKENS - (SPAN[1] - SPAN[0])
    assert cache.digest() == fresh.digest() == r.digest_after
    n = cache.length
    assert np.array_equal(cache.k_pre[:, :, :n], fresh.k_pre[:, :, :n])
    ours, theirs = greedy(tf, cache, last, STEPS), greedy(tf, fresh, last, STEPS)
    assert np.array_equal(ours, theirs), f"max |Δ| = {np.abs(ours - theirs).max()}"
