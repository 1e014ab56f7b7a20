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
