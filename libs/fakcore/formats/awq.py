"""AWQ 4-bit linears as AutoAWQ saves them (version "gemm"), read from safetensors and repacked into fak's
Q4_G blocks (formats/quants/grouped.py) without decoding to floats.

Layout of one linear `<layer>` with in_features I, out_features O, groups of G consecutive inputs (n = I / G):

    # <layer>.qweight  int32 (I, O/8)  packed along the output, interleaved: nibble k (bits 4k..4k+3) of
    #                                   qweight[i, c] is q[i, 8c + ORDER[k]], ORDER = [0, 2, 4, 6, 1, 3, 5, 7]
    # <layer>.qzeros   int32 (n, O/8)  the zeros, packed the same way (stored as they are: no offset)
    # <layer>.scales   fp16  (n, O)
    #
    #   w[o, i] = scales[i // G, o] · (q[i, o] − zero[i // G, o])          (the weight as (O, I), fak's order)

No g_idx: AWQ's groups are always consecutive inputs. Computed exactly in float32 here (AutoAWQ's kernels
round the product to fp16).
"""

from __future__ import annotations

import numpy as np

from .gptq import PACK
from .quants import grouped
from .tensor import Tensor

ORDER = (0, 2, 4, 6, 1, 3, 5, 7)  # nibble k holds output column ORDER[k] of its eight


def unpack_output(packed: np.ndarray) -> np.ndarray:
    """(R, O/8) int32 -> (R, O) uint8, undoing the interleave."""
    p = packed.view(np.uint32)
    out = np.empty((p.shape[0], p.shape[1], PACK), np.uint8)
    for k, column in enumerate(ORDER):
        out[:, :, column] = (p >> np.uint32(4 * k)) & np.uint32(0xF)
    return out.reshape(p.shape[0], -1)


def pack_output(values: np.ndarray) -> np.ndarray:
    """(R, O) values 0..15 -> (R, O/8) int32, interleaved as AutoAWQ packs (WQLinear_GEMM.from_linear)."""
    v = np.asarray(values, np.uint32).reshape(values.shape[0], -1, PACK)
    packed = np.zeros(v.shape[:2], np.uint32)
    for k, column in enumerate(ORDER):
        packed |= v[:, :, column] << np.uint32(4 * k)
    return packed.view(np.int32)


def dequantize(qweight: np.ndarray, qzeros: np.ndarray, scales: np.ndarray, group_size: int) -> np.ndarray:
    """The numpy reference: the (O, I) float32 weight."""
    q = unpack_output(qweight).astype(np.float32)  # (I, O)
    zeros = unpack_output(qzeros).astype(np.float32)  # (n, O)
    g = np.arange(q.shape[0]) // group_size
    return np.ascontiguousarray((np.asarray(scales, np.float32)[g] * (q - zeros[g])).T)


def to_q4g(name: str, qweight: np.ndarray, qzeros: np.ndarray, scales: np.ndarray, group_size: int,
           source: str) -> Tensor | None:
    """One linear as a Q4_G tensor (O, I); None when a group is not whole 32-column blocks."""
    order = grouped.block_groups(np.arange(qweight.shape[0]) // group_size)
    if order is None:
        return None
    _, groups = order
    q = unpack_output(qweight).T  # (O, I)
    raw = grouped.pack_groups(q, unpack_output(qzeros), scales, None, groups)
    return Tensor(name, "Q4_G", q.shape, raw.reshape(-1), source)


# -- the packer (tests, tools) ---------------------------------------------------------------------------


def quantize(w: np.ndarray, group_size: int) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Round-to-nearest AWQ quantization of an (O, I) matrix (AutoAWQ's pseudo_quantize_tensor with
    zero_point, without the activation-aware scale search): per group and output, scale = max(xmax − xmin,
    1e-5) / 15 rounded to fp16 as stored, zero = clamp(−round(xmin / scale), 0, 15), q = clamp(round(x / scale)
    + zero, 0, 15).

    Returns the file's tensors {qweight, qzeros, scales} and the dequantized (O, I) float32 weight."""
    w = np.asarray(w, np.float32)
    out_features, in_features = w.shape
    x = w.reshape(out_features, in_features // group_size, group_size)
    xmin, xmax = x.min(axis=2), x.max(axis=2)  # (O, n)
    scale = (np.maximum(xmax - xmin, np.float32(1e-5)) / 15).astype(np.float16)
    s = scale.astype(np.float32)
    zero = np.clip(-np.round(xmin / s), 0, 15).astype(np.int32)
    q = np.clip(np.round(x / s[..., None]) + zero[..., None], 0, 15).astype(np.int32)  # (O, n, G)
    deq = (s[..., None] * (q - zero[..., None]).astype(np.float32)).reshape(out_features, in_features)
    tensors = {"qweight": pack_output(q.reshape(out_features, in_features).T), "qzeros": pack_output(zero.T),
               "scales": np.ascontiguousarray(scale.T)}
    return tensors, deq
