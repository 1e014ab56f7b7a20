"""Q4_G: fak's own block for 4-bit weights quantized in groups along the input (GPTQ, AWQ), made at load.

Not a ggml type (no GGUF file holds it; its id is -1): formats/gptq.py and formats/awq.py repack a
checkpoint's (qweight, qzeros, scales) into it once, so the engine sees one more block type whose kernels
already exist (engine-cpu's 4-bit "nib" matrices). A group of 32/64/128 inputs is 1/2/4 blocks holding the
same scale and zero:

    # Q4_G: 32 elements per 24-byte block (scale: f32, offset: f32, qs: 16)
    #   qs[j] low nibble: element j, high nibble: element j + 16 (ggml's Q4_1 order); x = scale * q + offset
    #   with offset = -scale * zero: scale·q + offset equals the format's scale·(q − zero) exactly, since
    #   scale (an f16 in the file) times an integer below 32 is exact in f32, and so is their difference.

The scale and offset are float32 because -scale·zero is not an f16 in general (Q4_1's f16 `m` would round it).
"""

from __future__ import annotations

import numpy as np

BLOCK = 32
TYPE_SIZE = 24


def dequantize_q4_g(blocks: np.ndarray) -> np.ndarray:
    """(n, 24) uint8 -> (n, 32) float32."""
    scale = blocks[:, 0:4].copy().view("<f4")  # (n, 1)
    offset = blocks[:, 4:8].copy().view("<f4")
    return scale * unpack_q4_g(blocks).astype(np.float32) + offset


def unpack_q4_g(blocks: np.ndarray) -> np.ndarray:
    """(n, 24) uint8 -> the (n, 32) 4-bit values, uint8."""
    qs = blocks[:, 8:24]
    return np.concatenate([qs & np.uint8(0x0F), qs >> np.uint8(4)], axis=1)


def pack_q4_g(q: np.ndarray, scale: np.ndarray, offset: np.ndarray) -> np.ndarray:
    """q (n, 32) values 0..15, scale and offset (n,) float32 -> (n, 24) uint8 blocks."""
    q = q.astype(np.uint8)
    out = np.empty((q.shape[0], TYPE_SIZE), np.uint8)
    out[:, 0:4] = np.ascontiguousarray(scale, dtype="<f4").reshape(-1, 1).view(np.uint8)
    out[:, 4:8] = np.ascontiguousarray(offset, dtype="<f4").reshape(-1, 1).view(np.uint8)
    out[:, 8:24] = q[:, :16] | (q[:, 16:] << np.uint8(4))
    return out


def block_groups(g_idx: np.ndarray) -> tuple[np.ndarray | None, np.ndarray] | None:
    """The column order that makes every 32-column block one group, and each block's group.

    g_idx (in,) is the group of each input column. Returns (columns, groups): columns None when the file's
    order already works (i // group_size), else the stable sort of g_idx (GPTQ act-order), under which
    column k of the stored matrix is input columns[k]; groups (in / 32,) the group of each block. None when
    no order makes whole blocks of one group (a group whose size is not a multiple of 32)."""
    g = np.asarray(g_idx, np.int64)
    columns = None
    if g.size > 1 and np.any(g[1:] < g[:-1]):
        columns = np.argsort(g, kind="stable")
        g = g[columns]
    if g.size % BLOCK:
        return None
    blocks = g.reshape(-1, BLOCK)
    if np.any(blocks != blocks[:, :1]):
        return None
    return columns, blocks[:, 0].copy()


def pack_groups(q: np.ndarray, zero: np.ndarray, scale: np.ndarray, columns: np.ndarray | None,
                groups: np.ndarray) -> np.ndarray:
    """A grouped 4-bit matrix as Q4_G bytes, (out, in / 32 * 24) uint8.

    q (out, in) values 0..15 in the file's column order; zero and scale (n_groups, out), the real zero
    (after any storage offset) and the scale as stored; columns, groups: from block_groups."""
    out_features, in_features = q.shape
    if columns is not None:
        q = q[:, columns]
    scale32 = np.asarray(scale, np.float32)[groups].T  # (out, subs): one scale per block
    offset = -(scale32 * np.asarray(zero, np.float32)[groups].T)
    blocks = pack_q4_g(q.reshape(-1, BLOCK), scale32.reshape(-1), offset.reshape(-1))
    return blocks.reshape(out_features, in_features // BLOCK * TYPE_SIZE)
