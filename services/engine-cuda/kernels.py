"""engine-cuda's kernels, written with numba.cuda; backend.py launches them.

Weights stay on the device in their file's form: quant blocks as uint8 rows, F16/BF16 as uint16 bits
decoded through a 65536-entry float32 table, F32 as float32. Each quant format has one device function
that decodes one 32-element unit of a row (its block layout in the comment above it); `unit_kernels` turns
it into that format's matvec and row-lookup kernels, so the same decoding serves the forward pass and the
tests that compare it with formats/quants.

Batch invariance (exact KV eviction needs it): every result of a token is computed by threads that see
that token alone, in an order fixed by the block shape (`lanes` threads per dot product, strided over the
input, summed by a fixed tree), never by how many tokens share the launch. Every kernel loops grid-stride
over its work items, so a smaller grid (the simulator's tests) computes the same bits:
    linear     one (token, output row) per `lanes` threads: lane l sums units l, l+lanes, ...; a tree adds lanes
    rmsnorm    one row per block, the same strided sum and tree (layernorm: one for the mean, one for the variance)
    attention  one (token, head) per block: scores key by key, a fixed tree for max and sum, values in key order
    the rest   elementwise

Products that dequantize (d * q + m) use round-to-nearest intrinsics (`mul`, `add`, `sub`), which the GPU
compiler never fuses into an FMA: the decoded weights are then the reference's bits exactly. The simulator
(NUMBA_ENABLE_CUDASIM=1, numpy scalars) rounds every operation on its own, so plain operators are the same.
"""

from __future__ import annotations

import math

import numpy as np
from numba import config, cuda, float32, int32

UNIT = 32  # elements per unit of every quant kernel (a Q4_0/Q4_1/Q8_0 block; a K-quant sub-block run)
ROWS = 4  # output rows per block of a linear kernel (threadIdx.y)
MAX_LANES = 32  # threads per dot product at most (threadIdx.x); a power of two
PAGE = 16  # KV slots per page of the device cache (backend.KVPages)
NEG_INF = np.float32(-np.inf)

# f16 / bf16 bits -> float32, exactly (numpy's own conversions)
F16_TABLE = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(np.float32)
BF16_TABLE = (np.arange(1 << 16, dtype=np.uint32) << np.uint32(16)).view(np.float32)

if config.ENABLE_CUDASIM:
    def mul(a, b):
        return a * b

    def add(a, b):
        return a + b

    def sub(a, b):
        return a - b
else:  # mul.rn / add.rn / sub.rn: never contracted into an FMA
    from numba.cuda import libdevice

    mul, add, sub = libdevice.fmul_rn, libdevice.fadd_rn, libdevice.fsub_rn


@cuda.jit(device=True)
def f16(raw, row, at, table):
    """The f16 at byte `at` of `row`, as float32."""
    return table[int32(raw[row, at]) | (int32(raw[row, at + 1]) << 8)]


@cuda.jit(device=True)
def tree_sum(part, r, lane, lanes):
    """part[r, 0] + … + part[r, lanes-1], added in a fixed tree; every thread of the block must call it."""
    s = lanes // 2
    while s > 0:
        cuda.syncthreads()
        if lane < s:
            part[r, lane] += part[r, lane + s]
        s //= 2
    cuda.syncthreads()
    return part[r, 0]


@cuda.jit(device=True)
def tree_max(part, r, lane, lanes):
    s = lanes // 2
    while s > 0:
        cuda.syncthreads()
        if lane < s and part[r, lane + s] > part[r, lane]:
            part[r, lane] = part[r, lane + s]
        s //= 2
    cuda.syncthreads()
    return part[r, 0]


# -- one 32-element unit of a quantized row -> w[0:32] ------------------------------------------------

# Q8_0: 32 elements per 34-byte block (d:2, qs:32 int8); x = q * d.
@cuda.jit(device=True)
def unit_q8_0(raw, row, u, table, w):
    b = u * 34
    d = f16(raw, row, b, table)
    for j in range(32):
        q = int32(raw[row, b + 2 + j])
        if q > 127:
            q -= 256
        w[j] = mul(float32(q), d)


# Q4_0: 32 elements per 18-byte block (d:2, qs:16); x = (q - 8) * d, q in 0..15; element j in byte j % 16,
# low nibble for j < 16, high nibble for j >= 16.
@cuda.jit(device=True)
def unit_q4_0(raw, row, u, table, w):
    b = u * 18
    d = f16(raw, row, b, table)
    for j in range(16):
        byte = int32(raw[row, b + 2 + j])
        w[j] = mul(d, float32((byte & 15) - 8))
        w[j + 16] = mul(d, float32((byte >> 4) - 8))


# Q4_1: 32 elements per 20-byte block (d:2, m:2, qs:16); x = q * d + m, q in 0..15, nibbles as Q4_0.
@cuda.jit(device=True)
def unit_q4_1(raw, row, u, table, w):
    b = u * 20
    d = f16(raw, row, b, table)
    m = f16(raw, row, b + 2, table)
    for j in range(16):
        byte = int32(raw[row, b + 4 + j])
        w[j] = add(mul(d, float32(byte & 15)), m)
        w[j + 16] = add(mul(d, float32(byte >> 4)), m)


# Q5_0: 32 elements per 22-byte block (d:2, qh:4, qs:16); x = (q - 16) * d, q in 0..31: nibbles as Q4_0, the
# fifth bit of element j is bit j of the little-endian uint32 qh (bit j % 8 of byte j // 8).
@cuda.jit(device=True)
def unit_q5_0(raw, row, u, table, w):
    b = u * 22
    d = f16(raw, row, b, table)
    for j in range(16):
        byte = int32(raw[row, b + 6 + j])
        lo = (byte & 15) | (((int32(raw[row, b + 2 + j // 8]) >> (j % 8)) & 1) << 4)
        hi = (byte >> 4) | (((int32(raw[row, b + 4 + j // 8]) >> (j % 8)) & 1) << 4)
        w[j] = mul(d, float32(lo - 16))
        w[j + 16] = mul(d, float32(hi - 16))


# Q5_1: 32 elements per 24-byte block (d:2, m:2, qh:4, qs:16); x = q * d + m, q in 0..31, bits as Q5_0.
@cuda.jit(device=True)
def unit_q5_1(raw, row, u, table, w):
    b = u * 24
    d = f16(raw, row, b, table)
    m = f16(raw, row, b + 2, table)
    for j in range(16):
        byte = int32(raw[row, b + 8 + j])
        lo = (byte & 15) | (((int32(raw[row, b + 4 + j // 8]) >> (j % 8)) & 1) << 4)
        hi = (byte >> 4) | (((int32(raw[row, b + 6 + j // 8]) >> (j % 8)) & 1) << 4)
        w[j] = add(mul(d, float32(lo)), m)
        w[j + 16] = add(mul(d, float32(hi)), m)


@cuda.jit(device=True)
def scale_min_k4(raw, row, at, s):
    """get_scale_min_k4: sub-block s's 6-bit scale and min from the 12 bytes at `at` (kquants.scale_min_k4)."""
    if s < 4:
        sc = int32(raw[row, at + s]) & 63
        m = int32(raw[row, at + 4 + s]) & 63
    else:
        mixed = int32(raw[row, at + 8 + s - 4])
        sc = (mixed & 15) | ((int32(raw[row, at + s - 4]) >> 2) & 48)
        m = (mixed >> 4) | ((int32(raw[row, at + s]) >> 2) & 48)
    return sc, m


# Q4_K: 256 elements per 144-byte block (d:2, dmin:2, scales:12, qs:128); 8 sub-blocks of 32 with 6-bit
# scales and mins; x = (d * sc) * q - (dmin * m), q in 0..15. Sub-block s is nibble s % 2 of the 32 bytes
# qs[32 * (s // 2) ...]. A unit is one sub-block.
@cuda.jit(device=True)
def unit_q4_k(raw, row, u, table, w):
    b = (u // 8) * 144
    s = u % 8
    sc, m = scale_min_k4(raw, row, b + 4, s)
    dl = mul(f16(raw, row, b, table), float32(sc))
    ml = mul(f16(raw, row, b + 2, table), float32(m))
    qs = b + 16 + 32 * (s // 2)
    shift = 4 * (s % 2)
    for j in range(32):
        q = (int32(raw[row, qs + j]) >> shift) & 15
        w[j] = sub(mul(dl, float32(q)), ml)


# Q5_K: 256 elements per 176-byte block (d:2, dmin:2, scales:12, qh:32, qs:128); as Q4_K plus a fifth bit
# per element: element j of sub-block s has it at bit s of qh[j]; q in 0..31.
@cuda.jit(device=True)
def unit_q5_k(raw, row, u, table, w):
    b = (u // 8) * 176
    s = u % 8
    sc, m = scale_min_k4(raw, row, b + 4, s)
    dl = mul(f16(raw, row, b, table), float32(sc))
    ml = mul(f16(raw, row, b + 2, table), float32(m))
    qs = b + 48 + 32 * (s // 2)
    shift = 4 * (s % 2)
    for j in range(32):
        q = ((int32(raw[row, qs + j]) >> shift) & 15) | (((int32(raw[row, b + 16 + j]) >> s) & 1) << 4)
        w[j] = sub(mul(dl, float32(q)), ml)


# Q6_K: 256 elements per 210-byte block (ql:128, qh:64, scales:16 int8, d:2); 16 sub-blocks of 16 with int8
# scales; q = (low 4 bits | high 2 bits << 4) - 32, x = (d * scale) * q. Element e: low bits are nibble
# (e % 128) // 64 of ql[64 * (e // 128) + e % 64]; high bits are bits 2 * ((e % 128) // 32) of
# qh[32 * (e // 128) + e % 32]. A unit is two sub-blocks.
@cuda.jit(device=True)
def unit_q6_k(raw, row, u, table, w):
    b = (u // 8) * 210
    d = f16(raw, row, b + 208, table)
    for j in range(32):
        e = (u % 8) * 32 + j
        half, r = e // 128, e % 128
        lo = (int32(raw[row, b + 64 * half + r % 64]) >> (4 * (r // 64))) & 15
        hi = (int32(raw[row, b + 128 + 32 * half + r % 32]) >> (2 * (r // 32))) & 3
        sc = int32(raw[row, b + 192 + e // 16])
        if sc > 127:
            sc -= 256
        w[j] = mul(mul(d, float32(sc)), float32((lo | (hi << 4)) - 32))


def unit_kernels(unit):
    """The matvec and row-lookup kernels of one quant format, from its unit decoder."""

    @cuda.jit
    def linear(raw, table, x, bias, has_bias, out):
        """out[t, row] = sum_k w[row, k] x[t, k] (+ bias[row]); block (lanes, ROWS), grid-stride over
        (row blocks, tokens)."""
        lane, r, lanes = cuda.threadIdx.x, cuda.threadIdx.y, cuda.blockDim.x
        part = cuda.shared.array((ROWS, MAX_LANES), float32)
        w = cuda.local.array(UNIT, float32)
        for t in range(cuda.blockIdx.y, out.shape[0], cuda.gridDim.y):
            for first in range(cuda.blockIdx.x * ROWS, out.shape[1], cuda.gridDim.x * ROWS):
                row = first + r
                acc = float32(0.0)
                if row < out.shape[1]:
                    for u in range(lane, x.shape[1] // UNIT, lanes):
                        unit(raw, row, u, table, w)
                        s = float32(0.0)
                        for j in range(UNIT):
                            s += w[j] * x[t, u * UNIT + j]
                        acc += s
                part[r, lane] = acc
                total = tree_sum(part, r, lane, lanes)
                if lane == 0 and row < out.shape[1]:
                    out[t, row] = total + bias[row] if has_bias else total
                cuda.syncthreads()  # part is reused by the next rows

    @cuda.jit
    def lookup(raw, table, ids, scale, out):
        """out[t] = w[ids[t]] * scale, the row decoded; block (lanes,), grid-stride over tokens."""
        w = cuda.local.array(UNIT, float32)
        for t in range(cuda.blockIdx.x, out.shape[0], cuda.gridDim.x):
            for u in range(cuda.threadIdx.x, out.shape[1] // UNIT, cuda.blockDim.x):
                unit(raw, ids[t], u, table, w)
                for j in range(UNIT):
                    out[t, u * UNIT + j] = w[j] * scale

    return linear, lookup


QUANT_KERNELS = {"Q8_0": unit_kernels(unit_q8_0), "Q4_0": unit_kernels(unit_q4_0), "Q4_1": unit_kernels(unit_q4_1),
                 "Q5_0": unit_kernels(unit_q5_0), "Q5_1": unit_kernels(unit_q5_1),
                 "Q4_K": unit_kernels(unit_q4_k), "Q5_K": unit_kernels(unit_q5_k), "Q6_K": unit_kernels(unit_q6_k)}


# -- float weights: F32 as is, F16 / BF16 as uint16 bits through their table ------------------------------

@cuda.jit
def linear_f32(wt, x, bias, has_bias, out):
    """As unit_kernels' linear, element by element: lane l sums columns l, l+lanes, …"""
    lane, r, lanes = cuda.threadIdx.x, cuda.threadIdx.y, cuda.blockDim.x
    part = cuda.shared.array((ROWS, MAX_LANES), float32)
    for t in range(cuda.blockIdx.y, out.shape[0], cuda.gridDim.y):
        for first in range(cuda.blockIdx.x * ROWS, out.shape[1], cuda.gridDim.x * ROWS):
            row = first + r
            acc = float32(0.0)
            if row < out.shape[1]:
                for k in range(lane, x.shape[1], lanes):
                    acc += wt[row, k] * x[t, k]
            part[r, lane] = acc
            total = tree_sum(part, r, lane, lanes)
            if lane == 0 and row < out.shape[1]:
                out[t, row] = total + bias[row] if has_bias else total
            cuda.syncthreads()


@cuda.jit
def linear_bits(bits, table, x, bias, has_bias, out):
    lane, r, lanes = cuda.threadIdx.x, cuda.threadIdx.y, cuda.blockDim.x
    part = cuda.shared.array((ROWS, MAX_LANES), float32)
    for t in range(cuda.blockIdx.y, out.shape[0], cuda.gridDim.y):
        for first in range(cuda.blockIdx.x * ROWS, out.shape[1], cuda.gridDim.x * ROWS):
            row = first + r
            acc = float32(0.0)
            if row < out.shape[1]:
                for k in range(lane, x.shape[1], lanes):
                    acc += table[bits[row, k]] * x[t, k]
            part[r, lane] = acc
            total = tree_sum(part, r, lane, lanes)
            if lane == 0 and row < out.shape[1]:
                out[t, row] = total + bias[row] if has_bias else total
            cuda.syncthreads()


@cuda.jit
def lookup_f32(wt, ids, scale, out):
    for t in range(cuda.blockIdx.x, out.shape[0], cuda.gridDim.x):
        for k in range(cuda.threadIdx.x, out.shape[1], cuda.blockDim.x):
            out[t, k] = wt[ids[t], k] * scale


@cuda.jit
def lookup_bits(bits, table, ids, scale, out):
    for t in range(cuda.blockIdx.x, out.shape[0], cuda.gridDim.x):
        for k in range(cuda.threadIdx.x, out.shape[1], cuda.blockDim.x):
            out[t, k] = table[bits[ids[t], k]] * scale


# -- norms, rotations, attention -------------------------------------------------------------------------

@cuda.jit
def rmsnorm(x, w, eps, out):
    """out[i] = x[i] / sqrt(mean(x[i]^2) + eps) * w, a row per block of `lanes` threads (grid-stride)."""
    lane, lanes = cuda.threadIdx.x, cuda.blockDim.x
    n = x.shape[1]
    part = cuda.shared.array((1, MAX_LANES), float32)
    for i in range(cuda.blockIdx.x, x.shape[0], cuda.gridDim.x):
        acc = float32(0.0)
        for k in range(lane, n, lanes):
            acc += x[i, k] * x[i, k]
        part[0, lane] = acc
        var = tree_sum(part, 0, lane, lanes) / float32(n)
        denom = math.sqrt(var + eps)
        for k in range(lane, n, lanes):
            out[i, k] = (x[i, k] / denom) * w[k]
        cuda.syncthreads()


@cuda.jit
def layernorm(x, w, b, has_b, eps, out):
    """out[i] = (x[i] - mean) / sqrt(var + eps) * w (+ b), a row per block (the strided sum and tree of rmsnorm,
    once for the mean and once for the centred squares). w, b hold n values, or g * n for rows that are g heads
    of n (row i takes gain row i % g)."""
    lane, lanes = cuda.threadIdx.x, cuda.blockDim.x
    n = x.shape[1]
    groups = w.shape[0] // n
    part = cuda.shared.array((1, MAX_LANES), float32)
    for i in range(cuda.blockIdx.x, x.shape[0], cuda.gridDim.x):
        g = (i % groups) * n
        acc = float32(0.0)
        for k in range(lane, n, lanes):
            acc += x[i, k]
        part[0, lane] = acc
        mean = tree_sum(part, 0, lane, lanes) / float32(n)
        cuda.syncthreads()  # every thread has read the mean out of part[0, 0]
        acc = float32(0.0)
        for k in range(lane, n, lanes):
            c = x[i, k] - mean
            acc += c * c
        part[0, lane] = acc
        denom = math.sqrt(tree_sum(part, 0, lane, lanes) / float32(n) + eps)
        for k in range(lane, n, lanes):
            y = ((x[i, k] - mean) / denom) * w[g + k]
            out[i, k] = y + b[g + k] if has_b else y
        cuda.syncthreads()


@cuda.jit
def rope(x, positions, cos, sin, out):
    """HF's rotate_half RoPE of x (T, H, D) over its leading R dims, R = cos.shape[1] (R < D: partial rotary,
    the rest of each head passes unchanged): out = x cos + rotate_half(x) sin; grid-stride over (T, H)."""
    dim = x.shape[2]
    rot = cos.shape[1]
    half = rot // 2
    for t in range(cuda.blockIdx.x, x.shape[0], cuda.gridDim.x):
        p = positions[t]
        for h in range(cuda.blockIdx.y, x.shape[1], cuda.gridDim.y):
            for d in range(cuda.threadIdx.x, dim, cuda.blockDim.x):
                if d < rot:
                    r = -x[t, h, d + half] if d < half else x[t, h, d - half]
                    out[t, h, d] = x[t, h, d] * cos[p, d] + r * sin[p, d]
                else:
                    out[t, h, d] = x[t, h, d]


@cuda.jit
def store_kv(k_pre, k, v, row0, n, pk_pre, pk, pv, table, layer, start):
    """One segment's new rows into its cache's pages: slot start + i (page table[slot // PAGE], row slot % PAGE)
    of layer `layer` takes k_pre, k and v[row0 + i] for i < n. Pages are (pages, L, Hkv, PAGE, D)."""
    for i in range(cuda.blockIdx.x, n, cuda.gridDim.x):
        slot = start + i
        page, at = table[slot // PAGE], slot % PAGE
        for h in range(cuda.blockIdx.y, k.shape[1], cuda.gridDim.y):
            for d in range(cuda.threadIdx.x, k.shape[2], cuda.blockDim.x):
                pk_pre[page, layer, h, at, d] = k_pre[row0 + i, h, d]
                pk[page, layer, h, at, d] = k[row0 + i, h, d]
                pv[page, layer, h, at, d] = v[row0 + i, h, d]


@cuda.jit
def pages_to_rows(pages, table, start, rows):
    """rows[l, h, i] = slot start + i of layer l, kv head h, read through the page table: (L, Hkv, n, D)."""
    for i in range(cuda.blockIdx.x, rows.shape[2], cuda.gridDim.x):
        slot = start + i
        page, at = table[slot // PAGE], slot % PAGE
        for lh in range(cuda.blockIdx.y, rows.shape[0] * rows.shape[1], cuda.gridDim.y):
            layer, h = lh // rows.shape[1], lh % rows.shape[1]
            for d in range(cuda.threadIdx.x, rows.shape[3], cuda.blockDim.x):
                rows[layer, h, i, d] = pages[page, layer, h, at, d]


@cuda.jit
def rows_to_pages(rows, table, start, pages):
    """The inverse of pages_to_rows: (L, Hkv, n, D) rows into slots start…start+n-1 of the pages."""
    for i in range(cuda.blockIdx.x, rows.shape[2], cuda.gridDim.x):
        slot = start + i
        page, at = table[slot // PAGE], slot % PAGE
        for lh in range(cuda.blockIdx.y, rows.shape[0] * rows.shape[1], cuda.gridDim.y):
            layer, h = lh // rows.shape[1], lh % rows.shape[1]
            for d in range(cuda.threadIdx.x, rows.shape[3], cuda.blockDim.x):
                pages[page, layer, h, at, d] = rows[layer, h, i, d]


@cuda.jit
def layer_rows(pages, table, layer, start, out):
    """out[i, h] = slot start + i of layer `layer`, kv head h: (n, Hkv, D), the layout rope takes."""
    for i in range(cuda.blockIdx.x, out.shape[0], cuda.gridDim.x):
        slot = start + i
        page, at = table[slot // PAGE], slot % PAGE
        for h in range(cuda.blockIdx.y, out.shape[1], cuda.gridDim.y):
            for d in range(cuda.threadIdx.x, out.shape[2], cuda.blockDim.x):
                out[i, h, d] = pages[page, layer, h, at, d]


@cuda.jit
def rows_to_layer(x, table, layer, start, pages):
    """The inverse of layer_rows: (n, Hkv, D) rows into slots start…start+n-1 of layer `layer`."""
    for i in range(cuda.blockIdx.x, x.shape[0], cuda.gridDim.x):
        slot = start + i
        page, at = table[slot // PAGE], slot % PAGE
        for h in range(cuda.blockIdx.y, x.shape[1], cuda.gridDim.y):
            for d in range(cuda.threadIdx.x, x.shape[2], cuda.blockDim.x):
                pages[page, layer, h, at, d] = x[i, h, d]


@cuda.jit
def attention(q, row0, n, pk, pv, table, layer, start, window, scale, softcap, slopes, sinks, scores, out):
    """Causal (optionally windowed, soft-capped) attention of one segment's n new rows over its cache's pages
    (pk, pv (pages, L, Hkv, PAGE, D); slot j is row j % PAGE of page table[j // PAGE]).
    slopes (H,): ALiBi, head h's score of key j + slopes[h] * (j - pos) after the scale; empty: none.
    sinks (H,): gpt-oss, head h's softmax takes one more logit sinks[h] that has no value; empty: none.

    Work item (i, h), grid-stride over (n, H): query row row0 + i (position start + i), head h, over keys
    lo…pos of kv head h // group. `scores` (n, H, S) is scratch. The order of every sum depends on pos and
    the block's thread count only."""
    tid, nt = cuda.threadIdx.x, cuda.blockDim.x
    kv_group = q.shape[1] // pk.shape[2]
    dim = q.shape[2]
    part = cuda.shared.array((1, MAX_LANES), float32)
    for i in range(cuda.blockIdx.x, n, cuda.gridDim.x):
        t, pos = row0 + i, start + i
        lo = 0
        if window > 0 and pos - window + 1 > 0:
            lo = pos - window + 1
        for h in range(cuda.blockIdx.y, q.shape[1], cuda.gridDim.y):
            kh = h // kv_group
            m = NEG_INF
            for j in range(lo + tid, pos + 1, nt):
                s = float32(0.0)
                for d in range(dim):
                    s += q[t, h, d] * pk[table[j // PAGE], layer, kh, j % PAGE, d]
                s = s * scale
                if softcap > 0:
                    s = math.tanh(s / softcap) * softcap
                if slopes.shape[0] > 0:
                    s += slopes[h] * float32(j - pos)
                scores[i, h, j] = s
                if s > m:
                    m = s
            part[0, tid] = m
            mx = tree_max(part, 0, tid, nt)
            if sinks.shape[0] > 0 and sinks[h] > mx:
                mx = sinks[h]
            acc = float32(0.0)
            for j in range(lo + tid, pos + 1, nt):
                e = math.exp(scores[i, h, j] - mx)
                scores[i, h, j] = e
                acc += e
            cuda.syncthreads()  # every thread has read mx out of part[0, 0]
            part[0, tid] = acc
            total = tree_sum(part, 0, tid, nt)  # its barriers also publish every thread's scores
            if sinks.shape[0] > 0:
                total += math.exp(sinks[h] - mx)
            for d in range(tid, dim, nt):
                o = float32(0.0)
                for j in range(lo, pos + 1):
                    o += (scores[i, h, j] / total) * pv[table[j // PAGE], layer, kh, j % PAGE, d]
                out[t, h, d] = o
            cuda.syncthreads()  # part is reused by the next item


# -- elementwise, over flat arrays; grid-stride ---------------------------------------------------------

@cuda.jit
def gated_silu(gate, up, out):
    for k in range(cuda.grid(1), out.shape[0], cuda.gridsize(1)):
        g = gate[k]
        out[k] = (g / (float32(1.0) + math.exp(-g))) * up[k]


@cuda.jit
def gated_gelu_tanh(gate, up, out):
    c = float32(math.sqrt(2.0 / math.pi))
    for k in range(cuda.grid(1), out.shape[0], cuda.gridsize(1)):
        g = gate[k]
        inner = c * (g + float32(0.044715) * (g * g * g))
        out[k] = (float32(0.5) * g * (float32(1.0) + math.tanh(inner))) * up[k]


@cuda.jit
def gelu_erf(x, out):
    """torch's exact GELU: 0.5 x (1 + erf(x / sqrt 2))."""
    r = float32(math.sqrt(2.0))
    for k in range(cuda.grid(1), out.shape[0], cuda.gridsize(1)):
        v = x[k]
        out[k] = float32(0.5) * v * (float32(1.0) + math.erf(v / r))


@cuda.jit
def gelu_tanh(x, out):
    c = float32(math.sqrt(2.0 / math.pi))
    for k in range(cuda.grid(1), out.shape[0], cuda.gridsize(1)):
        v = x[k]
        out[k] = float32(0.5) * v * (float32(1.0) + math.tanh(c * (v + float32(0.044715) * (v * v * v))))


@cuda.jit
def swiglu_oai(gate, up, alpha, limit, out):
    """gpt-oss's experts: g = min(gate, limit), u = clip(up, -limit, limit), (u + 1) * g * sigmoid(alpha g)."""
    for k in range(cuda.grid(1), out.shape[0], cuda.gridsize(1)):
        g = min(gate[k], limit)
        u = min(max(up[k], -limit), limit)
        out[k] = (u + float32(1.0)) * (g / (float32(1.0) + math.exp(-alpha * g)))


@cuda.jit
def scale(x, s, out):
    for k in range(cuda.grid(1), out.shape[0], cuda.gridsize(1)):
        out[k] = x[k] * s


@cuda.jit
def clamp(x, c, out):
    for k in range(cuda.grid(1), out.shape[0], cuda.gridsize(1)):
        out[k] = min(max(x[k], -c), c)


@cuda.jit
def add_into(x, y, out):
    for k in range(cuda.grid(1), out.shape[0], cuda.gridsize(1)):
        out[k] = x[k] + y[k]


@cuda.jit
def softcap(x, cap, out):
    for k in range(cuda.grid(1), out.shape[0], cuda.gridsize(1)):
        out[k] = math.tanh(x[k] / cap) * cap


@cuda.jit
def take_rows(x, rows, out):
    for i in range(cuda.blockIdx.x, out.shape[0], cuda.gridDim.x):
        for k in range(cuda.threadIdx.x, out.shape[1], cuda.blockDim.x):
            out[i, k] = x[rows[i], k]
