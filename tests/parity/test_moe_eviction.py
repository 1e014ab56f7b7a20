"""Exact eviction on a mixture-of-experts model (docs/architecture.md §3): drop a middle span of a Qwen3-MoE
cache and recompute the suffix; the cache is then bit-identical (max |Δ| = 0) to a fresh prefill of the
sequence without the span, and so are the next 32 greedy logits.

With experts the claim needs more than batch-invariant matmuls: which tokens share an expert's matmul
depends on the chunk, so the router, the per-expert rows and the weighted sum must each give a token the
same bits whatever else is in the call (engine/transformer.py, Transformer.moe). The cache is filled in
chunks of 16 and the suffix recomputed in chunks of 16; the fresh prefill runs in one call.

On the numba backend (the engine's, batch-invariant) and on the rowwise twin of the reference backend.
"""

from __future__ import annotations

import numpy as np
import pytest

from fakcore.engine.eviction import evict_cache, prefill
from fakcore.engine.kvcache import cut_tokens
from fakcore.engine.transformer import Transformer, load_weights
from fakcore.models.checkpoint import load_checkpoint
from tests.unit.kv.rowwise import RowwiseBackend
from tests.unit.kv.support import greedy

from .support import export, fak_backend

N_TOKENS, SPAN, STEPS = 48, (16, 28), 32
CASES = [("numba", "gguf-q8_0"), ("numba", "safetensors"), ("rowwise", "gguf-f32")]


@pytest.mark.parametrize(("backend", "fmt"), CASES, ids=[f"{b}-{f}" for b, f in CASES])
def test_exact_eviction_of_a_middle_span_equals_a_fresh_prefill_bit_for_bit(backend, fmt, tmp_path):
    _, path = export("qwen3moe", fmt, tmp_path)
    ckpt = load_checkpoint(path)
    be = RowwiseBackend() if backend == "rowwise" else fak_backend(backend)
    assert be.batch_invariant
    tf = Transformer(ckpt.config, load_weights(ckpt.config, ckpt.tensors, be, ckpt.source), be)
    ids = np.random.default_rng(7).integers(0, ckpt.config.vocab_size, N_TOKENS + 1).tolist()
    prompt, last = ids[:-1], ids[-1]

    cache = tf.new_cache()
    prefill(tf, cache, prompt, chunk=16)
    r = evict_cache(tf, cache, [SPAN], "exact", chunk=16, verify=True)
    fresh = tf.new_cache()
    prefill(tf, fresh, cut_tokens(prompt, [SPAN]), chunk=N_TOKENS)

    assert r.identical and r.max_abs_dev == 0.0 and r.layer_dev == [0.0] * ckpt.config.n_layers
    assert r.tokens_recomputed == N_TOKENS - SPAN[1] and cache.length == fresh.length == N_TOKENS - (SPAN[1] - SPAN[0])
    assert cache.digest() == fresh.digest() == r.digest_after
    n = cache.length
    assert np.array_equal(cache.k_pre[:, :, :n], fresh.k_pre[:, :, :n])
    ours, theirs = greedy(tf, cache, last, STEPS), greedy(tf, fresh, last, STEPS)
    assert np.array_equal(ours, theirs), f"max |Δ| = {np.abs(ours - theirs).max()}"
