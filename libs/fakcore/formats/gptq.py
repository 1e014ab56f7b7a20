"""GPTQ 4-bit linears as AutoGPTQ / GPTQModel save them ("gptq" checkpoint format, v1; "gptq_v2"), read from
safetensors and repacked into fak's Q4_G blocks (formats/quants/grouped.py) without decoding to floats.

Layout of one linear `<layer>` with in_features I, out_features O, groups of G inputs (n = ceil(I / G);
G = I for group_size -1):

    # <layer>.qweight  int32 (I/8, O)  8 4-bit values per int32, packed along the input: value k of
    #                                   qweight[r, o] (bits 4k..4k+3) is q[8r + k, o]
    # <layer>.qzeros   int32 (n, O/8)  packed along the output: nibble k of qzeros[g, c] is the stored zero of
    #                                   group g, output 8c + k. v1 stores zero − 1 (AutoGPTQ's pack subtracts 1,
    #                                   its kernels add it back: the real zero is stored + 1; symmetric
    #                                   quantization's zero 8 is the familiar 0x77777777); v2 stores the zero
    # <layer>.scales   fp16  (n, O)    the scale of group g, output o
    # <layer>.g_idx    int32 (I,)      the group of each input column: i // G, or (desc_act / act-order)
    #                                   a permutation of that; absent in some files, then i // G
    #
    #   w[o, i] = scales[g_idx[i], o] · (q[i, o] − zero[g_idx[i], o])     (the weight as (O, I), fak's order)

Computed exactly in float32 here (scale · small integer is exact); the fp16 kernels of AutoGPTQ round the
product to fp16. Act-order files are run by storing the columns sorted by group (Tensor.columns) so that every
32-column block has one group; engine-cpu gathers the activations in that order (cheap: one copy of x per
matmul; exact: the same products, summed in another order).
"""

from __future__ import annotations

import numpy as np

from .quants import grouped
from .tensor import Tensor

PACK = 8  # 4-bit values per int32
ZERO_OFFSET = {"gptq": 1, "gptq_v2": 0}  # what the checkpoint format subtracted from each zero


def unpack_input(qweight: np.ndarray) -> np.ndarray:
    """qweight (I/8, O) int32 -> q (I, O) uint8: nibble k of row r is input row 8r + k."""
    packed = qweight.view(np.uint32)
    q = np.empty((packed.shape[0], PACK, packed.shape[1]), np.uint8)
    for k in range(PACK):
        q[:, k] = (packed >> np.uint32(4 * k)) & np.uint32(0xF)
    return q.reshape(-1, packed.shape[1])


def unpack_output(qzeros: np.ndarray) -> np.ndarray:
    """qzeros (n, O/8) int32 -> (n, O) uint8: nibble k of column c is output 8c + k."""
    packed = qzeros.view(np.uint32)
    z = np.empty((packed.shape[0], packed.shape[1], PACK), np.uint8)
    for k in range(PACK):
        z[:, :, k] = (packed >> np.uint32(4 * k)) & np.uint32(0xF)
    return z.reshape(packed.shape[0], -1)


def pack_nibbles(values: np.ndarray, axis: int) -> np.ndarray:
    """(…) values 0..15 -> int32 with 8 consecutive values along `axis` per int32, value k at bits 4k."""
    v = np.moveaxis(np.asarray(values, np.uint32), axis, -1)
    v = v.reshape(*v.shape[:-1], -1, PACK)
    packed = np.zeros(v.shape[:-1], np.uint32)
    for k in range(PACK):
        packed |= v[..., k] << np.uint32(4 * k)
    return np.ascontiguousarray(np.moveaxis(packed, -1, axis)).view(np.int32)


def trivial_g_idx(in_features: int, group_size: int) -> np.ndarray:
    return (np.arange(in_features) // (in_features if group_size == -1 else group_size)).astype(np.int32)


def dequantize(qweight: np.ndarray, qzeros: np.ndarray, scales: np.ndarray, g_idx: np.ndarray,
               zero_offset: int = 1) -> np.ndarray:
    """The numpy reference: the (O, I) float32 weight. zero_offset: 1 for v1 files, 0 for v2."""
    q = unpack_input(qweight).astype(np.float32)  # (I, O)
    zeros = unpack_output(qzeros).astype(np.float32) + np.float32(zero_offset)  # (n, O)
    g = np.asarray(g_idx, np.intp)
    return np.ascontiguousarray((np.asarray(scales, np.float32)[g] * (q - zeros[g])).T)


def to_q4g(name: str, qweight: np.ndarray, qzeros: np.ndarray, scales: np.ndarray, g_idx: np.ndarray,
           zero_offset: int, source: str) -> Tensor | None:
    """One linear as a Q4_G tensor (O, I), its columns in group order; None when g_idx's groups do not fill
    whole 32-column blocks in any order."""
    order = grouped.block_groups(g_idx)
    if order is None:
        return None
    columns, groups = order
    q = unpack_input(qweight).T  # (O, I)
    zeros = unpack_output(qzeros).astype(np.int32) + zero_offset
    raw = grouped.pack_groups(q, zeros, scales, columns, groups)
    return Tensor(name, "Q4_G", q.shape, raw.reshape(-1), source, columns)


# -- the packer (tests, tools) ---------------------------------------------------------------------------


def quantize(w: np.ndarray, group_size: int, sym: bool, act_order: np.ndarray | None = None,
             zero_offset: int = 1) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Round-to-nearest GPTQ quantization of an (O, I) matrix (GPTQ's Quantizer without the Hessian updates):
    per group and output, xmin = min(x, 0), xmax = max(x, 0); symmetric: ±max(|xmin|, xmax), zero 8; else
    zero = round(−xmin / scale); scale = (xmax − xmin) / 15 rounded to fp16 as stored; q = clamp(round(x /
    scale) + zero, 0, 15). act_order: a permutation of the inputs (GPTQ's argsort of the Hessian diagonal):
    group i // G takes inputs act_order[i], as desc_act does. v1 cannot store a zero of 0 (its zero − 1), so
    asymmetric zeros are at least 1 there.

    Returns the file's tensors {qweight, qzeros, scales, g_idx} and the dequantized (O, I) float32 weight."""
    w = np.asarray(w, np.float32)
    out_features, in_features = w.shape
    g_idx = trivial_g_idx(in_features, group_size)
    if act_order is not None:
        g_idx = np.empty(in_features, np.int32)
        g_idx[np.asarray(act_order)] = trivial_g_idx(in_features, group_size)
    n_groups = int(g_idx.max()) + 1
    scales = np.empty((n_groups, out_features), np.float16)
    zeros = np.empty((n_groups, out_features), np.int32)
    q = np.empty((out_features, in_features), np.int32)
    for g in range(n_groups):
        cols = np.flatnonzero(g_idx == g)
        x = w[:, cols]
        xmin, xmax = np.minimum(x.min(axis=1), 0), np.maximum(x.max(axis=1), 0)
        if sym:
            xmax = np.maximum(-xmin, xmax)
            xmin = np.where(xmin < 0, -xmax, xmin)
        flat = (xmin == 0) & (xmax == 0)
        xmin, xmax = np.where(flat, -1, xmin), np.where(flat, 1, xmax)
        scale = ((xmax - xmin) / 15).astype(np.float16)
        s = scale.astype(np.float32)
        zero = np.full(out_features, 8) if sym else np.clip(np.round(-xmin / s), zero_offset, 15).astype(np.int32)
        scales[g], zeros[g] = scale, zero
        q[:, cols] = np.clip(np.round(x / s[:, None]) + zero[:, None], 0, 15)
    tensors = {"qweight": pack_nibbles(q.T, axis=0), "qzeros": pack_nibbles(zeros - zero_offset, axis=1),
               "scales": scales, "g_idx": g_idx}
    deq = scales.astype(np.float32)[g_idx].T * (q - zeros[g_idx].T).astype(np.float32)
    return tensors, deq
