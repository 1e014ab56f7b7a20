"""Exact eviction on the hybrid (docs/architecture.md §3, engine/eviction.py): Qwen3-Next's linear layers keep a
recurrent state, not a span of keys, so evicting [a, b) restores the latest state checkpoint at or before a, cuts
the attention layers' KV there and recomputes every surviving token from it at its new position. The cache (KV,
every conv and recurrent state, every checkpoint: KVCache.digest) is then bit-identical to a fresh prefill of the
surviving tokens run in one call, and so are the next 32 greedy logits.

Checkpoints every 12 positions and the span (16, 28): the restore point (12) is not the span's start, so the four
survivors between them are recomputed too. The cache is filled in chunks of 16 and the suffix recomputed in chunks
of 16. On the numba backend (the engine's, batch-invariant) and on the rowwise twin of the reference backend; the
MoE variant (routed experts and the gated shared expert) once.
"""

from __future__ import annotations

import numpy as np
import pytest

from fakcore.engine.eviction import evict_cache, prefill
from fakcore.engine.kvcache import cut_tokens
from fakcore.engine.transformer import Transformer, load_weights
from fakcore.models.checkpoint import load_checkpoint
from fakcore.protocol import Span
from tests.unit.kv.rowwise import RowwiseBackend
from tests.unit.kv.support import greedy

from .support import export, fak_backend

N_TOKENS, EVERY, STEPS = 48, 12, 32


def transformer(backend: str, tmp_path, name: str = "qwen3next") -> Transformer:
    _, path = export(name, "safetensors", tmp_path)
    ckpt = load_checkpoint(path)
    be = RowwiseBackend() if backend == "rowwise" else fak_backend(backend)
    assert be.batch_invariant
    return Transformer(ckpt.config, load_weights(ckpt.config, ckpt.tensors, be, ckpt.source), be, checkpoint_every=EVERY)


CASES = [("qwen3next", "numba", (16, 28), 12), ("qwen3next", "rowwise", (16, 28), 12), ("qwen3next", "numba", (3, 9), 0),
         ("qwen3next", "numba", (36, 48), 36), ("qwen3next-moe", "numba", (16, 28), 12)]


@pytest.mark.parametrize(("name", "backend", "span", "restored"), CASES,
                         ids=[f"{n}-{b}-{s[0]}-{s[1]}" for n, b, s, _ in CASES])
def test_exact_eviction_equals_a_fresh_prefill_bit_for_bit(name, backend, span, restored, tmp_path):
    tf = transformer(backend, tmp_path, name)
    ids = np.random.default_rng(7).integers(0, tf.cfg.vocab_size, N_TOKENS + 1).tolist()
    prompt, last = ids[:-1], ids[-1]

    cache = tf.new_cache()
    prefill(tf, cache, prompt, chunk=16)
    cache.spans = [Span(block="quarantined", start=span[0], end=span[1])]
    r = evict_cache(tf, cache, [span], "exact", chunk=16, verify=True)
    survivors = cut_tokens(prompt, [span])
    fresh = tf.new_cache()
    prefill(tf, fresh, survivors, chunk=N_TOKENS)

    assert r.identical and r.max_abs_dev == 0.0 and r.layer_dev == [0.0] * tf.cfg.n_layers
    assert r.blocks == ["quarantined"] and cache.spans == []
    assert r.tokens_recomputed == len(survivors) - restored  # from the checkpoint, not from the span's start
    assert cache.length == fresh.length == len(survivors) and r.tokens_after == len(survivors)
    assert cache.digest() == fresh.digest() == r.digest_after != r.digest_before
    n = cache.length
    assert np.array_equal(cache.k[:, :, :n], fresh.k[:, :, :n]) and np.array_equal(cache.v[:, :, :n], fresh.v[:, :, :n])
    assert np.array_equal(cache.recurrent.conv, fresh.recurrent.conv)
    assert np.array_equal(cache.recurrent.ssm, fresh.recurrent.ssm)
    assert sorted(cache.recurrent.checkpoints) == sorted(fresh.recurrent.checkpoints) == list(range(EVERY, n + 1, EVERY))
    for p, (conv, ssm) in fresh.recurrent.checkpoints.items():
        assert np.array_equal(cache.recurrent.checkpoints[p][0], conv) and np.array_equal(cache.recurrent.checkpoints[p][1], ssm)
    ours, theirs = greedy(tf, cache, last, STEPS), greedy(tf, fresh, last, STEPS)
    assert np.array_equal(ours, theirs), f"max |Δ| = {np.abs(ours - theirs).max()}"
