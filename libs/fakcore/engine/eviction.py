"""Span eviction from one KV cache, with its receipt (docs/architecture.md §3, §4); the pool (engine/kvpool.py) runs it on
every cache that holds a quarantined block.

Modes:
    exact  truncate at the first evicted position and run the surviving suffix through the model at its new
           positions. On a batch-invariant backend the cache is then bit-identical to a fresh prefill of the
           surviving tokens, and so is every later logit.
    shift  close the gap (KVCache.drop) and re-rotate the moved keys from their pre-RoPE copies at their new
           positions (KVCache.rerotate), no recompute. No position can attend to the span any more, but
           survivors' keys and values above layer 0 were computed while the span was visible and still carry
           its influence: the receipt says so and reports the measured deviation.

Positions are cache slots: after a shift the survivors are numbered on without a gap, as a fresh prefill of them
would be. A RoPE model's keys carry their position, hence the re-rotation. An ALiBi model's (MPT) carry none: its
attention adds m_h * (j - i) from the slots' distance at every call, so once the gap is closed the survivors stand
at their new positions with nothing to re-rotate (the model has no RoPE tables). Its layer-0 keys and values
are then the fresh prefill's bit for bit, as re-rotated RoPE keys are.

A hybrid model (Qwen3-Next) also keeps its linear layers' recurrent state (KVCache.recurrent), which sums up every
position before it: no span can be cut out of it, and nothing can shift it. Exact eviction restores the latest
state checkpoint at or before the span (KVCache.restorable, .truncate: the attention layers' KV cut there too) and
recomputes every surviving token from it at its new position, minus the span; the receipt's tokens_recomputed
counts from the checkpoint, its digests and proof cover the recurrent state and its checkpoints, its layer_dev has
one entry per model layer (keys and values, or the conv state and S). Shift is an error for such a cache.
"""

from __future__ import annotations

import time

import numpy as np

from fakcore.engine.backend import Segment
from fakcore.engine.kvcache import KVCache, cut_spans, cut_tokens, merge_ranges
from fakcore.engine.transformer import Transformer
from fakcore.protocol import KvEvicted

MODES = ("exact", "shift")
SHIFT_NOTE = ("shift: the evicted positions are gone from every layer and the survivors' keys were re-rotated at "
              "their new positions, so nothing can attend to the span; but survivors' keys and values above layer 0 "
              "were computed while the span was visible and still carry its influence (layer_dev, max_abs_dev)")


def prefill(tf: Transformer, cache: KVCache, tokens: list[int], chunk: int = 256) -> np.ndarray | None:
    """Append `tokens` to `cache` in forward passes of at most `chunk` tokens; the last row's logits."""
    logits = None
    for i in range(0, len(tokens), max(1, chunk)):
        part = np.asarray(tokens[i:i + chunk], np.int64)
        logits = tf.forward(part, [Segment(cache, slice(0, len(part)))], np.asarray([len(part) - 1], np.int64))[0]
    return logits


def compare_fresh(tf: Transformer, cache: KVCache, chunk: int = 256) -> tuple[bool, float, list[float]]:
    """Prefill `cache.tokens` into a scratch cache; (bit-identical, max |Δ|, per-layer max |Δ|) over K and V."""
    fresh = tf.new_cache()
    prefill(tf, fresh, list(cache.tokens), chunk)
    k, v = cache.host_kv()
    fk, fv = fresh.host_kv()
    layer_dev = [float(max(np.abs(k[i] - fk[i]).max(initial=0.0), np.abs(v[i] - fv[i]).max(initial=0.0)))
                 for i in range(k.shape[0])]
    if cache.recurrent is not None:  # per model layer: its KV layer's, or its linear layer's state's
        state_dev = cache.recurrent.layer_dev(fresh.recurrent)
        layer_dev = [layer_dev[kv] if kv >= 0 else state_dev[lin] for kv, lin in zip(tf.cfg.layer_kv, tf.linear_index, strict=True)]
    return cache.digest() == fresh.digest(), max(layer_dev, default=0.0), layer_dev


def evict_cache(tf: Transformer, cache: KVCache, ranges: list[tuple[int, int]], mode: str = "exact", *,
                chunk: int = 256, verify: bool = True) -> KvEvicted:
    """Remove the positions of `ranges` (sequence positions, sorted and disjoint; parts past `cache.length`
    are metadata only) from `cache`. Returns the receipt without worker/sequence names."""
    if mode not in MODES:
        raise ValueError(f"unknown eviction mode {mode!r}: expected {' or '.join(MODES)}")
    if mode == "shift" and cache.recurrent is not None:
        raise ValueError(f"shift eviction is not possible on {tf.cfg.arch}: its linear layers' recurrent state sums up "
                         f"every position and cannot be shifted; use exact (restores a state checkpoint and recomputes)")
    be = tf.be
    blocks = sorted({s.block for s in cache.spans if any(s.start < e and b < s.end for b, e in ranges)})
    removed = [s for s in cache.spans if any(b <= s.start and s.end <= e for b, e in ranges)]
    held = merge_ranges([(b, min(e, cache.length)) for b, e in ranges if b < cache.length])
    spans = cut_spans(cache.spans, ranges)  # the full ranges: a span still being prefilled goes whole
    before, n0 = cache.digest(), cache.length
    t0 = time.perf_counter()
    recomputed = 0
    if held and mode == "exact":
        survivors = cut_tokens(list(cache.tokens), held)
        start = cache.restorable(held[0][0])  # the span's start, or a hybrid's latest state checkpoint before it
        cache.truncate(start)
        prefill(tf, cache, survivors[start:], chunk)
        recomputed = len(survivors) - start
    elif held:
        for b, e in reversed(held):
            cache.drop(b, e)
        if tf.rope:  # ALiBi: no RoPE, nothing to re-rotate (see above)
            cache.rerotate(held[0][0], cache.length, tf.rope)
    cache.spans = spans
    seconds = time.perf_counter() - t0
    receipt = KvEvicted(worker="", sequence="", blocks=blocks, spans=removed, mode=mode, tokens_before=n0,
                        tokens_after=cache.length, tokens_recomputed=recomputed, digest_before=before,
                        digest_after=cache.digest(), backend=be.name, batch_invariant=bool(be.batch_invariant),
                        seconds=seconds, note=SHIFT_NOTE if mode == "shift" and held else "", ts=time.time())
    if verify and held:
        receipt.check = "fresh-prefill"
        receipt.identical, receipt.max_abs_dev, receipt.layer_dev = compare_fresh(tf, cache, chunk)
    return receipt
