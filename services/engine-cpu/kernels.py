"""numba kernels of the fast CPU backend.

Batch invariance is the rule every kernel here keeps: the result for one token (a row of `linear`, one
query's attention) is computed by the same loop, over the same data, in the same order, whatever else is
in the call. Parallelism splits whole output elements between threads, never one element's reduction.
`fastmath` lets LLVM vectorize reductions (a fixed reassociation that depends only on the loop length),
which is deterministic for a given length and compiled kernel.

Weights stay quantized: a quantized matrix is held as int8 values q (rows, subs, sub) with a float32 scale
and offset per sub-block; a row is dequantized into a small per-thread buffer (w = scale * q + offset, the
type's own formula) right before its dot products, then thrown away.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

ROWS_PER_TASK = 8  # output rows one thread dequantizes and reuses across every token of the call
FAST = {"nsz", "arcp", "contract", "afn", "reassoc"}  # no nnan/ninf: softmax starts from -inf


# ---------------------------------------------------------------------------------------------------------
# linear: y (T, R) = x (T, K) @ W (R, K)^T
# ---------------------------------------------------------------------------------------------------------


@njit(fastmath=FAST, inline="always", cache=True)
def _dot(w: np.ndarray, x: np.ndarray) -> np.float32:
    s = np.float32(0.0)
    for k in range(w.shape[0]):
        s += w[k] * x[k]
    return s


@njit(fastmath=FAST, inline="always", cache=True)
def _dequant_row(q: np.ndarray, scale: np.ndarray, offset: np.ndarray, r: int, out: np.ndarray) -> None:
    """Row r of an unpacked matrix into out (subs, sub) float32."""
    subs, sub = q.shape[1], q.shape[2]
    for s in range(subs):
        d = scale[r, s]
        m = offset[r, s]
        for j in range(sub):
            out[s, j] = np.float32(q[r, s, j]) * d + m


@njit(parallel=True, fastmath=FAST, cache=True)
def linear_q(q: np.ndarray, scale: np.ndarray, offset: np.ndarray, x: np.ndarray, out: np.ndarray) -> None:
    """Quantized weights: q (R, S, B) int8, scale/offset (R, S) f32; x (T, K=S*B) f32 -> out (T, R)."""
    R, S, B = q.shape
    T = x.shape[0]
    tasks = (R + ROWS_PER_TASK - 1) // ROWS_PER_TASK
    for task in prange(tasks):
        r0 = task * ROWS_PER_TASK
        r1 = min(R, r0 + ROWS_PER_TASK)
        w = np.empty((ROWS_PER_TASK, S, B), np.float32)
        for r in range(r0, r1):
            _dequant_row(q, scale, offset, r, w[r - r0])
        for t in range(T):
            xt = x[t]
            for r in range(r0, r1):
                out[t, r] = _dot(w[r - r0].reshape(S * B), xt)


@njit(parallel=True, fastmath=FAST, cache=True)
def linear_f32(w: np.ndarray, x: np.ndarray, out: np.ndarray) -> None:
    """Float weights w (R, K) f32; x (T, K) -> out (T, R)."""
    R = w.shape[0]
    T = x.shape[0]
    tasks = (R + ROWS_PER_TASK - 1) // ROWS_PER_TASK
    for task in prange(tasks):
        r0 = task * ROWS_PER_TASK
        r1 = min(R, r0 + ROWS_PER_TASK)
        for t in range(T):
            xt = x[t]
            for r in range(r0, r1):
                out[t, r] = _dot(w[r], xt)


@njit(fastmath=FAST, cache=True)
def embed_q(q: np.ndarray, scale: np.ndarray, offset: np.ndarray, ids: np.ndarray, mult: np.float32, out: np.ndarray) -> None:
    S, B = q.shape[1], q.shape[2]
    for t in range(ids.shape[0]):
        row = out[t].reshape(S, B)
        _dequant_row(q, scale, offset, ids[t], row)
        if mult != np.float32(1.0):
            for k in range(S * B):
                out[t, k] *= mult


# ---------------------------------------------------------------------------------------------------------
# elementwise and per-row ops
# ---------------------------------------------------------------------------------------------------------


@njit(fastmath=FAST, cache=True)
def rmsnorm(x: np.ndarray, w: np.ndarray, eps: np.float32, out: np.ndarray) -> None:
    """x (N, D) -> out (N, D): x / sqrt(mean(x^2) + eps) * w, one row at a time."""
    N, D = x.shape
    for n in range(N):
        ss = np.float32(0.0)
        for k in range(D):
            ss += x[n, k] * x[n, k]
        inv = np.float32(1.0) / np.sqrt(ss / np.float32(D) + eps)
        for k in range(D):
            out[n, k] = x[n, k] * inv * w[k]


@njit(fastmath=FAST, cache=True)
def rope(x: np.ndarray, positions: np.ndarray, cos: np.ndarray, sin: np.ndarray, out: np.ndarray) -> None:
    """x (T, H, D), HF's rotate_half convention; cos/sin (P, D) tables."""
    T, H, D = x.shape
    half = D // 2
    for t in range(T):
        p = positions[t]
        for h in range(H):
            for i in range(half):
                a = x[t, h, i]
                b = x[t, h, i + half]
                out[t, h, i] = a * cos[p, i] - b * sin[p, i]
                out[t, h, i + half] = b * cos[p, i + half] + a * sin[p, i + half]


@njit(fastmath=FAST, cache=True)
def gated_silu(gate: np.ndarray, up: np.ndarray, out: np.ndarray) -> None:
    N, F = gate.shape
    for n in range(N):
        for k in range(F):
            g = gate[n, k]
            out[n, k] = g / (np.float32(1.0) + np.exp(-g)) * up[n, k]


@njit(fastmath=FAST, cache=True)
def gated_gelu_tanh(gate: np.ndarray, up: np.ndarray, out: np.ndarray) -> None:
    c = np.float32(np.sqrt(2.0 / np.pi))
    N, F = gate.shape
    for n in range(N):
        for k in range(F):
            g = gate[n, k]
            out[n, k] = np.float32(0.5) * g * (np.float32(1.0) + np.tanh(c * (g + np.float32(0.044715) * g * g * g))) * up[n, k]


# ---------------------------------------------------------------------------------------------------------
# attention over one sequence's cache
# ---------------------------------------------------------------------------------------------------------


@njit(parallel=True, fastmath=FAST, cache=True)
def attention(q: np.ndarray, keys: np.ndarray, values: np.ndarray, start: int, window: int, scale: np.float32,
              softcap: np.float32, out: np.ndarray) -> None:
    """q (n, H, D) for positions start..start+n-1; keys/values (Hkv, S, D) with S >= start+n -> out (n, H, D).

    Each (query, head) pair: scores over its visible keys in position order, max-subtracted softmax, the
    weighted sum of values - the same loops whatever n is."""
    n, H, D = q.shape
    group = H // keys.shape[0]
    for job in prange(n * H):
        i = job // H
        h = job - i * H
        kvh = h // group
        pos = start + i
        lo = 0
        if window > 0 and pos - window + 1 > 0:
            lo = pos - window + 1
        count = pos + 1 - lo
        scores = np.empty(count, np.float32)
        qv = q[i, h]
        best = np.float32(-np.inf)
        for j in range(count):
            s = _dot(keys[kvh, lo + j], qv) * scale
            if softcap > np.float32(0.0):
                s = np.tanh(s / softcap) * softcap
            scores[j] = s
            if s > best:
                best = s
        total = np.float32(0.0)
        for j in range(count):
            e = np.exp(scores[j] - best)
            scores[j] = e
            total += e
        inv = np.float32(1.0) / total
        for d in range(D):
            out[i, h, d] = np.float32(0.0)
        for j in range(count):
            p = scores[j] * inv
            vrow = values[kvh, lo + j]
            for d in range(D):
                out[i, h, d] += p * vrow[d]
