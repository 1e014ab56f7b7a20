"""Exact eviction on the classic decoders (docs/architecture.md §3): drop a middle span of the cache and
recompute the suffix; the cache is then bit-identical (max |Δ| = 0) to a fresh prefill of the sequence
without the span, and so are the next 32 greedy logits.

What is new to the claim here: LayerNorm (the mean and variance of each row, per-head gains for StableLM's
q/k norms), RoPE over part of each head (the rest of the key passes), parallel residuals, the plain GELU MLP
with biases, Granite's multipliers, YaRN's cos/sin scaled by its attention factor, Falcon's multi-query and
grouped attention with two LayerNorms. Each kernel must give a token the same bits whatever else is in the
call; the cache is filled in chunks of 16, the suffix recomputed in chunks of 16, the fresh prefill run in one
call.

Shift eviction re-rotates keys from their pre-RoPE copies (KVCache.rerotate); with partial RoPE the
re-rotation must leave the unrotated dims as they are and reproduce the forward pass's keys bit for bit.
"""

from __future__ import annotations

import numpy as np
import pytest

from fakcore.engine.eviction import prefill

from .eviction import assert_exact_eviction, transformer

CASES = [("gptneox", "numba", "gguf-q8_0"), ("gptneox", "numba", "safetensors"), ("gptneox", "rowwise", "gguf-f32"),
         ("stablelm", "numba", "safetensors"), ("stablelm", "rowwise", "gguf-f32"), ("phi3", "numba", "gguf-q8_0"),
         ("phi3-longrope", "numba", "safetensors"), ("granite", "numba", "safetensors"),
         ("llama-yarn", "numba", "gguf-q8_0"), ("qwen2-yarn", "rowwise", "safetensors"), ("falcon", "numba", "gguf-q8_0"),
         ("falcon-7b", "numba", "safetensors"), ("falcon-sequential", "rowwise", "safetensors")]


@pytest.mark.parametrize(("name", "backend", "fmt"), CASES, ids=[f"{n}-{b}-{f}" for n, b, f in CASES])
def test_exact_eviction_of_a_middle_span_equals_a_fresh_prefill_bit_for_bit(name, backend, fmt, tmp_path):
    assert_exact_eviction(transformer(name, backend, fmt, tmp_path))


@pytest.mark.parametrize("backend", ["numba", "rowwise"])
def test_rerotation_with_partial_rope_reproduces_the_forward_keys(backend, tmp_path):
    tf = transformer("gptneox", backend, "safetensors", tmp_path)
    assert tf.cfg.rotary_dim < tf.cfg.head_dim  # half of each head turns, half passes
    cache = tf.new_cache()
    prefill(tf, cache, np.random.default_rng(3).integers(0, tf.cfg.vocab_size, 24).tolist(), chunk=8)
    n = cache.length
    keys = cache.k[:, :, :n].copy()
    assert np.array_equal(keys[..., tf.cfg.rotary_dim:], cache.k_pre[:, :, :n, tf.cfg.rotary_dim:])
    cache.rerotate(0, n, tf.rope)
    assert np.array_equal(cache.k[:, :, :n], keys)
