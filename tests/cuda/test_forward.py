"""Whole forward passes on "cuda" against "reference", and the KV-MMU's bit-identity claims on the device.

- a tiny random Llama (F32 and the legacy quant types, same weights on both backends) and the synthetic
  model: logits within LOGIT_TOL of the reference's and argmax-exact, every row;
- cached decode: each step's logits have the bits of that row in a full recompute; two sequences decoded in
  one batch have the bits each has alone;
- exact eviction of a middle span leaves the cache bit-identical to a fresh prefill without it (digest,
  pre-RoPE keys), and the next greedy logits too (max |Δ| = 0); shift eviction's re-rotation is the forward
  pass's own (layer 0 identical to a fresh prefill).
"""

from __future__ import annotations

import numpy as np
import pytest

from fakcore.engine.backend import Segment
from fakcore.engine.eviction import evict_cache, prefill
from fakcore.engine.kvcache import cut_tokens
from fakcore.engine.loader import load_model
from fakcore.engine.reference import ReferenceBackend
from fakcore.protocol import Span
from tests.cuda.support import EXACT_LANES, MODEL_LANES, cuda_backend, tiny

LOGIT_TOL = 1e-4  # max |Δ| of logits (magnitudes ~1-10): float32 sums in another order, 2 layers deep
rng = np.random.default_rng(11)
PROMPT = rng.integers(0, 48, 12).tolist()


def forward(tf, tokens, cache=None):
    cache = cache or tf.new_cache()
    return tf.forward(np.asarray(tokens, np.int64), [Segment(cache, slice(0, len(tokens)))]), cache


@pytest.mark.parametrize("qtype", ["F32", "Q8_0", "Q4_0", "Q4_1"])
def test_tiny_llama_logits_match_the_reference(qtype):
    ours, _ = forward(tiny("cuda", qtype), PROMPT[:6])
    theirs, _ = forward(tiny("reference", qtype), PROMPT[:6])
    err = np.abs(ours - theirs).max()
    print(f"\ntiny llama {qtype}: logits max|Δ| vs reference {err:.3g}")
    assert err <= LOGIT_TOL and (ours.argmax(-1) == theirs.argmax(-1)).all()


def test_synthetic_model_logits_match_the_reference():
    tokens = [256, 72, 105]  # <|bos|>Hi
    ours = load_model("synthetic", cuda_backend(MODEL_LANES)).transformer
    theirs = load_model("synthetic", ReferenceBackend()).transformer
    a, _ = forward(ours, tokens)
    b, _ = forward(theirs, tokens)
    err = np.abs(a - b).max()
    print(f"\nsynthetic: logits max|Δ| vs reference {err:.3g}")
    assert err <= LOGIT_TOL and (a.argmax(-1) == b.argmax(-1)).all()


def test_cached_decode_has_the_bits_of_a_full_recompute():
    tf = tiny("cuda")
    full, _ = forward(tf, PROMPT)
    _, cache = forward(tf, PROMPT[:9])
    for i in range(9, len(PROMPT)):  # one token per step on the cache
        step, _ = forward(tf, [PROMPT[i]], cache)
        assert np.array_equal(step[0], full[i])


def test_a_batch_of_sequences_has_the_bits_each_has_alone():
    tf = tiny("cuda")
    a, b = PROMPT[:5], PROMPT[5:12]
    ca, cb = tf.new_cache(), tf.new_cache()
    both = tf.forward(np.asarray(a + b, np.int64), [Segment(ca, slice(0, 5)), Segment(cb, slice(5, 12))])
    alone_a, cache_a = forward(tf, a)
    alone_b, _ = forward(tf, b)
    assert np.array_equal(both[:5], alone_a) and np.array_equal(both[5:], alone_b)
    assert ca.digest() == cache_a.digest()


def greedy(tf, cache, first, steps):
    out, token = [], first
    for _ in range(steps):
        logits, _ = forward(tf, [token], cache)
        out.append(logits[0])
        token = int(np.argmax(logits[0]))
    return np.stack(out)


IDS, NEXT, TOOL = PROMPT[:11], PROMPT[11], (4, 8)  # a held prompt, its next token, the tool result's span


def filled(tf, chunk):
    cache = tf.new_cache()
    prefill(tf, cache, IDS, chunk)
    cache.spans = [Span(block="before", start=0, end=TOOL[0]), Span(block="tool", start=TOOL[0], end=TOOL[1]),
                   Span(block="after", start=TOOL[1], end=len(IDS))]
    return cache


def test_exact_eviction_of_a_middle_span_equals_a_fresh_prefill_bit_for_bit():
    tf = tiny("cuda", lanes=EXACT_LANES)
    cache = filled(tf, chunk=4)
    ranges = cache.ranges_of({"tool"})
    assert ranges == [TOOL]
    r = evict_cache(tf, cache, ranges, "exact", chunk=2, verify=True)
    fresh = tf.new_cache()
    prefill(tf, fresh, cut_tokens(IDS, ranges), 8)
    assert r.identical and r.max_abs_dev == 0.0 and r.layer_dev == [0.0, 0.0] and r.batch_invariant
    assert r.backend == "cuda" and r.tokens_recomputed == len(IDS) - TOOL[1]
    assert cache.digest() == fresh.digest() == r.digest_after
    n = cache.length
    assert np.array_equal(cache.k_pre[:, :, :n], fresh.k_pre[:, :, :n])
    for mine, theirs in zip(cache.device_rows(0, n), fresh.device_rows(0, n), strict=True):  # the pages too
        assert np.array_equal(mine, theirs)
    assert np.array_equal(greedy(tf, cache, NEXT, 3), greedy(tf, fresh, NEXT, 3))


def test_shift_eviction_re_rotates_with_the_forward_pass_rope():
    tf = tiny("cuda")
    cache = filled(tf, chunk=len(IDS))
    r = evict_cache(tf, cache, [TOOL], "shift", verify=True)
    n = len(IDS) - (TOOL[1] - TOOL[0])
    assert cache.length == n and r.tokens_recomputed == 0 and r.layer_dev[0] == 0.0 and r.max_abs_dev > 0
    keys, values, pre = cache.device_rows(0, n)  # the moves' host arithmetic went back up to the pages
    assert np.array_equal(keys, cache.k[:, :, :n]) and np.array_equal(values, cache.v[:, :, :n])
    assert np.array_equal(pre, cache.k_pre[:, :, :n])
