"""Eviction on MPT, whose positions are ALiBi biases inside attention rather than rotations of the keys
(docs/architecture.md §3, engine/eviction.py).

Exact: drop a middle span and recompute the suffix; the cache is then bit-identical (max |Δ| = 0) to a fresh
prefill of the sequence without the span, and so are the next 32 greedy logits. What is new to the claim here: the
bias m_h * (j - i) is computed from cache slots in every call, so the recomputed suffix sees the same distances
as the fresh prefill; the kernel must give a query the same bits whatever else is in the call.

Shift: the gap closes and there is nothing to re-rotate (no RoPE tables); the survivors stand at their new slots,
so their layer-0 keys and values are the fresh prefill's bit for bit, and the keys are their pre-RoPE copies.
"""

from __future__ import annotations

import numpy as np
import pytest

from fakcore.engine.eviction import evict_cache, prefill

from .eviction import N_TOKENS, SPAN, assert_exact_eviction, transformer

CASES = [("mpt", "numba", "gguf-q8_0"), ("mpt", "rowwise", "safetensors"), ("mpt-6heads", "numba", "safetensors"),
         ("mpt-6heads", "rowwise", "gguf-f32")]


@pytest.mark.parametrize(("name", "backend", "fmt"), CASES, ids=[f"{n}-{b}-{f}" for n, b, f in CASES])
def test_exact_eviction_of_a_middle_span_equals_a_fresh_prefill_bit_for_bit(name, backend, fmt, tmp_path):
    tf = transformer(name, backend, fmt, tmp_path)
    assert tf.alibi is not None and tf.rope == []
    assert_exact_eviction(tf)


@pytest.mark.parametrize("backend", ["numba", "rowwise"])
def test_shift_eviction_needs_no_rerotation(backend, tmp_path):
    tf = transformer("mpt-6heads", backend, "safetensors", tmp_path)
    cache = tf.new_cache()
    prefill(tf, cache, np.random.default_rng(7).integers(0, tf.cfg.vocab_size, N_TOKENS).tolist(), chunk=16)
    r = evict_cache(tf, cache, [SPAN], "shift", chunk=16, verify=True)
    n = cache.length
    assert n == N_TOKENS - (SPAN[1] - SPAN[0]) and r.tokens_recomputed == 0
    assert np.array_equal(cache.k[:, :, :n], cache.k_pre[:, :, :n])  # no rotation anywhere
    assert r.layer_dev[0] == 0.0  # layer 0 has no view of the span: the fresh prefill's keys and values
    assert r.max_abs_dev > 0.0 and not r.identical  # above it the survivors still carry the span (SHIFT_NOTE)
