"""The KV cache of one sequence: a small class that owns its memory, its offsets, its tokens and its span map.

Slot i always holds the token at position i. Keys are stored twice: after RoPE (what attention reads) and
before RoPE (so that survivors of a `shift` eviction can be re-rotated at new positions without recompute).
The cache knows nothing about the model; the forward pass writes layer by layer and `commit`s the tokens
when every layer has them.

The backend makes its caches (`Backend.new_cache`) and hands each its `rope`; everything that moves cache
memory is a method here and moves the metadata with it, so no caller can move one without the other:

    drop(start, end)         close the gap [start, end): slots, tokens and spans after it move down
    copy_prefix(src, n)      an empty cache takes src's first n slots and tokens
    rerotate(start, stop, …) keys re-rotated from their pre-RoPE copies at their current positions
    truncate(n)              forget every position from n on

All of them are bit-exact copies or the forward pass's own arithmetic, so the claims of docs/architecture.md §3 hold. A
backend whose attention reads another layout or precision of the keys and values subclasses this and keeps it
in step in `keys_changed` (engine-cpu's NumbaKVCache: keys transposed, and half-float copies on its int8 path); one whose memory lives elsewhere overrides the memory half of the
moves, `_move_slots`, `_copy_slots` and `_rotate_slots` (engine-cuda's paged CudaKVCache).

A hybrid model's cache (Qwen3-Next) keeps keys and values for its attention layers only (ModelConfig.layer_kv)
and, in `recurrent`, the state of its linear layers with checkpoints (engine/deltanet.py's RecurrentState). That
state cannot be cut at any position: `truncate` and `copy_prefix` take a length `restorable` gives (a checkpoint),
and `drop` refuses.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from fakcore.protocol import Span

if TYPE_CHECKING:
    from fakcore.engine.deltanet import RecurrentState

# The backend's `rope`: (T, Hkv, D) pre-RoPE rows, their positions (T,), one layer's table -> rotated rows.
RopeFn = Callable[[np.ndarray, np.ndarray, Any], np.ndarray]


class KVCache:
    def __init__(self, n_layers: int, n_kv_heads: int, head_dim: int, capacity: int = 64,
                 keep_pre_rope: bool = True, dtype: type = np.float32, rope: RopeFn | None = None):
        self.shape = (n_layers, n_kv_heads, head_dim)
        self.dtype = dtype
        self.keep_pre_rope = keep_pre_rope
        self.rope = rope  # what `rerotate` applies: the backend's own, bit-identical to its forward pass
        self.length = 0  # committed tokens
        self.tokens: list[int] = []  # the committed token ids, position by position
        # which positions hold which content block; a Span is never changed in place (replaced), so span
        # maps on the bus may share them
        self.spans: list[Span] = []
        self.recurrent: RecurrentState | None = None  # a hybrid model's linear layers (Transformer.new_cache)
        self._alloc(capacity)

    def _alloc(self, capacity: int) -> None:
        n_layers, n_kv, hd = self.shape
        self.capacity = capacity
        self.k = np.zeros((n_layers, n_kv, capacity, hd), self.dtype)  # (L, Hkv, S, D) after RoPE
        self.v = np.zeros((n_layers, n_kv, capacity, hd), self.dtype)  # (L, Hkv, S, D)
        self.k_pre = np.zeros((n_layers, n_kv, capacity, hd), self.dtype) if self.keep_pre_rope else None

    def _arrays(self) -> list[np.ndarray]:
        return [a for a in (self.k, self.v, self.k_pre) if a is not None]

    def keys_changed(self, start: int, stop: int) -> None:
        """Slots start…stop-1 of `k` changed outside `write` (a drop, copy or re-rotation), and with a drop or copy
        those of `v` too: a subclass that keeps another layout or precision of them brings it in step here."""

    # -- the forward pass ----------------------------------------------------------------------------
    def reserve(self, total: int) -> None:
        """Make room for `total` positions (amortized doubling)."""
        if total <= self.capacity:
            return
        new_cap = max(total, self.capacity * 2)
        old = (self.k, self.v, self.k_pre)
        self._alloc(new_cap)
        n = self.length
        self.k[:, :, :n] = old[0][:, :, :n]
        self.v[:, :, :n] = old[1][:, :, :n]
        if self.k_pre is not None:
            self.k_pre[:, :, :n] = old[2][:, :, :n]

    def write(self, layer: int, start: int, k_pre: np.ndarray, k: np.ndarray, v: np.ndarray) -> None:
        """Store one layer's new rows: (T, Hkv, D) each, at positions start…start+T-1."""
        end = start + k.shape[0]
        self.reserve(end)
        self.k[layer, :, start:end] = k.transpose(1, 0, 2)
        self.v[layer, :, start:end] = v.transpose(1, 0, 2)
        if self.k_pre is not None:
            self.k_pre[layer, :, start:end] = k_pre.transpose(1, 0, 2)

    def commit(self, tokens: list[int]) -> None:
        self.tokens.extend(int(t) for t in tokens)
        self.length += len(tokens)
        if self.recurrent is not None:
            self.recurrent.commit(self.length)

    # -- the KV-MMU's moves --------------------------------------------------------------------------
    def drop(self, start: int, end: int) -> None:
        """Close the gap of positions start…end-1 (clipped to the cache). For every layer the slots
        end…length-1 of k, v and k_pre move to start…, bit for bit (keys are NOT re-rotated: see
        `rerotate`); tokens move with them, spans inside the range go, spans after it move down. Slots past
        the new end keep stale data (the next write overwrites them)."""
        start, end = max(0, start), min(end, self.length)
        d = end - start
        if d <= 0:
            return
        if self.recurrent is not None:
            raise ValueError("cannot drop positions from a hybrid model's cache: its linear layers' recurrent state "
                             "sums up every position and cannot be shifted (exact eviction recomputes instead)")
        self._move_slots(end, self.length, start)
        del self.tokens[start:end]
        self.length -= d
        self.spans = cut_spans(self.spans, [(start, end)])
        self.keys_changed(start, self.length)

    def copy_prefix(self, src: KVCache, n: int) -> None:
        """Take src's slots 0…n-1 (k, v, k_pre, every layer; bit for bit) and their tokens, growing as needed.
        This cache must be empty and of src's shape; src is unchanged. Spans are the caller's: they
        describe the request, not the memory."""
        assert self.length == 0 and n <= src.length and self.shape == src.shape, (self.length, n, src.length)
        self.reserve(n)
        self._copy_slots(src, n)
        if src.recurrent is not None:  # the state after n (a checkpoint, or src's length; else ValueError)
            self.recurrent.copy_prefix(src.recurrent, n)
        self.commit(src.tokens[:n])
        self.keys_changed(0, n)

    def rerotate(self, start: int, stop: int, tables: list[Any]) -> None:
        """For every layer l and slot p in start…stop-1: k[l, :, p] = rope(k_pre[l, :, p], [p], tables[l]),
        bit-identical to what the backend's `rope` gives that row at position p inside any forward pass.
        `tables` is Transformer.rope (one table per layer)."""
        assert self.k_pre is not None and self.rope is not None, "re-rotation needs pre-RoPE keys and the backend's rope"
        assert stop <= self.length, (stop, self.length)
        if stop <= start:
            return
        self._rotate_slots(start, stop, tables)
        self.keys_changed(start, stop)

    def sync_host(self) -> None:
        """Bring k, v and k_pre up to date on the host: a cache whose memory lives elsewhere (engine-cuda's pages)
        copies it back; these arrays are the memory here."""

    # -- the memory those moves move: a backend whose cache lives elsewhere (engine-cuda's pages) overrides these
    def _move_slots(self, src_start: int, src_stop: int, dst: int) -> None:
        """Slots src_start…src_stop-1 of every layer (k, v, k_pre) to dst…, bit for bit (ranges may overlap)."""
        for arr in self._arrays():
            arr[:, :, dst:dst + src_stop - src_start] = arr[:, :, src_start:src_stop].copy()

    def _copy_slots(self, src: KVCache, n: int) -> None:
        """src's slots 0…n-1 of every layer into this cache's, bit for bit."""
        src.sync_host()
        for theirs, mine in ((src.k, self.k), (src.v, self.v), (src.k_pre, self.k_pre)):
            if theirs is not None and mine is not None:
                mine[:, :, :n] = theirs[:, :, :n]

    def _rotate_slots(self, start: int, stop: int, tables: list[Any]) -> None:
        """k of slots start…stop-1 = the backend's rope of their pre-RoPE keys at their positions, layer by layer."""
        positions = np.arange(start, stop)
        for layer, table in enumerate(tables):
            rows = self.k_pre[layer, :, start:stop].transpose(1, 0, 2)  # (T, Hkv, D)
            self.k[layer, :, start:stop] = self.rope(rows, positions, table).transpose(1, 0, 2)

    def truncate(self, n: int) -> None:
        """Forget every position from n on (their slots are reused by the next write). A hybrid model's cache
        restores its linear layers' state after n, which must be restorable (else ValueError)."""
        n = max(0, min(n, self.length))
        if self.recurrent is not None:
            self.recurrent.restore(n)
        self.length = n
        del self.tokens[n:]
        self.spans = [Span(block=s.block, start=s.start, end=min(s.end, n)) for s in self.spans if s.start < n]

    def restorable(self, n: int) -> int:
        """The longest prefix of at most n positions `truncate` and `copy_prefix` can keep: n, or for a hybrid
        model the latest state checkpoint at or before it."""
        n = max(0, min(n, self.length))
        return n if self.recurrent is None else self.recurrent.restorable(n)

    # -- views ---------------------------------------------------------------------------------------
    def ranges_of(self, blocks: set[str]) -> list[tuple[int, int]]:
        """Sorted, merged (start, end) ranges of every span holding one of `blocks`."""
        return merge_ranges([(s.start, s.end) for s in self.spans if s.block in blocks])

    def host_kv(self) -> tuple[np.ndarray, np.ndarray]:
        """The committed keys (after RoPE) and values of every layer on the host: (L, Hkv, length, D) each."""
        n = self.length
        return self.k[:, :, :n], self.v[:, :, :n]

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self._arrays()) + (0 if self.recurrent is None else self.recurrent.nbytes)

    def digest(self) -> str:
        """sha256 over the committed keys and values of every layer, and a hybrid model's recurrent state and
        its checkpoints (what a receipt compares)."""
        h = hashlib.sha256()
        n = self.length
        h.update(np.ascontiguousarray(self.k[:, :, :n]).tobytes())
        h.update(np.ascontiguousarray(self.v[:, :, :n]).tobytes())
        if self.recurrent is not None:
            self.recurrent.update_digest(h)
        return h.hexdigest()


def merge_ranges(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for start, end in sorted(r for r in ranges if r[1] > r[0]):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def cut_tokens(tokens: list[int], ranges: list[tuple[int, int]]) -> list[int]:
    """`tokens` without the positions of `ranges` (sorted, disjoint)."""
    out, pos = [], 0
    for start, end in ranges:
        out += tokens[pos:start]
        pos = max(pos, end)
    return out + tokens[pos:]


def cut_spans(spans: list[Span], ranges: list[tuple[int, int]]) -> list[Span]:
    """Spans after removing `ranges` (sorted, disjoint): spans inside a range go, later ones move down by
    the tokens removed before them; a span only partly cut keeps its surviving tokens."""
    out = []
    for s in spans:
        start = s.start - sum(max(0, min(e, s.start) - b) for b, e in ranges)
        end = s.end - sum(max(0, min(e, s.end) - b) for b, e in ranges)
        if end > start:
            out.append(Span(block=s.block, start=start, end=end))
    return out
