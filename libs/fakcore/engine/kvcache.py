"""The KV cache of one sequence: a small class that owns its offsets, its tokens and its span map.

Slot i always holds the token at position i. Keys are stored twice: after RoPE (what attention reads) and
before RoPE (so that survivors of a `shift` eviction can be re-rotated at new positions without recompute).
The cache knows nothing about the model; the forward pass writes layer by layer and `commit`s the tokens
when every layer has them.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np


@dataclass
class SpanEntry:
    block: str  # content hash of the message / tool result
    start: int  # first position
    end: int  # one past the last


class KVCache:
    def __init__(self, n_layers: int, n_kv_heads: int, head_dim: int, capacity: int = 64,
                 keep_pre_rope: bool = True, dtype: type = np.float32):
        self.shape = (n_layers, n_kv_heads, head_dim)
        self.dtype = dtype
        self.keep_pre_rope = keep_pre_rope
        self.length = 0  # committed tokens
        self.tokens: list[int] = []  # the committed token ids, position by position
        self.spans: list[SpanEntry] = []
        self._alloc(capacity)

    def _alloc(self, capacity: int) -> None:
        n_layers, n_kv, hd = self.shape
        self.capacity = capacity
        self.k = np.zeros((n_layers, n_kv, capacity, hd), self.dtype)  # (L, Hkv, S, D) after RoPE
        self.v = np.zeros((n_layers, n_kv, capacity, hd), self.dtype)  # (L, Hkv, S, D)
        self.k_pre = np.zeros((n_layers, n_kv, capacity, hd), self.dtype) if self.keep_pre_rope else None

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

    def forget(self, start: int, end: int) -> None:
        """The metadata side of dropping positions start…end-1 (the backend's `kv_drop` moved the memory):
        later tokens move down, spans inside the range go, spans after it move with their tokens."""
        start, end = max(0, start), min(end, self.length)
        d = end - start
        if d <= 0:
            return
        del self.tokens[start:end]
        self.length -= d
        self.spans = cut_spans(self.spans, [(start, end)])

    def ranges_of(self, blocks: set[str]) -> list[tuple[int, int]]:
        """Sorted, merged (start, end) ranges of every span holding one of `blocks`."""
        return merge_ranges([(s.start, s.end) for s in self.spans if s.block in blocks])

    def host_kv(self) -> tuple[np.ndarray, np.ndarray]:
        """The committed keys (after RoPE) and values of every layer on the host: (L, Hkv, length, D) each."""
        n = self.length
        return self.k[:, :, :n], self.v[:, :, :n]

    def truncate(self, n: int) -> None:
        """Forget every position from n on (their slots are reused by the next write)."""
        n = max(0, min(n, self.length))
        self.length = n
        del self.tokens[n:]
        self.spans = [s for s in self.spans if s.start < n]
        for s in self.spans:
            s.end = min(s.end, n)

    @property
    def nbytes(self) -> int:
        per = self.k.nbytes + self.v.nbytes + (self.k_pre.nbytes if self.k_pre is not None else 0)
        return per

    def digest(self) -> str:
        """sha256 over the committed keys and values of every layer (what a receipt compares)."""
        h = hashlib.sha256()
        n = self.length
        h.update(np.ascontiguousarray(self.k[:, :, :n]).tobytes())
        h.update(np.ascontiguousarray(self.v[:, :, :n]).tobytes())
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


def cut_spans(spans: list[SpanEntry], ranges: list[tuple[int, int]]) -> list[SpanEntry]:
    """Span entries after removing `ranges` (sorted, disjoint): spans inside a range go, later ones move
    down by the tokens removed before them; a span only partly cut keeps its surviving tokens."""
    out = []
    for s in spans:
        start = s.start - sum(max(0, min(e, s.start) - b) for b, e in ranges)
        end = s.end - sum(max(0, min(e, s.end) - b) for b, e in ranges)
        if end > start:
            out.append(SpanEntry(s.block, start, end))
    return out
