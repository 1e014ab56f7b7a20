"""The ternary types (TQ1_0, TQ2_0: weights in {-1, 0, 1} times one f16 scale per 256, BitNet b1.58 and
TriLM checkpoints) and MXFP4 (the OCP microscaling 4-bit float: e2m1 values times a power-of-two scale per 32,
what gpt-oss ships its experts in).

Plain numpy references, bit for bit equal to ggml's `dequantize_row_tq1_0` / `tq2_0` / `mxfp4` (and to the
`gguf` package); the quantizers follow `quantize_row_*_ref` (and `gguf.quants.quantize`), so tests and tools
can write such files. Each type is also an integer form (`int_values`): x = scale * q with q a small
integer, over 32-element sub-blocks, which is what the kernels keep resident (unpack.py).

TQ2_0: 256 elements per 66-byte block (qs:64, d:2); element e is the 2-bit field trit + 1 laid out like the
    k-quants' 2-bit fields (two halves of 32 bytes x shifts 0, 2, 4, 6): x = (field - 1) * d.
TQ1_0: 256 elements per 54-byte block (qs:48, qh:4, d:2), five trits to a byte as a base-3 fraction of 256
    (byte = ceil(t * 256 / 243) for t = sum(trit_i * 3^(4-i))): trit i of byte b is ((b * 3^i) mod 256) * 3 >> 8.
    Elements 0-159: bytes 0-31, trit i of byte m is element 32 i + m; 160-239: bytes 32-47 (16 i + m);
    240-255: qh's four bytes, four trits each (4 i + m).
MXFP4: 32 elements per 17-byte block (e:1, qs:16); element j is the nibble j (low) or j - 16 (high) of qs,
    an index into the doubled e2m1 values KVALUES; x = KVALUES[nibble] * 2^(e - 128) (half the e8m0 scale,
    since the values are doubled).
"""

from __future__ import annotations

import numpy as np

from .kquants import QK_K, SHIFTS_2BIT, unpack_2bit

MXFP4_BLOCK = 32
KVALUES = np.array([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12], dtype=np.int8)  # e2m1, doubled
_POW3 = np.array([1, 3, 9, 27, 81], dtype=np.uint8)


def _f16(blocks: np.ndarray, start: int) -> np.ndarray:
    return blocks[:, start:start + 2].view("<f2").astype(np.float32)  # (n, 1)


def _trits(packed: np.ndarray, count: int) -> np.ndarray:
    """(n, b) bytes of `count` trits each -> (n, count * b) values 0..2, trit i of byte m at i * b + m."""
    n, b = packed.shape
    shifted = packed[:, None, :] * _POW3[:count].reshape(1, count, 1)  # uint8: wraps mod 256, as in ggml
    return ((shifted.astype(np.uint16) * 3) >> 8).astype(np.uint8).reshape(n, count * b)


def ternary_tq1_0(blocks: np.ndarray) -> np.ndarray:
    """(n, 54) -> (n, 256) int8 trits - 1."""
    q = np.concatenate([_trits(blocks[:, 0:32], 5), _trits(blocks[:, 32:48], 5), _trits(blocks[:, 48:52], 4)], axis=1)
    return q.view(np.int8) - np.int8(1)


def ternary_tq2_0(blocks: np.ndarray) -> np.ndarray:
    """(n, 66) -> (n, 256) int8 fields - 1."""
    return unpack_2bit(blocks[:, 0:64]).view(np.int8) - np.int8(1)


def mxfp4_values(blocks: np.ndarray) -> np.ndarray:
    """(n, 17) -> (n, 32) int8: the doubled e2m1 value of each nibble."""
    qs = blocks[:, 1:17]
    nibbles = np.concatenate([qs & np.uint8(0x0F), qs >> np.uint8(4)], axis=1)
    return KVALUES[nibbles]


def mxfp4_scale(blocks: np.ndarray) -> np.ndarray:
    """(n, 17) -> (n, 1) float32: half the e8m0 scale, 2^(e - 128) (ggml_e8m0_to_fp32_half; exact, subnormal
    for e < 2)."""
    e = blocks[:, 0:1].astype(np.uint32)
    bits = np.where(e < 2, np.uint32(0x00200000) << e, (e - np.uint32(1)) << np.uint32(23))
    return bits.astype(np.uint32).view(np.float32)


def dequantize_tq1_0(blocks: np.ndarray) -> np.ndarray:
    return _f16(blocks, 52) * ternary_tq1_0(blocks).astype(np.float32)


def dequantize_tq2_0(blocks: np.ndarray) -> np.ndarray:
    return _f16(blocks, 64) * ternary_tq2_0(blocks).astype(np.float32)


def dequantize_mxfp4(blocks: np.ndarray) -> np.ndarray:
    return mxfp4_scale(blocks) * mxfp4_values(blocks).astype(np.float32)


def int_values(qtype: str, blocks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(q (n, subs, 32) int8, scale (n, subs) float32) with scale * q the dequantized values exactly."""
    n = blocks.shape[0]
    if qtype == "MXFP4":
        return mxfp4_values(blocks).reshape(n, 1, MXFP4_BLOCK), mxfp4_scale(blocks)
    q = ternary_tq1_0(blocks) if qtype == "TQ1_0" else ternary_tq2_0(blocks)
    d = _f16(blocks, 52 if qtype == "TQ1_0" else 64)
    return q.reshape(n, QK_K // 32, 32), np.repeat(d, QK_K // 32, axis=1)


# -- quantizers ------------------------------------------------------------------------------------------


def _roundf(x: np.ndarray) -> np.ndarray:
    """C's roundf: halves away from zero."""
    a = np.abs(x)
    floored = np.floor(a)
    return np.sign(x) * (floored + np.floor(2 * (a - floored)))


def _ternary_fields(blocks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(n, 256) f32 -> (trit + 1 as uint8 (n, 256), d as f16 bytes (n, 2)): d = max |x|, trit = roundf(x / d)."""
    d = np.abs(blocks).max(axis=1, keepdims=True)
    with np.errstate(divide="ignore"):
        inv = np.where(d == 0, np.float32(0), np.float32(1) / d)
    q = (_roundf(blocks * inv).astype(np.int8) + np.int8(1)).astype(np.uint8)
    return q, d.astype(np.float16).view(np.uint8)


def _pack_trits(q: np.ndarray, count: int) -> np.ndarray:
    """(n, count * b) values 0..2 -> (n, b) bytes, the inverse of `_trits`."""
    n = q.shape[0]
    weights = np.array([81, 27, 9, 3, 1][:count] if count == 5 else [81, 27, 9, 3], dtype=np.uint8)
    t = (q.reshape(n, count, -1) * weights.reshape(1, count, 1)).sum(axis=1, dtype=np.uint16)
    return ((t * 256 + 242) // 243).astype(np.uint8)


def quantize_tq1_0(blocks: np.ndarray) -> np.ndarray:
    q, d = _ternary_fields(blocks)
    return np.concatenate([_pack_trits(q[:, :160], 5), _pack_trits(q[:, 160:240], 5), _pack_trits(q[:, 240:], 4), d], axis=1)


def quantize_tq2_0(blocks: np.ndarray) -> np.ndarray:
    q, d = _ternary_fields(blocks)
    fields = q.reshape(-1, 2, 4, 32) << SHIFTS_2BIT  # (n, half, shift, byte)
    packed = fields[:, :, 0] | fields[:, :, 1] | fields[:, :, 2] | fields[:, :, 3]
    return np.concatenate([packed.reshape(-1, 64), d], axis=1)


def quantize_mxfp4(blocks: np.ndarray) -> np.ndarray:
    """e = floor(log2(max |x|)) - 2 + 127 (0 for an all-zero block); each value the nearest doubled e2m1
    times the half scale, the first on ties."""
    n = blocks.shape[0]
    amax = np.abs(blocks).max(axis=1, keepdims=True)
    with np.errstate(divide="ignore"):
        e = np.where(amax > 0, np.floor(np.log2(amax)) - 2 + 127, 0).astype(np.uint8)
    scale = mxfp4_scale(e)  # e alone is a (n, 1) "block" whose first byte is e
    errs = np.abs(scale.reshape(n, 1, 1) * KVALUES.astype(np.float32).reshape(1, 1, 16) - blocks.reshape(n, MXFP4_BLOCK, 1))
    best = np.argmin(errs, axis=-1).astype(np.uint8)  # (n, 32)
    return np.concatenate([e, best[:, :16] | (best[:, 16:] << np.uint8(4))], axis=1)
