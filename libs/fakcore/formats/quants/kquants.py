"""llama.cpp's k-quants: 256-element super-blocks split into 16- or 32-element sub-blocks, whose scales
are themselves quantized against one or two f16 super-block scales.

Plain numpy references, bit for bit equal to ggml's `dequantize_row_q*_K` (and to the `gguf` package):
every float operation happens in the same order as there, e.g. `(d * sc) * q - (dmin * m)`.

Shared element order: the low bits of the quants are packed so that one byte holds elements that are
32 (or 64) apart. A 2-bit field is read as "for each 128-element half, for each shift 0, 2, 4, 6: 32
elements from the half's 32 bytes"; a 4-bit field as "for each 64-element chunk: low nibbles of 32 bytes,
then high nibbles". High bits spread over a 32-byte bitmask: element e uses bit e // 32 of byte e % 32.

Dequantizers map a (n_blocks, type_size) uint8 array to (n_blocks, 256) float32.
"""

import numpy as np

QK_K = 256  # elements per super-block

SHIFTS_2BIT = np.array([0, 2, 4, 6], dtype=np.uint8).reshape(1, 1, 4, 1)
SHIFTS_NIBBLE = np.array([0, 4], dtype=np.uint8).reshape(1, 1, 2, 1)
SHIFTS_BIT = np.arange(8, dtype=np.uint8).reshape(1, 8, 1)


def f16_field(blocks: np.ndarray, start: int) -> np.ndarray:
    """The f16 at byte `start` of every block, as a (n_blocks, 1, 1) float32 for broadcasting."""
    return blocks[:, start : start + 2].view("<f2").astype(np.float32).reshape(-1, 1, 1)


def unpack_2bit(qs: np.ndarray) -> np.ndarray:
    """(n, 64) bytes -> (n, 256) values 0..3 in element order (two halves of 32 bytes x 4 shifts)."""
    n = qs.shape[0]
    return ((qs.reshape(n, 2, 1, 32) >> SHIFTS_2BIT) & np.uint8(3)).reshape(n, QK_K)


def unpack_high_bits(mask: np.ndarray) -> np.ndarray:
    """(n, 32) bitmask bytes -> (n, 256) values 0..1: element e is bit e // 32 of byte e % 32."""
    n = mask.shape[0]
    return ((mask.reshape(n, 1, 32) >> SHIFTS_BIT) & np.uint8(1)).reshape(n, QK_K)


def unpack_4bit(qs: np.ndarray, chunk_bytes: int) -> np.ndarray:
    """(n, 128) bytes -> (n, 256) nibbles: each run of `chunk_bytes` bytes gives its low nibbles, then its
    high nibbles (32 for Q4_K/Q5_K, 64 for Q6_K)."""
    n = qs.shape[0]
    return ((qs.reshape(n, -1, 1, chunk_bytes) >> SHIFTS_NIBBLE) & np.uint8(0x0F)).reshape(n, QK_K)


def scale_min_k4(packed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """get_scale_min_k4 for all 8 sub-blocks: 12 bytes -> eight 6-bit scales and eight 6-bit mins.

        byte 0..3:  scale j (6 low bits),  top 2 bits of scale j+4
        byte 4..7:  min j   (6 low bits),  top 2 bits of min j+4
        byte 8..11: low nibble: scale j+4 (low 4 bits), high nibble: min j+4 (low 4 bits)
    """
    scale_lo, min_lo, mixed = packed[:, 0:4], packed[:, 4:8], packed[:, 8:12]
    scales = np.concatenate([scale_lo & 0x3F, (mixed & 0x0F) | ((scale_lo >> 2) & 0x30)], axis=1)
    mins = np.concatenate([min_lo & 0x3F, (mixed >> 4) | ((min_lo >> 2) & 0x30)], axis=1)
    return scales, mins


def sub_block_scales(blocks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Q4_K/Q5_K header (d:2, dmin:2, scales:12) -> per-sub-block (d * sc, dmin * m), each (n, 8, 1)."""
    n = blocks.shape[0]
    d, dmin = f16_field(blocks, 0), f16_field(blocks, 2)
    sc, m = scale_min_k4(blocks[:, 4:16])
    return d * sc.reshape(n, 8, 1).astype(np.float32), dmin * m.reshape(n, 8, 1).astype(np.float32)


# Q2_K: 256 elements per 84-byte block (scales:16, qs:64, d:2, dmin:2)
#   16 sub-blocks of 16; scales[i] = (min:4 << 4) | scale:4; x = (d * scale) * q - (dmin * min), q in 0..3
def dequantize_q2_k(blocks: np.ndarray) -> np.ndarray:
    n = blocks.shape[0]
    packed_scales = blocks[:, 0:16]
    d, dmin = f16_field(blocks, 80), f16_field(blocks, 82)
    dl = d * (packed_scales & 0x0F).reshape(n, 16, 1).astype(np.float32)
    ml = dmin * (packed_scales >> 4).reshape(n, 16, 1).astype(np.float32)
    q = unpack_2bit(blocks[:, 16:80]).reshape(n, 16, 16).astype(np.float32)
    return (dl * q - ml).reshape(n, QK_K)


# Q3_K: 256 elements per 110-byte block (hmask:32, qs:64, scales:12, d:2)
#   16 sub-blocks of 16 with 6-bit signed scales (stored +32); q = low 2 bits - (4 unless hmask bit set),
#   x = (d * (scale - 32)) * q. Scale k: low 4 bits in nibble k // 8 of byte k % 8,
#   high 2 bits at bit 2 * (k // 4) of byte 8 + k % 4.
def dequantize_q3_k(blocks: np.ndarray) -> np.ndarray:
    n = blocks.shape[0]
    hmask, qs, packed = blocks[:, 0:32], blocks[:, 32:96], blocks[:, 96:108]
    d = f16_field(blocks, 108)
    low = (packed[:, 0:8].reshape(n, 1, 8) >> SHIFTS_NIBBLE.reshape(1, 2, 1)) & np.uint8(0x0F)
    high = (packed[:, 8:12].reshape(n, 1, 4) >> SHIFTS_2BIT.reshape(1, 4, 1)) & np.uint8(0x03)
    scales = (low.reshape(n, 16) | (high.reshape(n, 16) << np.uint8(4))).view(np.int8) - np.int8(32)
    dl = d * scales.reshape(n, 16, 1).astype(np.float32)
    offset = (unpack_high_bits(hmask) ^ np.uint8(1)) << np.uint8(2)  # 4 where the high bit is clear
    q = (unpack_2bit(qs).view(np.int8) - offset.view(np.int8)).reshape(n, 16, 16).astype(np.float32)
    return (dl * q).reshape(n, QK_K)


# Q4_K: 256 elements per 144-byte block (d:2, dmin:2, scales:12, qs:128)
#   8 sub-blocks of 32 with 6-bit scales and mins (see scale_min_k4); x = (d * sc) * q - (dmin * m), q in 0..15
def dequantize_q4_k(blocks: np.ndarray) -> np.ndarray:
    n = blocks.shape[0]
    dl, ml = sub_block_scales(blocks)
    q = unpack_4bit(blocks[:, 16:144], chunk_bytes=32).reshape(n, 8, 32).astype(np.float32)
    return (dl * q - ml).reshape(n, QK_K)


# Q5_K: 256 elements per 176-byte block (d:2, dmin:2, scales:12, qh:32, qs:128)
#   as Q4_K, plus a fifth bit per element from the qh bitmask; q in 0..31
def dequantize_q5_k(blocks: np.ndarray) -> np.ndarray:
    n = blocks.shape[0]
    dl, ml = sub_block_scales(blocks)
    q = unpack_4bit(blocks[:, 48:176], chunk_bytes=32) | (unpack_high_bits(blocks[:, 16:48]) << np.uint8(4))
    return (dl * q.reshape(n, 8, 32).astype(np.float32) - ml).reshape(n, QK_K)


# Q6_K: 256 elements per 210-byte block (ql:128, qh:64, scales:16 int8, d:2)
#   16 sub-blocks of 16 with int8 scales; q = (low 4 bits | high 2 bits << 4) - 32, x = (d * scale) * q.
#   Low nibbles run in 64-byte chunks; high 2-bit pairs run like a Q2_K field.
def dequantize_q6_k(blocks: np.ndarray) -> np.ndarray:
    n = blocks.shape[0]
    d = f16_field(blocks, 208)
    dl = d * blocks[:, 192:208].view(np.int8).reshape(n, 16, 1).astype(np.float32)
    q = unpack_4bit(blocks[:, 0:128], chunk_bytes=64) | (unpack_2bit(blocks[:, 128:192]) << np.uint8(4))
    q = (q.view(np.int8) - np.int8(32)).reshape(n, 16, 16).astype(np.float32)
    return (dl * q).reshape(n, QK_K)
