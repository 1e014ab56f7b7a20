"""The fast path on real weights: SmolLM2-135M-Instruct Q4_1 through the numba backend agrees token for
token with the f32 reference backend for 64 greedy tokens on three chat prompts (generation continues
past end-of-turn, which makes the check longer and stricter), and prefill is batch-invariant."""

from __future__ import annotations

import numpy as np
import pytest

import fak_engine_cpu.backend  # noqa: F401  registers "numba"
from fakcore.engine.backend import Segment
from fakcore.engine.loader import load_model, make_backend
from fakcore.engine.prompt import build_prompt
from fakcore.models.sources import pulled_path
from fakcore.protocol import ChatMessage, GenerateRequest
from tests.unit.enginecpu.support import greedy

pytestmark = pytest.mark.slow

PROMPTS = ("What is the capital of France?", "Write a haiku about the sea.", "Explain in two sentences what a hash table is.")
NEW_TOKENS = 64


@pytest.fixture(scope="module")
def models():
    assert pulled_path("smollm2-135m").exists(), "SmolLM2 weights missing: run `fak model pull smollm2-135m`"
    return load_model("smollm2-135m", make_backend("reference")), load_model("smollm2-135m", make_backend("numba"))


@pytest.mark.parametrize("prompt", PROMPTS)
def test_numba_greedy_equals_reference_for_64_tokens(models, prompt):
    ref, fast = models
    ids = build_prompt(ref, GenerateRequest(request_id="p", model="smollm2-135m",
                                            messages=[ChatMessage(role="user", content=prompt)])).ids
    ref_tokens, ref_logits = greedy(ref, ids, NEW_TOKENS)
    fast_tokens, fast_logits = greedy(fast, ids, NEW_TOKENS)
    print(f"\n{prompt!r}: logits max|Δ| {np.abs(ref_logits - fast_logits).max():.2e}; "
          f"{ref.tokenizer.decode(fast_tokens)!r}")
    assert fast_tokens == ref_tokens


def test_prefill_is_chunk_invariant_on_real_weights(models):
    _, fast = models
    ids = build_prompt(fast, GenerateRequest(request_id="p", model="smollm2-135m",
                                             messages=[ChatMessage(role="user", content=PROMPTS[2])])).ids
    tf = fast.transformer
    whole = tf.new_cache()
    a = tf.forward(np.array(ids), [Segment(whole, slice(0, len(ids)))])
    pieces = tf.new_cache()
    b = np.concatenate([tf.forward(np.array(ids[i:i + 5]), [Segment(pieces, slice(0, len(ids[i:i + 5])))])
                        for i in range(0, len(ids), 5)])
    n = len(ids)
    assert np.array_equal(a, b)
    assert np.array_equal(whole.k[:, :, :n], pieces.k[:, :, :n]) and np.array_equal(whole.v[:, :, :n], pieces.v[:, :, :n])


def test_attention_table_is_rebuilt_for_each_pass_even_on_the_same_segments_list(models):
    """The numba backend builds its table of caches at a pass's first attention layer and reuses it for the
    later ones (backend.attention). A caller that passes one list object to consecutive forward passes (the
    caches grew in between) must get what fresh lists give."""
    _, nb = models
    tf = nb.transformer
    ids, rows = np.array([1, 2, 3, 4, 5], np.int64), np.array([2, 4], np.int64)
    a, b = tf.new_cache(), tf.new_cache()
    same = [Segment(a, slice(0, 3)), Segment(b, slice(3, 5))]
    got = [tf.forward(ids + step, same, rows) for step in range(3)]
    a, b = tf.new_cache(), tf.new_cache()
    want = [tf.forward(ids + step, [Segment(a, slice(0, 3)), Segment(b, slice(3, 5))], rows) for step in range(3)]
    for step in range(3):
        assert np.array_equal(got[step], want[step]), step
