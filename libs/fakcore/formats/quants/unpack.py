"""Blocks -> (integer values, per-sub-block scale, per-sub-block offset), for kernels that keep weights
quantized.

Every supported quant type decodes as  x = scale * q + offset  over sub-blocks of 16 or 32 elements, with
q a small integer. `unpack` returns exactly those three arrays, so a kernel can hold q as int8 and
dequantize (or not) on the fly; `scale * q + offset` equals the type's dequantizer (the same float
operations, in the same order). Layouts: see the comments beside each dequantizer in legacy.py and
kquants.py.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from . import grouped, kquants, legacy, lowbit


class Unpacked(NamedTuple):
    q: np.ndarray  # (n_blocks, subs, sub_size) int8
    scale: np.ndarray  # (n_blocks, subs) float32
    offset: np.ndarray  # (n_blocks, subs) float32


def _legacy(q: np.ndarray, d: np.ndarray, m: np.ndarray | None) -> Unpacked:
    n = q.shape[0]
    offset = m.reshape(n, 1) if m is not None else np.zeros((n, 1), np.float32)
    return Unpacked(q.reshape(n, 1, 32).astype(np.int8), d.reshape(n, 1).astype(np.float32), offset.astype(np.float32))


def unpack(qtype: str, blocks: np.ndarray) -> Unpacked:
    """(n_blocks, type_size) uint8 -> Unpacked. Raises KeyError for types without an integer form."""
    n = blocks.shape[0]
    f16 = legacy.f16_field
    if qtype == "Q4_0":
        return _legacy(legacy.unpack_nibbles(blocks[:, 2:18]).view(np.int8) - np.int8(8), f16(blocks, 0), None)
    if qtype == "Q4_1":
        return _legacy(legacy.unpack_nibbles(blocks[:, 4:20]), f16(blocks, 0), f16(blocks, 2))
    if qtype == "Q5_0":
        q = (legacy.unpack_nibbles(blocks[:, 6:22]) | legacy.unpack_fifth_bits(blocks[:, 2:6])).view(np.int8) - np.int8(16)
        return _legacy(q, f16(blocks, 0), None)
    if qtype == "Q5_1":
        q = legacy.unpack_nibbles(blocks[:, 8:24]) | legacy.unpack_fifth_bits(blocks[:, 4:8])
        return _legacy(q, f16(blocks, 0), f16(blocks, 2))
    if qtype == "Q8_0":
        return _legacy(blocks[:, 2:34].view(np.int8), f16(blocks, 0), None)
    if qtype in ("Q4_K", "Q5_K"):
        dl, ml = kquants.sub_block_scales(blocks)  # (n, 8, 1) each
        q = kquants.unpack_4bit(blocks[:, 16:144] if qtype == "Q4_K" else blocks[:, 48:176], chunk_bytes=32)
        if qtype == "Q5_K":
            q = q | (kquants.unpack_high_bits(blocks[:, 16:48]) << np.uint8(4))
        return Unpacked(q.reshape(n, 8, 32).astype(np.int8), dl.reshape(n, 8), (-ml).reshape(n, 8))
    if qtype == "Q6_K":
        d = kquants.f16_field(blocks, 208).reshape(n, 1)
        dl = d * blocks[:, 192:208].view(np.int8).astype(np.float32)
        q = kquants.unpack_4bit(blocks[:, 0:128], chunk_bytes=64) | (kquants.unpack_2bit(blocks[:, 128:192]) << np.uint8(4))
        q = q.view(np.int8) - np.int8(32)
        return Unpacked(q.reshape(n, 16, 16), dl, np.zeros((n, 16), np.float32))
    if qtype == "Q2_K":
        packed = blocks[:, 0:16]
        d, dmin = kquants.f16_field(blocks, 80).reshape(n, 1), kquants.f16_field(blocks, 82).reshape(n, 1)
        dl = d * (packed & 0x0F).astype(np.float32)
        ml = dmin * (packed >> 4).astype(np.float32)
        q = kquants.unpack_2bit(blocks[:, 16:80]).astype(np.int8)
        return Unpacked(q.reshape(n, 16, 16), dl, -ml)
    if qtype == "Q3_K":
        hmask, qs, packed = blocks[:, 0:32], blocks[:, 32:96], blocks[:, 96:108]
        d = kquants.f16_field(blocks, 108).reshape(n, 1)
        low = (packed[:, 0:8].reshape(n, 1, 8) >> kquants.SHIFTS_NIBBLE.reshape(1, 2, 1)) & np.uint8(0x0F)
        high = (packed[:, 8:12].reshape(n, 1, 4) >> kquants.SHIFTS_2BIT.reshape(1, 4, 1)) & np.uint8(0x03)
        scales = (low.reshape(n, 16) | (high.reshape(n, 16) << np.uint8(4))).view(np.int8) - np.int8(32)
        offset = (kquants.unpack_high_bits(hmask) ^ np.uint8(1)) << np.uint8(2)
        q = kquants.unpack_2bit(qs).view(np.int8) - offset.view(np.int8)
        return Unpacked(q.reshape(n, 16, 16), d * scales.astype(np.float32), np.zeros((n, 16), np.float32))
    if qtype == "Q4_G":
        scale, offset = blocks[:, 0:4].copy().view("<f4"), blocks[:, 4:8].copy().view("<f4")
        return Unpacked(grouped.unpack_q4_g(blocks).reshape(n, 1, 32).astype(np.int8), scale.reshape(n, 1),
                        offset.reshape(n, 1))
    if qtype in ("TQ1_0", "TQ2_0", "MXFP4"):  # no offsets; a ternary block's one scale repeated per 32
        q, scale = lowbit.int_values(qtype, blocks)
        return Unpacked(q, scale, np.zeros(scale.shape, np.float32))
    raise KeyError(f"{qtype} has no integer form")


INTEGER_TYPES = ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q4_G", "TQ1_0", "TQ2_0",
                 "MXFP4")
