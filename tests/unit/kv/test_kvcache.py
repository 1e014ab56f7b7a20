"""The KV cache's bookkeeping and its KV-MMU moves (reference backend): drop, rerotate, copy_prefix keep
their contracts (kvcache.py) bit for bit, memory and metadata together."""

from __future__ import annotations

import numpy as np
import pytest

from fakcore.engine.backend import Segment
from fakcore.engine.eviction import evict_cache
from fakcore.engine.kvcache import KVCache, cut_spans, cut_tokens, merge_ranges
from fakcore.protocol import Span
from tests.unit.kv.support import filled, model

TOKENS = list(np.random.default_rng(1).integers(0, 256, 60))


def span(block: str, start: int, end: int) -> Span:
    return Span(block=block, start=start, end=end)


@pytest.fixture(scope="module")
def ref():
    return model("synthetic", "reference")


def test_ranges_tokens_and_spans_after_a_cut():
    assert merge_ranges([(5, 9), (1, 3), (8, 12), (20, 20)]) == [(1, 3), (5, 12)]
    assert cut_tokens(list(range(10)), [(2, 4), (7, 8)]) == [0, 1, 4, 5, 6, 8, 9]
    spans = [span("a", 0, 2), span("b", 2, 4), span("c", 4, 7), span("d", 7, 8), span("e", 8, 10)]
    got = cut_spans(spans, [(2, 4), (7, 8)])
    assert [(s.block, s.start, s.end) for s in got] == [("a", 0, 2), ("c", 2, 5), ("e", 5, 7)]
    partly = cut_spans([span("x", 3, 9)], [(5, 7)])
    assert [(s.start, s.end) for s in partly] == [(3, 7)]


def test_drop_and_truncate_keep_tokens_and_spans_in_step():
    c = KVCache(1, 1, 4)
    c.commit(list(range(10)))
    c.spans = [span("a", 1, 3), span("b", 3, 6), span("c", 6, 9)]
    assert c.ranges_of({"a", "c"}) == [(1, 3), (6, 9)]
    c.drop(3, 6)
    assert c.length == 7 and c.tokens == [0, 1, 2, 6, 7, 8, 9]
    assert [(s.block, s.start, s.end) for s in c.spans] == [("a", 1, 3), ("c", 3, 6)]
    c.truncate(4)
    assert c.tokens == [0, 1, 2, 6] and [(s.block, s.start, s.end) for s in c.spans] == [("a", 1, 3), ("c", 3, 4)]


def test_drop_moves_every_array_bit_for_bit_with_its_tokens(ref):
    c = filled(ref, TOKENS)
    k, v, kp = c.k.copy(), c.v.copy(), c.k_pre.copy()
    c.drop(10, 25)
    n = len(TOKENS) - 15
    for new, old in ((c.k, k), (c.v, v), (c.k_pre, kp)):
        assert np.array_equal(new[:, :, :10], old[:, :, :10])
        assert np.array_equal(new[:, :, 10:n], old[:, :, 25:len(TOKENS)])
    assert c.length == n and c.tokens == TOKENS[:10] + TOKENS[25:], "drop moves the metadata with the memory"


def test_rerotate_equals_the_forward_rope_at_new_positions():
    """Pre-RoPE keys re-rotated at position p equal the keys a forward pass writes at p (layer 0, where the
    keys depend on the token alone). The rowwise backend runs the reference's kv ops on batch-invariant
    projections, so the comparison is exact."""
    m = model("synthetic", "rowwise")
    c = filled(m, TOKENS)
    c.drop(5, 20)
    c.rerotate(5, c.length, m.transformer.rope)
    fresh = filled(m, c.tokens)
    assert np.array_equal(c.k[0, :, :c.length], fresh.k[0, :, :c.length])
    assert np.array_equal(c.k_pre[0, :, :c.length], fresh.k_pre[0, :, :c.length])
    assert not np.array_equal(c.k[1, :, :c.length], fresh.k[1, :, :c.length])  # deeper layers saw the span
    before = c.k.copy()  # re-rotating keys at their own positions reproduces them bit for bit
    c.rerotate(0, c.length, m.transformer.rope)
    assert np.array_equal(before[:, :, :c.length], c.k[:, :, :c.length])


def test_copy_prefix_copies_slots_and_tokens(ref):
    src = filled(ref, TOKENS)
    dst = ref.transformer.new_cache()
    dst.copy_prefix(src, 40)
    assert dst.tokens == src.tokens[:40] and dst.length == 40
    assert dst.digest() == _digest_prefix(src, 40)
    assert np.array_equal(dst.k_pre[:, :, :40], src.k_pre[:, :, :40])


def _digest_prefix(cache, n):
    tmp = KVCache(*cache.shape, capacity=n)
    tmp.k[:], tmp.v[:] = cache.k[:, :, :n], cache.v[:, :, :n]
    tmp.length = n
    return tmp.digest()


def test_exact_and_shift_receipts_on_the_reference_backend(ref):
    """The reference backend is not batch-invariant: exact eviction works, and its receipt says honestly
    that the cache is only close to a fresh prefill."""
    spans = [span("sys", 0, 10), span("bad", 20, 35), span("user", 40, 50)]
    c = filled(ref, TOKENS, spans)
    r = evict_cache(ref.transformer, c, c.ranges_of({"bad"}), "exact", chunk=16)
    assert (r.mode, r.tokens_before, r.tokens_after, r.tokens_recomputed) == ("exact", 60, 45, 25)
    assert r.blocks == ["bad"] and [(s.start, s.end) for s in r.spans] == [(20, 35)]
    assert r.check == "fresh-prefill" and r.digest_before != r.digest_after
    assert r.batch_invariant is False and 0 <= r.max_abs_dev < 1e-5
    assert [s.block for s in c.spans] == ["sys", "user"] and (c.spans[1].start, c.spans[1].end) == (25, 35)
    c2 = filled(ref, TOKENS, spans)
    r2 = evict_cache(ref.transformer, c2, c2.ranges_of({"bad"}), "shift", verify=True)
    assert r2.tokens_recomputed == 0 and r2.tokens_after == 45 and c2.tokens == c.tokens
    assert r2.max_abs_dev > 1e-4 and "still carry" in r2.note and not r2.attends_evicted
    with pytest.raises(ValueError, match="mode"):
        evict_cache(ref.transformer, c2, [(0, 1)], "sideways")


def test_eviction_of_a_span_still_being_prefilled_is_metadata_past_the_cache(ref):
    c = filled(ref, TOKENS[:30], [span("bad", 20, 40), span("after", 45, 50)])
    r = evict_cache(ref.transformer, c, c.ranges_of({"bad"}), "exact", verify=False)
    assert c.length == 20 and r.tokens_recomputed == 0 and r.check == "structure"
    assert [(s.block, s.start, s.end) for s in c.spans] == [("after", 25, 30)]
    ref.transformer.forward(np.asarray(TOKENS[40:45]), [Segment(c, slice(0, 5))])
    assert c.length == 25
