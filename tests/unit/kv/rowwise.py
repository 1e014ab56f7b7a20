"""A batch-invariant twin of the reference backend, for the KV-MMU's logic tests.

Every row of a matrix product, every norm and every query of an attention is computed on its own, with
the same numpy calls whatever the batch, so a token's results cannot depend on what else is in the call.
It is slow and exists only to test the eviction logic apart from the fast kernels; the claims themselves
are proven on the numba backend (test_exact.py).
"""

from __future__ import annotations

import numpy as np

from fakcore.engine.reference import ReferenceBackend


class RowwiseBackend(ReferenceBackend):
    name = "rowwise"
    batch_invariant = True

    def linear(self, x, w, bias=None):
        out = np.empty((x.shape[0], w.shape[0]), np.float32)
        for i in range(x.shape[0]):
            out[i] = np.ascontiguousarray(x[i]) @ w.T
        return out + bias if bias is not None else out

    def rmsnorm(self, x, w, eps):
        flat = x.reshape(-1, x.shape[-1])
        out = np.empty_like(flat)
        for i in range(flat.shape[0]):
            row = np.ascontiguousarray(flat[i])
            out[i] = row / np.sqrt(np.mean(row * row, dtype=np.float32) + np.float32(eps)) * w
        return out.reshape(x.shape)

    def attention(self, q, k_pre, k, v, segments, layer, window, scale, softcap, alibi=None, sinks=None):
        out = np.empty_like(q)  # (T, H, D)
        for seg in segments:
            cache = seg.cache
            start = cache.length
            n = seg.rows.stop - seg.rows.start
            cache.write(layer, start, k_pre[seg.rows], k[seg.rows], v[seg.rows])
            n_kv = cache.k.shape[1]
            group = q.shape[1] // n_kv
            for i in range(n):
                pos = start + i
                lo = max(0, pos - window + 1) if window else 0
                for h in range(q.shape[1]):
                    keys = np.ascontiguousarray(cache.k[layer, h // group, lo:pos + 1])  # (S, D)
                    vals = np.ascontiguousarray(cache.v[layer, h // group, lo:pos + 1])
                    s = (keys @ np.ascontiguousarray(q[seg.rows.start + i, h])) * np.float32(scale)
                    if softcap:
                        s = np.tanh(s / np.float32(softcap)) * np.float32(softcap)
                    if alibi is not None:  # + m_h * (j - pos)
                        s = s + alibi[h] * np.arange(lo - pos, 1).astype(np.float32)
                    if sinks is not None:  # gpt-oss: the head's sink logit joins the denominator only
                        best = max(s.max(), np.float32(sinks[h]))
                        p = np.exp(s - best)
                        p /= p.sum() + np.exp(np.float32(sinks[h]) - best)
                    else:
                        p = np.exp(s - s.max())
                        p /= p.sum()
                    out[seg.rows.start + i, h] = p @ vals
        return out

    def layernorm(self, x, w, b, eps):
        d = x.shape[-1]
        flat = x.reshape(-1, d)
        gains = w.reshape(-1, d)
        biases = None if b is None else b.reshape(-1, d)
        out = np.empty_like(flat)
        for i in range(flat.shape[0]):
            row = np.ascontiguousarray(flat[i])
            c = row - np.mean(row, dtype=np.float32)
            out[i] = c / np.sqrt(np.mean(c * c, dtype=np.float32) + np.float32(eps)) * gains[i % len(gains)]
            if biases is not None:
                out[i] += biases[i % len(biases)]
        return out.reshape(x.shape)
