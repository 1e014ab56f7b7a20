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

import math

import numba
import numpy as np
from llvmlite import binding as llvm
from llvmlite import ir
from numba import njit, prange, types
from numba.extending import intrinsic

# LLVM prefers 256-bit vectors on AVX-512 parts (to spare clock throttling on older chips); the tiles
# below run about twice as fast with full 512-bit vectors. fakcore's __init__ sets this for the whole process
# before numba builds its CPU target (the width changes the kernels' bits: see there); here for a process that
# imports this module without fakcore. Only when the user has not set NUMBA_CPU_FEATURES.
if not numba.config.CPU_FEATURES and "+avx512f" in llvm.get_host_cpu_features().flatten():
    numba.config.CPU_FEATURES = llvm.get_host_cpu_features().flatten() + ",-prefer-256-bit"


def target_features() -> set[str]:
    """The CPU features numba's code in this process may use (LLVM's names), which fak's kernel choices follow:
    NUMBA_CPU_FEATURES' "+" entries where it is set (fakcore sets it on AVX-512 CPUs to the host's; set by hand
    with NUMBA_CPU_NAME, it compiles for an older CPU: NUMBA_CPU_NAME=haswell NUMBA_CPU_FEATURES=+avx2,+fma,+f16c
    gives AVX2 code on any newer x86-64), the host's otherwise; never one the host lacks."""
    host = {f[1:] for f in llvm.get_host_cpu_features().flatten().split(",") if f.startswith("+")}
    if not numba.config.CPU_FEATURES:
        return host
    return host & {f[1:] for f in numba.config.CPU_FEATURES.split(",") if f.startswith("+")}


# No loop interleaving: the vectorized body of a loop then needs one vector of iterations, not four, so
# the 32-element sub-block loops of dequantization run in full vectors instead of a narrow epilogue. The
# tiles keep their parallelism from their 8 independent accumulators.
llvm.set_option("", "-force-vector-interleave=1")

ROWS_PER_TASK = 8  # output rows one thread dequantizes and reuses across every token of the call
FAST = {"nsz", "arcp", "contract", "afn", "reassoc"}  # no nnan/ninf: softmax starts from -inf


# ---------------------------------------------------------------------------------------------------------
# linear: y (T, R) = x (T, K) @ W (R, K)^T
# ---------------------------------------------------------------------------------------------------------


@njit(fastmath=FAST, inline="always", cache=True)
def _dequant_row(q: np.ndarray, scale: np.ndarray, offset: np.ndarray, r: int, out: np.ndarray) -> None:
    """Row r of an unpacked matrix into out (subs, sub) float32."""
    subs, sub = q.shape[1], q.shape[2]
    for s in range(subs):
        d = scale[r, s]
        m = offset[r, s]
        for j in range(sub):
            out[s, j] = np.float32(q[r, s, j]) * d + m


@njit(fastmath=FAST, inline="always", cache=True)
def _dequant_row4(q: np.ndarray, scale: np.ndarray, offset: np.ndarray, r: int, out: np.ndarray) -> None:
    """Row r of a nibble-packed matrix into out (subs, 32): byte j of a sub-block holds element j (low
    nibble) and element j + 16 (high nibble), both 0..15.

    The loop bound is read from the array (16) rather than written as a constant: LLVM leaves loops with a
    tiny constant trip count scalar, but vectorizes this one into a single 16-lane iteration."""
    half = q.shape[2]
    for s in range(q.shape[1]):
        d = scale[r, s]
        m = offset[r, s]
        qs = q[r, s]
        lo = out[s, :half]
        hi = out[s, half:]
        for j in range(half):
            lo[j] = np.float32(qs[j] & np.uint8(15)) * d + m
        for j in range(half):
            hi[j] = np.float32(qs[j] >> np.uint8(4)) * d + m


@njit(fastmath=FAST, inline="always", cache=True)
def _tile(w: np.ndarray, r0: int, xa: np.ndarray, xb: np.ndarray, out: np.ndarray, ta: int, tb: int, rows: int) -> None:
    """4 weight rows (w[r0:r0+4], f32) against 2 tokens: 8 dot products sharing every load.

    Every (row, token) result comes from this one loop whichever rows and tokens share the call, so it is
    the same whatever the batch; that is what makes the kernels batch-invariant."""
    w0 = w[r0]
    w1 = w[r0 + 1]
    w2 = w[r0 + 2]
    w3 = w[r0 + 3]
    a0 = np.float32(0.0)
    a1 = np.float32(0.0)
    a2 = np.float32(0.0)
    a3 = np.float32(0.0)
    b0 = np.float32(0.0)
    b1 = np.float32(0.0)
    b2 = np.float32(0.0)
    b3 = np.float32(0.0)
    for k in range(w0.shape[0]):
        xk = xa[k]
        yk = xb[k]
        a0 += w0[k] * xk
        a1 += w1[k] * xk
        a2 += w2[k] * xk
        a3 += w3[k] * xk
        b0 += w0[k] * yk
        b1 += w1[k] * yk
        b2 += w2[k] * yk
        b3 += w3[k] * yk
    out[ta, rows] = a0
    out[ta, rows + 1] = a1
    out[ta, rows + 2] = a2
    out[ta, rows + 3] = a3
    out[tb, rows] = b0
    out[tb, rows + 1] = b1
    out[tb, rows + 2] = b2
    out[tb, rows + 3] = b3


@njit(fastmath=FAST, inline="always", cache=True)
def _tile8(w: np.ndarray, xa: np.ndarray, out: np.ndarray) -> None:
    """8 weight rows against 1 token: the same 8-reduction loop shape as _tile (so LLVM splits each
    reduction the same way and a lone token gets the very bits it would get paired), half the work."""
    w0 = w[0]
    w1 = w[1]
    w2 = w[2]
    w3 = w[3]
    w4 = w[4]
    w5 = w[5]
    w6 = w[6]
    w7 = w[7]
    a0 = np.float32(0.0)
    a1 = np.float32(0.0)
    a2 = np.float32(0.0)
    a3 = np.float32(0.0)
    a4 = np.float32(0.0)
    a5 = np.float32(0.0)
    a6 = np.float32(0.0)
    a7 = np.float32(0.0)
    for k in range(w0.shape[0]):
        xk = xa[k]
        a0 += w0[k] * xk
        a1 += w1[k] * xk
        a2 += w2[k] * xk
        a3 += w3[k] * xk
        a4 += w4[k] * xk
        a5 += w5[k] * xk
        a6 += w6[k] * xk
        a7 += w7[k] * xk
    out[0, 0] = a0
    out[0, 1] = a1
    out[0, 2] = a2
    out[0, 3] = a3
    out[0, 4] = a4
    out[0, 5] = a5
    out[0, 6] = a6
    out[0, 7] = a7


@njit(fastmath=FAST, inline="always", cache=True)
def _panel(w: np.ndarray, x: np.ndarray, r0: int, R: int, out: np.ndarray, tmp: np.ndarray) -> None:
    """Rows r0…r0+7 of the output for every token, from the dequantized panel w (8, K). Tokens go in
    pairs, a last odd token alone; rows past R are zero in w and not written."""
    T = x.shape[0]
    n = min(8, R - r0)
    for t in range(0, T - 1, 2):
        _tile(w, 0, x[t], x[t + 1], tmp, 0, 1, 0)
        _tile(w, 4, x[t], x[t + 1], tmp, 0, 1, 4)
        for i in range(n):
            out[t, r0 + i] = tmp[0, i]
            out[t + 1, r0 + i] = tmp[1, i]
    if T % 2:
        _tile8(w, x[T - 1], tmp)
        for i in range(n):
            out[T - 1, r0 + i] = tmp[0, i]


@njit(parallel=True, fastmath=FAST, cache=True)
def linear_q(q: np.ndarray, scale: np.ndarray, offset: np.ndarray, x: np.ndarray, out: np.ndarray) -> None:
    """Quantized weights: q (R, S, B) int8, scale/offset (R, S) f32; x (T, K=S*B) f32 -> out (T, R)."""
    R, S, B = q.shape
    tasks = (R + ROWS_PER_TASK - 1) // ROWS_PER_TASK
    for task in prange(tasks):
        r0 = task * ROWS_PER_TASK
        w = np.empty((ROWS_PER_TASK, S, B), np.float32)
        tmp = np.empty((2, ROWS_PER_TASK), np.float32)
        for r in range(r0, r0 + ROWS_PER_TASK):
            if r < R:
                _dequant_row(q, scale, offset, r, w[r - r0])
            else:  # padding rows of the last panel
                w[r - r0] = 0.0
        _panel(w.reshape(ROWS_PER_TASK, S * B), x, r0, R, out, tmp)


@njit(parallel=True, fastmath=FAST, cache=True)
def linear_q4(q: np.ndarray, scale: np.ndarray, offset: np.ndarray, x: np.ndarray, out: np.ndarray) -> None:
    """Nibble-packed weights: q (R, S, 16) uint8, scale/offset (R, S) f32; x (T, K=S*32) f32 -> out (T, R)."""
    R, S, _ = q.shape
    tasks = (R + ROWS_PER_TASK - 1) // ROWS_PER_TASK
    for task in prange(tasks):
        r0 = task * ROWS_PER_TASK
        w = np.empty((ROWS_PER_TASK, S, 32), np.float32)
        tmp = np.empty((2, ROWS_PER_TASK), np.float32)
        for r in range(r0, r0 + ROWS_PER_TASK):
            if r < R:
                _dequant_row4(q, scale, offset, r, w[r - r0])
            else:
                w[r - r0] = 0.0
        _panel(w.reshape(ROWS_PER_TASK, S * 32), x, r0, R, out, tmp)


@njit(fastmath=FAST, inline="always", cache=True)
def _scale_row(q: np.ndarray, scale: np.ndarray, r: int, out: np.ndarray) -> None:
    """Row r of an unpacked matrix without offsets (w = scale * q) into out (subs, sub) float32."""
    subs, sub = q.shape[1], q.shape[2]
    for s in range(subs):
        d = scale[r, s]
        for j in range(sub):
            out[s, j] = np.float32(q[r, s, j]) * d


@njit(fastmath=FAST, inline="always", cache=True)
def _scale_row4(q: np.ndarray, scale: np.ndarray, r: int, out: np.ndarray) -> None:
    """_dequant_row4 without offsets."""
    half = q.shape[2]
    for s in range(q.shape[1]):
        d = scale[r, s]
        qs = q[r, s]
        lo = out[s, :half]
        hi = out[s, half:]
        for j in range(half):
            lo[j] = np.float32(qs[j] & np.uint8(15)) * d
        for j in range(half):
            hi[j] = np.float32(qs[j] >> np.uint8(4)) * d


@njit(parallel=True, fastmath=FAST, cache=True)
def linear_q_scaled(q: np.ndarray, scale: np.ndarray, x: np.ndarray, out: np.ndarray) -> None:
    """linear_q for a type without offsets (Q8_0, Q5_0, Q6_K, Q3_K): 4 bytes less per sub-block to read."""
    R, S, B = q.shape
    tasks = (R + ROWS_PER_TASK - 1) // ROWS_PER_TASK
    for task in prange(tasks):
        r0 = task * ROWS_PER_TASK
        w = np.empty((ROWS_PER_TASK, S, B), np.float32)
        tmp = np.empty((2, ROWS_PER_TASK), np.float32)
        for r in range(r0, r0 + ROWS_PER_TASK):
            if r < R:
                _scale_row(q, scale, r, w[r - r0])
            else:
                w[r - r0] = 0.0
        _panel(w.reshape(ROWS_PER_TASK, S * B), x, r0, R, out, tmp)


@njit(parallel=True, fastmath=FAST, cache=True)
def linear_q4_scaled(q: np.ndarray, scale: np.ndarray, x: np.ndarray, out: np.ndarray) -> None:
    """linear_q4 for nibbles without offsets."""
    R, S, _ = q.shape
    tasks = (R + ROWS_PER_TASK - 1) // ROWS_PER_TASK
    for task in prange(tasks):
        r0 = task * ROWS_PER_TASK
        w = np.empty((ROWS_PER_TASK, S, 32), np.float32)
        tmp = np.empty((2, ROWS_PER_TASK), np.float32)
        for r in range(r0, r0 + ROWS_PER_TASK):
            if r < R:
                _scale_row4(q, scale, r, w[r - r0])
            else:
                w[r - r0] = 0.0
        _panel(w.reshape(ROWS_PER_TASK, S * 32), x, r0, R, out, tmp)


@njit(parallel=True, fastmath=FAST, cache=True)
def linear_f32(w: np.ndarray, x: np.ndarray, out: np.ndarray) -> None:
    """Float weights w (R, K) f32; x (T, K) -> out (T, R)."""
    R, K = w.shape
    tasks = (R + ROWS_PER_TASK - 1) // ROWS_PER_TASK
    for task in prange(tasks):
        r0 = task * ROWS_PER_TASK
        tmp = np.empty((2, ROWS_PER_TASK), np.float32)
        if r0 + ROWS_PER_TASK <= R:
            _panel(w[r0:r0 + ROWS_PER_TASK], x, r0, R, out, tmp)
        else:  # the last, partial panel: zero-padded copy
            pad = np.zeros((ROWS_PER_TASK, K), np.float32)
            pad[: R - r0] = w[r0:R]
            _panel(pad, x, r0, R, out, tmp)


@njit(fastmath=FAST, cache=True)
def embed_q4(q: np.ndarray, scale: np.ndarray, offset: np.ndarray, ids: np.ndarray, mult: np.float32, out: np.ndarray) -> None:
    S = q.shape[1]
    for t in range(ids.shape[0]):
        _dequant_row4(q, scale, offset, ids[t], out[t].reshape(S, 32))
        if mult != np.float32(1.0):
            for k in range(S * 32):
                out[t, k] *= mult


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
def layernorm(x: np.ndarray, w: np.ndarray, b: np.ndarray, eps: np.float32, out: np.ndarray) -> None:
    """x (N, D) -> out (N, D): (x - mean) / sqrt(var + eps) * w + b, one row at a time (mean first, then the
    variance of the centred row, as torch). w, b (G, D): row n takes row n % G (G heads of a (T, G, D) input,
    or G = 1); b of zero rows: no bias."""
    N, D = x.shape
    G = w.shape[0]
    for n in range(N):
        s = np.float32(0.0)
        for k in range(D):
            s += x[n, k]
        mean = s / np.float32(D)
        ss = np.float32(0.0)
        for k in range(D):
            c = x[n, k] - mean
            ss += c * c
        inv = np.float32(1.0) / np.sqrt(ss / np.float32(D) + eps)
        g = n % G
        if b.shape[0]:
            for k in range(D):
                out[n, k] = (x[n, k] - mean) * inv * w[g, k] + b[g, k]
        else:
            for k in range(D):
                out[n, k] = (x[n, k] - mean) * inv * w[g, k]


@njit(fastmath=FAST, cache=True)
def rope(x: np.ndarray, positions: np.ndarray, cos: np.ndarray, sin: np.ndarray, out: np.ndarray) -> None:
    """x (T, H, D), HF's rotate_half convention; cos/sin (P, R) tables: the leading R <= D dims of each head
    turn (partial rotary), the rest pass."""
    T, H, D = x.shape
    R = cos.shape[1]
    half = R // 2
    for t in range(T):
        p = positions[t]
        for h in range(H):
            for i in range(half):
                a = x[t, h, i]
                b = x[t, h, i + half]
                out[t, h, i] = a * cos[p, i] - b * sin[p, i]
                out[t, h, i + half] = b * cos[p, i + half] + a * sin[p, i + half]
            for i in range(R, D):
                out[t, h, i] = x[t, h, i]


@intrinsic
def _pow2(typingctx, n):
    """2.0 ** n as float32 for an int32 n in -126..127, built from its bits (exponent n + 127): plain IR,
    so the loops calling it still vectorize."""
    sig = types.float32(types.int32)

    def codegen(context, builder, signature, args):
        biased = builder.shl(builder.add(args[0], ir.Constant(ir.IntType(32), 127)), ir.Constant(ir.IntType(32), 23))
        return builder.bitcast(biased, ir.FloatType())

    return sig, codegen


@njit(fastmath=FAST, inline="always", cache=True)
def _exp(x: np.float32) -> np.float32:
    """e ** x in float32 within ~2 ulp, as Cephes' expf: x = n ln2 + r (|r| <= ln2 / 2, ln2 split in two so
    n ln2 is exact), e ** r by a degree-7 polynomial, times 2 ** n. numba's np.exp is a scalar libm call
    (no SVML here); this one vectorizes. x is clamped to [-87, 88], where the result stays normal."""
    x = min(max(x, np.float32(-87.0)), np.float32(88.0))
    n = np.rint(x * np.float32(1.44269504088896341))
    r = x - n * np.float32(0.693359375) + n * np.float32(2.12194440e-4)
    p = np.float32(1.9875691500e-4)
    p = p * r + np.float32(1.3981999507e-3)
    p = p * r + np.float32(8.3334519073e-3)
    p = p * r + np.float32(4.1665795894e-2)
    p = p * r + np.float32(1.6666665459e-1)
    p = p * r + np.float32(5.0000001201e-1)
    e = (p * r * r + r) + np.float32(1.0)
    return e * _pow2(np.int32(n))


@njit(fastmath=FAST, error_model="numpy", inline="always", cache=True)  # numpy division: no zero check, so it vectorizes
def _silu_row(gn: np.ndarray, un: np.ndarray, on: np.ndarray) -> None:
    for k in range(gn.shape[0]):
        g = gn[k]
        on[k] = g / (np.float32(1.0) + _exp(-g)) * un[k]


@njit(fastmath=FAST, error_model="numpy", inline="always", cache=True)
def _gelu_tanh_row(gn: np.ndarray, un: np.ndarray, on: np.ndarray) -> None:
    """GELU(tanh) gate * up, with 0.5 (1 + tanh u) written as 1 / (1 + e ** -2u) (the same function)."""
    c = np.float32(2.0 * np.sqrt(2.0 / np.pi))
    for k in range(gn.shape[0]):
        g = gn[k]
        on[k] = g / (np.float32(1.0) + _exp(-c * (g + np.float32(0.044715) * g * g * g))) * un[k]


def _pointer_intrinsic(element):
    def pointer(typingctx, address):
        sig = types.CPointer(element)(types.intp)

        def codegen(context, builder, signature, args):
            return builder.inttoptr(args[0], context.get_value_type(signature.return_type))

        return sig, codegen

    return intrinsic(pointer)


# An integer address (numpy's `.ctypes.data`) as the float32 / uint16 pointer numba.carray takes.
_float32_ptr = _pointer_intrinsic(types.float32)
_uint16_ptr = _pointer_intrinsic(types.uint16)


@intrinsic
def _half_bits(typingctx, x):
    """A float32 rounded to the nearest half float (ties to even, as numpy's astype(float16)), as its 16 bits:
    numba has no float16 on the CPU."""
    sig = types.uint16(types.float32)

    def codegen(context, builder, signature, args):
        return builder.bitcast(builder.fptrunc(args[0], ir.HalfType()), ir.IntType(16))

    return sig, codegen


@njit(inline="always", cache=True)
def _unit_row(a: np.ndarray, n: int) -> np.ndarray:
    """Row n of a 2-D float32 array whose rows are contiguous, typed as contiguous. The gated activations
    get the two halves of the gate/up matmul's output, views whose rows are contiguous but which numba
    types as strided ('A') for more than one row: its loops over those did not vectorize (16 decode rows
    of 1,536 took ~6 us a row against ~1 for one row). The caller guarantees the unit inner stride."""
    return numba.carray(_float32_ptr(a[n].ctypes.data), a.shape[1])


# The gated activations row by row (contiguous rows: the loops vectorize), on one thread for a few decode rows
# and split between threads for a prefill's; a row is the same loop either way.
@njit(fastmath=FAST, error_model="numpy", cache=True)
def gated_silu(gate: np.ndarray, up: np.ndarray, out: np.ndarray) -> None:
    for n in range(gate.shape[0]):
        _silu_row(_unit_row(gate, n), _unit_row(up, n), out[n])


@njit(fastmath=FAST, error_model="numpy", parallel=True, cache=True)
def gated_silu_rows(gate: np.ndarray, up: np.ndarray, out: np.ndarray) -> None:
    for n in prange(gate.shape[0]):
        _silu_row(_unit_row(gate, n), _unit_row(up, n), out[n])


@njit(fastmath=FAST, error_model="numpy", cache=True)
def gated_gelu_tanh(gate: np.ndarray, up: np.ndarray, out: np.ndarray) -> None:
    for n in range(gate.shape[0]):
        _gelu_tanh_row(_unit_row(gate, n), _unit_row(up, n), out[n])


@njit(fastmath=FAST, error_model="numpy", parallel=True, cache=True)
def gated_gelu_tanh_rows(gate: np.ndarray, up: np.ndarray, out: np.ndarray) -> None:
    for n in prange(gate.shape[0]):
        _gelu_tanh_row(_unit_row(gate, n), _unit_row(up, n), out[n])


PARALLEL_ROWS = 8  # rows from which an elementwise kernel splits them between threads


@njit(fastmath=FAST, error_model="numpy", cache=True)  # numpy division: no zero check, so it vectorizes
def swiglu_oai(gate: np.ndarray, up: np.ndarray, alpha: np.float32, limit: np.float32, out: np.ndarray) -> None:
    """gpt-oss's experts: g = min(gate, limit), u = clamp(up, -limit, limit), (u + 1) * g * sigmoid(alpha g)."""
    for n in range(gate.shape[0]):
        gn, un, on = gate[n], up[n], out[n]  # row views: the loop vectorizes
        for k in range(gn.shape[0]):
            g = min(gn[k], limit)
            u = min(max(un[k], -limit), limit)
            on[k] = (u + np.float32(1.0)) * (g / (np.float32(1.0) + _exp(-alpha * g)))


@njit(fastmath=FAST, cache=True)
def gelu(x: np.ndarray, out: np.ndarray) -> None:
    """Exact GELU, 0.5 x (1 + erf(x / sqrt 2)), as torch's default (GPT-NeoX's plain MLP); x, out (N, D)."""
    c = np.float32(1.0 / np.sqrt(2.0))
    for n in range(x.shape[0]):
        for k in range(x.shape[1]):
            v = x[n, k]
            out[n, k] = np.float32(0.5) * v * (np.float32(1.0) + math.erf(v * c))


@njit(fastmath=FAST, error_model="numpy", cache=True)
def gelu_tanh(x: np.ndarray, out: np.ndarray) -> None:
    """GELU(tanh) of x, with 0.5 (1 + tanh u) as 1 / (1 + e ** -2u), as gated_gelu_tanh; x, out (N, D)."""
    c = np.float32(2.0 * np.sqrt(2.0 / np.pi))
    for n in range(x.shape[0]):
        xn, on = x[n], out[n]
        for k in range(xn.shape[0]):
            g = xn[k]
            on[k] = g / (np.float32(1.0) + _exp(-c * (g + np.float32(0.044715) * g * g * g)))


@njit(parallel=True, cache=True)
def transpose_keys(k: np.ndarray, kt: np.ndarray, a: int, b: int) -> None:
    """kt[l, h, :, a:b] = k[l, h, a:b, :].T for every layer and head (the attention kernel's key layout)."""
    L, Hkv, _, D = k.shape
    for lh in prange(L * Hkv):
        l = lh // Hkv
        h = lh - l * Hkv
        for p in range(a, b):
            for d in range(D):
                kt[l, h, d, p] = k[l, h, p, d]
