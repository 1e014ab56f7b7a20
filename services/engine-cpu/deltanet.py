"""Gated DeltaNet's recurrence as numba kernels: the backend's `deltanet_scan` (fakcore/engine/deltanet.py).

The contract of the host reference `delta_scan`, and its float32 operations in its order, in three phases:

1. Per token (`_tokens`, threads split the tokens): the causal conv over the last K inputs and its silu, q and
   k l2-normed (q also scaled by 1/sqrt(dk)), each value head's decay exp(g) and beta. A token's conv reads
   only inputs, never an earlier token's result, so no token waits for another.
2. Per block of S's columns (`_columns`, threads split the blocks): the delta rule over every token in turn,
   the block staying in L1 from the first token to the last. Columns share nothing (see there).
3. Per token (`_gate`): RMSNormGated over each head's dv outputs.

Every result comes from one loop over the same data whatever the thread count and however the tokens are
split into calls (the conv state and S carry exactly), so the kernels keep the batch invariance exact eviction
needs. No fastmath: without `contract` nothing fuses into FMAs and without `reassoc` no sum is reordered, so
the delta rule's products and sums round as numpy's do, and the sums numpy runs along a contiguous axis (the
l2norm's and the RMS norm's sums of squares) follow its pairwise order (`_pairwise_sq`). What differs is exp,
kernels._exp (Cephes, within 1 ulp; it vectorizes) against numpy's SIMD exp, and libm's log1p against numpy's:
an ulp here and there, which the recurrence carries on (tests/unit/engine/test_deltanet_kernel.py bounds it).
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from fak_engine_cpu.kernels import _exp
from fakcore.engine.deltanet import L2_EPS, grouped_heads

# S's columns per job of the delta rule: a (dk, JB) block is 32 KiB at dk = 128, inside a 48 KiB L1, and a row
# is four AVX-512 vectors, enough to cover the loop's overhead and its per-column sums' trips through memory
# (16: 1.9x slower; 128, the whole head, from L2: 1.1x)
JB = 64


@njit(inline="always", error_model="numpy", cache=True)
def _sigmoid(x: np.float32) -> np.float32:
    return np.float32(1.0) / (np.float32(1.0) + _exp(-x))


@njit(inline="always", error_model="numpy", cache=True)
def _block_sq(x: np.ndarray, lo: int, n: int) -> np.float32:
    """sum(x[lo:lo+n] ** 2), n <= 128, as numpy sums a block: in order below 8 elements, else in eight
    interleaved partial sums combined as a tree, then the tail in order."""
    if n < 8:
        s = np.float32(0.0)
        for i in range(lo, lo + n):
            s += x[i] * x[i]
        return s
    x0, x1, x2, x3 = x[lo] * x[lo], x[lo + 1] * x[lo + 1], x[lo + 2] * x[lo + 2], x[lo + 3] * x[lo + 3]
    x4, x5, x6, x7 = x[lo + 4] * x[lo + 4], x[lo + 5] * x[lo + 5], x[lo + 6] * x[lo + 6], x[lo + 7] * x[lo + 7]
    end = lo + n - n % 8
    for i in range(lo + 8, end, 8):
        x0 += x[i] * x[i]
        x1 += x[i + 1] * x[i + 1]
        x2 += x[i + 2] * x[i + 2]
        x3 += x[i + 3] * x[i + 3]
        x4 += x[i + 4] * x[i + 4]
        x5 += x[i + 5] * x[i + 5]
        x6 += x[i + 6] * x[i + 6]
        x7 += x[i + 7] * x[i + 7]
    s = ((x0 + x1) + (x2 + x3)) + ((x4 + x5) + (x6 + x7))
    for i in range(end, lo + n):
        s += x[i] * x[i]
    return s


@njit(error_model="numpy", cache=True)
def _pairwise_sq(x: np.ndarray, lo: int, n: int) -> np.float32:
    """sum(x[lo:lo+n] ** 2) in numpy's pairwise order: blocks of up to 128 (_block_sq); a longer run is split in
    two, the first half a multiple of 8, and the halves' sums added. The split recurses through a stack of its
    own: numba's cache does not reload self-recursive functions safely (a segfault on the second process)."""
    if n <= 128:
        return _block_sq(x, lo, n)
    todo = np.empty((128, 3), np.int64)  # (lo, n, 0) a run to sum, (_, _, 1) add the last two sums
    sums = np.empty(64, np.float32)
    todo[0, 0], todo[0, 1], todo[0, 2] = lo, n, 0
    top, done = 1, 0
    while top:
        top -= 1
        a, m, add = todo[top, 0], todo[top, 1], todo[top, 2]
        if add:
            done -= 1
            sums[done - 1] = sums[done - 1] + sums[done]
        elif m <= 128:
            sums[done] = _block_sq(x, a, m)
            done += 1
        else:  # the first half popped first: its sum below the second's
            half = m // 2 - (m // 2) % 8
            todo[top, 0], todo[top, 1], todo[top, 2] = 0, 0, 1
            todo[top + 1, 0], todo[top + 1, 1], todo[top + 1, 2] = a + half, m - half, 0
            todo[top + 2, 0], todo[top + 2, 1], todo[top + 2, 2] = a, half, 0
            top += 3
    return sums[0]


@njit(parallel=True, error_model="numpy", cache=True)
def _tokens(ext: np.ndarray, conv_w: np.ndarray, b: np.ndarray, a: np.ndarray, A: np.ndarray, dt_bias: np.ndarray,
            hk: int, dk: int, y: np.ndarray, decay: np.ndarray, beta: np.ndarray) -> None:
    """Phase 1. ext (K-1+T, C): the conv state then the tokens' inputs; y (T, C) <- [q; k; v] after conv, silu
    and the l2norms; decay, beta (T, Hv) <- exp(A softplus(a + dt_bias)), sigmoid(b)."""
    T, C = y.shape
    K = conv_w.shape[0]
    hv = decay.shape[1]
    q_scale = np.float32(dk ** -0.5)
    for t in prange(T):
        yt = y[t]
        x0, w0 = ext[t], conv_w[0]
        for c in range(C):  # the taps oldest first, as numpy sums the window's rows; each loop runs down C
            yt[c] = x0[c] * w0[c]
        for j in range(1, K):
            xj, wj = ext[t + j], conv_w[j]
            for c in range(C):
                yt[c] += xj[c] * wj[c]
        for c in range(C):
            yt[c] = yt[c] * _sigmoid(yt[c])
        for h in range(2 * hk):  # q heads then k heads
            lo = h * dk
            inv = np.float32(1.0) / np.sqrt(_pairwise_sq(yt, lo, dk) + L2_EPS)
            if h < hk:
                for i in range(lo, lo + dk):
                    yt[i] = yt[i] * inv * q_scale
            else:
                for i in range(lo, lo + dk):
                    yt[i] = yt[i] * inv
        for h in range(hv):
            x = a[t, h] + dt_bias[h]
            sp = x if x > np.float32(20.0) else np.float32(np.log1p(_exp(x)))  # torch's softplus, threshold 20
            decay[t, h] = _exp(A[h] * sp)
            beta[t, h] = _sigmoid(b[t, h])


@njit(parallel=True, error_model="numpy", cache=True)
def _columns(y: np.ndarray, decay: np.ndarray, beta: np.ndarray, hk: int, heads: np.ndarray, start: int, every: int,
             S0: np.ndarray, S: np.ndarray, o: np.ndarray, marks: np.ndarray) -> None:
    """Phase 2, the delta rule. S0 (Hv, dk, dv): the state before the first token; S <- the state after the last;
    o (T, Hv, dv) <- q^T S at every token, value head h reading key head heads[h]; marks (N, Hv, dk, dv) <- S after each position that is a multiple of
    `every`, in order.

    Column j of S meets only column j: k^T S, v - k^T S, the update and q^T S are all per column. So a job is
    JB columns of one head over every token, its block of S (dk, JB) in a buffer that stays in L1, and the
    threads share Hv * dv / JB jobs. One sweep of the block per token: while it writes token t's S it also sums
    token t+1's k^T (exp(g) S), the products the reference forms after the update, in the same order over i."""
    T, hv, dv = o.shape
    dk = S0.shape[1]
    blocks = (dv + JB - 1) // JB
    first = start // every
    for job in prange(hv * blocks):
        h, j0 = job // blocks, job % blocks * JB
        w = min(JB, dv - j0)
        qo, ko = heads[h] * dk, (hk + heads[h]) * dk
        vo = 2 * hk * dk + h * dv + j0
        Sb = np.empty((dk, w), np.float32)
        for i in range(dk):
            for j in range(w):
                Sb[i, j] = S0[h, i, j0 + j]
        kS = np.zeros(w, np.float32)  # k^T (exp(g) S) of the token at hand, then its delta
        kS_next = np.empty(w, np.float32)
        acc = np.empty(w, np.float32)
        if T:
            yt, eg = y[0], decay[0, h]
            for i in range(dk):
                ki = yt[ko + i]
                Si = Sb[i]
                for j in range(w):
                    kS[j] += Si[j] * eg * ki
        for t in range(T):
            yt, eg, bt = y[t], decay[t, h], beta[t, h]
            tn = min(t + 1, T - 1)  # the last token sums for a next one that never comes (unused)
            yn, en = y[tn], decay[tn, h]
            for j in range(w):
                kS[j] = (yt[vo + j] - kS[j]) * bt  # delta = beta (v - k^T S): what S mispredicts for k
                acc[j] = np.float32(0.0)
                kS_next[j] = np.float32(0.0)
            for i in range(dk):  # S <- exp(g) S + k delta^T; q^T S; the next token's k^T (exp(g') S)
                ki, qi, kn = yt[ko + i], yt[qo + i], yn[ko + i]
                Si = Sb[i]
                for j in range(w):
                    s = Si[j] * eg + ki * kS[j]
                    Si[j] = s
                    acc[j] += s * qi
                    kS_next[j] += s * en * kn
            ot = o[t, h]
            for j in range(w):
                ot[j0 + j] = acc[j]
            kS, kS_next = kS_next, kS
            position = start + t + 1
            if position % every == 0:
                mark = marks[position // every - first - 1, h]
                for i in range(dk):
                    for j in range(w):
                        mark[i, j0 + j] = Sb[i, j]
        for i in range(dk):
            for j in range(w):
                S[h, i, j0 + j] = Sb[i, j]


@njit(parallel=True, error_model="numpy", cache=True)
def _gate(o: np.ndarray, z: np.ndarray, norm: np.ndarray, eps: np.float32) -> None:
    """Phase 3, RMSNormGated in place: o (T, Hv, dv) <- o / sqrt(mean(o^2) + eps) * norm * silu(z)."""
    T, hv, dv = o.shape
    for t in prange(T):
        for h in range(hv):
            ot, zt = o[t, h], z[t, h]
            inv = np.float32(1.0) / np.sqrt(_pairwise_sq(ot, 0, dv) / np.float32(dv) + eps)
            for j in range(dv):
                ot[j] = ot[j] * inv * norm[j] * (zt[j] * _sigmoid(zt[j]))


def deltanet_scan(mixed: np.ndarray, z: np.ndarray, b: np.ndarray, a: np.ndarray, conv_w: np.ndarray, A: np.ndarray,
                  dt_bias: np.ndarray, norm: np.ndarray, conv: np.ndarray, S: np.ndarray, hk: int, eps: np.float32,
                  start: int, every: int, key_head: np.ndarray | None = None,
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[int, tuple[np.ndarray, np.ndarray]]]:
    """fakcore.engine.deltanet.delta_scan's contract: (out (T, Hv, dv), conv (K-1, C), S (Hv, dk, dv), passed
    {position: (conv, S)}); the inputs are not modified. A checkpoint's S is a slice of one array the call
    allocates, its conv state a copy."""
    f32 = np.float32
    T, hv, dv = z.shape
    dk = S.shape[1]
    K1 = conv.shape[0]
    ext = np.ascontiguousarray(np.concatenate([conv, mixed]), f32)  # (K-1+T, C): the conv state after token t is ext[t+1:t+K]
    y = np.empty((T, mixed.shape[1]), f32)
    decay, beta = np.empty((T, hv), f32), np.empty((T, hv), f32)
    _tokens(ext, np.ascontiguousarray(conv_w, f32), np.ascontiguousarray(b, f32), np.ascontiguousarray(a, f32),
            np.ascontiguousarray(A, f32), np.ascontiguousarray(dt_bias, f32), hk, dk, y, decay, beta)
    positions = range((start // every + 1) * every, start + T + 1, every)
    S_next = np.empty((hv, dk, dv), f32)
    out = np.empty((T, hv, dv), f32)
    marks = np.empty((len(positions), hv, dk, dv), f32)
    heads = grouped_heads(hk, hv) if key_head is None else np.ascontiguousarray(key_head, np.int64)
    _columns(y, decay, beta, hk, heads, start, every, np.ascontiguousarray(S, f32), S_next, out, marks)
    _gate(out, np.ascontiguousarray(z, f32), np.ascontiguousarray(norm, f32), f32(eps))
    passed = {p: (ext[p - start:p - start + K1].copy(), marks[i]) for i, p in enumerate(positions)}
    return out, ext[T:T + K1].copy(), S_next, passed
