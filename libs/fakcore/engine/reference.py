"""The reference backend: numpy, float32, weights dequantized once, the oracle's twin.

It exists to be obviously right, not fast: every op is the textbook formula in the order HuggingFace's
eager implementation uses. The fast backends are tested against it.
"""

from __future__ import annotations

import math

import numpy as np

from fakcore.engine.backend import Segment, rope_inv_freq
from fakcore.engine.kvcache import KVCache
from fakcore.engine.registry import register_backend
from fakcore.models.config import ModelConfig, RopeScaling

_erf = np.vectorize(math.erf, otypes=[np.float64])  # numpy has no erf; float64 math.erf, element by element


class RopeTable:
    """cos/sin for positions 0…n-1 of one (head_dim, theta, scaling), grown on demand."""

    def __init__(self, head_dim: int, theta: float, scaling: RopeScaling):
        self.inv_freq = rope_inv_freq(head_dim, theta, scaling)  # (D/2,) f32
        self.factor = np.float32(scaling.attention_factor)  # longrope: cos and sin scaled
        self.cos = np.zeros((0, head_dim), np.float32)
        self.sin = np.zeros((0, head_dim), np.float32)

    def upto(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        if n > len(self.cos):
            n = max(n, 2 * len(self.cos), 256)
            freqs = np.outer(np.arange(n, dtype=np.float32), self.inv_freq).astype(np.float32)  # (n, D/2)
            emb = np.concatenate([freqs, freqs], axis=-1)
            self.cos, self.sin = np.cos(emb), np.sin(emb)
            if self.factor != 1.0:
                self.cos, self.sin = self.cos * self.factor, self.sin * self.factor
        return self.cos, self.sin


class ReferenceBackend:
    name = "reference"
    device = "cpu"
    batch_invariant = False  # BLAS picks different kernels for different batch shapes
    rope_features = frozenset({"partial", "attention_factor"})  # see engine/backend.py
    attention_features = frozenset({"alibi", "sinks"})
    recurrent_features = frozenset({"gated_deltanet"})  # activations are host arrays (engine/deltanet.py)

    # -- weights ---------------------------------------------------------------------------------------
    def matrix(self, t) -> np.ndarray:
        w = t.dequantize()
        return np.ascontiguousarray(w.reshape(t.shape[0], -1), dtype=np.float32)

    def vector(self, t, offset: float = 0.0) -> np.ndarray:
        return (t.dequantize().reshape(-1) + np.float32(offset)).astype(np.float32)

    def embedding(self, t) -> np.ndarray:
        return self.matrix(t)

    # -- ops -------------------------------------------------------------------------------------------
    def embed(self, table: np.ndarray, ids: np.ndarray, scale: float) -> np.ndarray:
        x = table[ids]
        return x * np.float32(scale) if scale != 1.0 else x.copy()

    def linear(self, x: np.ndarray, w: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
        y = x @ w.T
        return y + bias if bias is not None else y

    def rmsnorm(self, x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
        var = np.mean(x * x, axis=-1, keepdims=True, dtype=np.float32)
        return (x / np.sqrt(var + np.float32(eps))) * w

    def layernorm(self, x: np.ndarray, w: np.ndarray, b: np.ndarray | None, eps: float) -> np.ndarray:
        d = x.shape[-1]
        if w.size != d:  # one row of gains per head: (heads, D) against (T, heads, D)
            w, b = w.reshape(-1, d), None if b is None else b.reshape(-1, d)
        mean = np.mean(x, axis=-1, keepdims=True, dtype=np.float32)
        centred = x - mean
        var = np.mean(centred * centred, axis=-1, keepdims=True, dtype=np.float32)
        y = centred / np.sqrt(var + np.float32(eps)) * w
        return y + b if b is not None else y

    def rope_table(self, head_dim: int, theta: float, scaling: RopeScaling) -> RopeTable:
        return RopeTable(head_dim, theta, scaling)

    def rope(self, x: np.ndarray, positions: np.ndarray, table: RopeTable) -> np.ndarray:
        cos, sin = table.upto(int(positions.max()) + 1)
        c, s = cos[positions][:, None, :], sin[positions][:, None, :]  # (T, 1, R)
        rot = c.shape[-1]  # the leading dims RoPE turns; the rest of each head passes unchanged
        if rot < x.shape[-1]:
            return np.concatenate([self.rope(x[..., :rot], positions, table), x[..., rot:]], axis=-1)
        half = rot // 2
        rotated = np.concatenate([-x[..., half:], x[..., :half]], axis=-1)  # rotate_half
        return x * c + rotated * s

    def attention(self, q, k_pre, k, v, segments: list[Segment], layer: int, window: int, scale: float,
                  softcap: float, alibi: np.ndarray | None = None, sinks: np.ndarray | None = None) -> np.ndarray:
        out = np.empty_like(q)  # (T, H, D)
        for seg in segments:
            cache: KVCache = seg.cache
            start = cache.length
            n = seg.rows.stop - seg.rows.start
            cache.write(layer, start, k_pre[seg.rows], k[seg.rows], v[seg.rows])
            keys = cache.k[layer, :, : start + n]  # (Hkv, S, D)
            vals = cache.v[layer, :, : start + n]
            qs = q[seg.rows]  # (n, H, D)
            n_kv = keys.shape[0]
            group = qs.shape[1] // n_kv
            qg = qs.reshape(n, n_kv, group, -1).transpose(1, 2, 0, 3)  # (Hkv, G, n, D)
            scores = (qg @ keys[:, None].transpose(0, 1, 3, 2)) * np.float32(scale)  # (Hkv, G, n, S)
            if softcap:
                scores = np.tanh(scores / np.float32(softcap)) * np.float32(softcap)
            qpos = np.arange(start, start + n)[:, None]
            kpos = np.arange(start + n)[None, :]
            if alibi is not None:  # ALiBi: + m_h * (j - i), head h = kv head * group + g
                scores = scores + alibi.reshape(n_kv, group, 1, 1) * (kpos - qpos).astype(np.float32)
            visible = kpos <= qpos
            if window:
                visible &= (qpos - kpos) < window
            scores = np.where(visible, scores, np.float32(-np.inf))
            if sinks is not None:  # gpt-oss: a logit per head that joins the denominator and has no value
                sink = sinks.reshape(n_kv, group, 1, 1).astype(np.float32)
                best = np.maximum(scores.max(axis=-1, keepdims=True), sink)
                probs = np.exp(scores - best)
                probs /= probs.sum(axis=-1, keepdims=True) + np.exp(sink - best)
            else:
                scores = scores - scores.max(axis=-1, keepdims=True)
                probs = np.exp(scores)
                probs /= probs.sum(axis=-1, keepdims=True)
            o = probs @ vals[:, None]  # (Hkv, G, n, D)
            out[seg.rows] = o.transpose(2, 0, 1, 3).reshape(n, -1, qs.shape[-1])
        return out

    def gated(self, gate: np.ndarray, up: np.ndarray, act: str) -> np.ndarray:
        if act == "silu":
            a = gate / (np.float32(1.0) + np.exp(-gate))
        else:  # gelu_tanh
            a = np.float32(0.5) * gate * (np.float32(1.0) + np.tanh(np.float32(np.sqrt(2 / np.pi)) * (gate + np.float32(0.044715) * gate**3)))
        return a * up

    def swiglu_oai(self, gate: np.ndarray, up: np.ndarray, alpha: float, limit: float) -> np.ndarray:
        """gpt-oss's experts: gate clamped above at limit, up to [-limit, limit], (up + 1) * gate * sigmoid(alpha * gate)."""
        g = np.minimum(gate, np.float32(limit))
        u = np.clip(up, np.float32(-limit), np.float32(limit))
        return (u + np.float32(1.0)) * (g / (np.float32(1.0) + np.exp(-np.float32(alpha) * g)))

    def activation(self, x: np.ndarray, act: str) -> np.ndarray:
        if act == "gelu":  # erf, as torch's exact GELU
            return (np.float32(0.5) * x * (np.float32(1.0) + _erf(x / np.float32(np.sqrt(2.0))))).astype(np.float32)
        return np.float32(0.5) * x * (np.float32(1.0) + np.tanh(np.float32(np.sqrt(2 / np.pi)) * (x + np.float32(0.044715) * x**3)))

    def add(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        return x + y

    def clamp(self, x: np.ndarray, c: float) -> np.ndarray:
        return np.clip(x, np.float32(-c), np.float32(c))

    def scale(self, x: np.ndarray, s: float) -> np.ndarray:
        return x * np.float32(s)

    def softcap(self, x: np.ndarray, cap: float) -> np.ndarray:
        return np.tanh(x / np.float32(cap)) * np.float32(cap)

    def take_rows(self, x: np.ndarray, rows: np.ndarray) -> np.ndarray:
        return x[rows]

    def to_host(self, x: np.ndarray) -> np.ndarray:
        return np.asarray(x, dtype=np.float32)

    # -- caches ----------------------------------------------------------------------------------------
    def new_cache(self, config: ModelConfig) -> KVCache:
        return KVCache(config.n_kv_layers, config.n_kv_heads, config.head_dim, rope=self.rope)


register_backend("reference", ReferenceBackend)
