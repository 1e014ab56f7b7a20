"""Exact eviction on a mixture-of-experts model (docs/architecture.md §3): drop a middle span of a Qwen3-MoE
(OLMoE, GraniteMoE, gpt-oss, Qwen2-MoE, GraniteMoeShared) cache and recompute the suffix; the cache is then
bit-identical (max |Δ| = 0) to a fresh prefill of the sequence without the span, and so are the next 32 greedy
logits.

With experts the claim needs more than batch-invariant matmuls: which tokens share an expert's matmul
depends on the chunk, so the router, the per-expert rows and the weighted sum must each give a token the
same bits whatever else is in the call (engine/transformer.py, Transformer.moe). The cache is filled in
chunks of 16 and the suffix recomputed in chunks of 16; the fresh prefill runs in one call.

On the numba backend (the engine's, batch-invariant) and on the rowwise twin of the reference backend; OLMoE
(full-width q/k norms, top-k weights not renormalised) and GraniteMoE (fused experts, the multipliers) once each;
gpt-oss (attention sinks, alternating windows, biased router and experts, the clamped SwiGLU) on both backends;
the shared experts: Qwen2-MoE (q/k/v biases, the sigmoid-gated shared expert) on both backends, GraniteMoeShared
(the ungated shared expert) on numba.
"""

from __future__ import annotations

import pytest

from .eviction import assert_exact_eviction, transformer

CASES = [("qwen3moe", "numba", "gguf-q8_0"), ("qwen3moe", "numba", "safetensors"), ("qwen3moe", "rowwise", "gguf-f32"),
         ("olmoe", "numba", "gguf-q8_0"), ("granitemoe", "numba", "safetensors"),
         ("gpt_oss", "numba", "gguf-q8_0"), ("gpt_oss", "numba", "safetensors"), ("gpt_oss", "rowwise", "gguf-f32"),
         ("qwen2moe", "numba", "gguf-q8_0"), ("qwen2moe", "numba", "safetensors"), ("qwen2moe", "rowwise", "gguf-f32"),
         ("granitemoeshared", "numba", "gguf-q8_0"), ("granitemoeshared", "numba", "safetensors")]


@pytest.mark.parametrize(("name", "backend", "fmt"), CASES, ids=[f"{n}-{b}-{f}" for n, b, f in CASES])
def test_exact_eviction_of_a_middle_span_equals_a_fresh_prefill_bit_for_bit(name, backend, fmt, tmp_path):
    assert_exact_eviction(transformer(name, backend, fmt, tmp_path))
