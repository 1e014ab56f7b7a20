"""ggml's first quant formats: 32 elements per block, one f16 scale (and for the _1 kinds an f16 minimum).

These are the plain numpy references that faster kernels are tested against, written so that every float
operation happens in the same order as ggml's `dequantize_row_*` (and the `gguf` package), which makes the
results equal bit for bit rather than merely close.

Element j of a block is stored in byte j % 16 of `qs`: the low nibble for j < 16, the high nibble for
j >= 16. The 5-bit kinds keep the fifth bit of element j in bit j of the little-endian uint32 `qh`.

Dequantizers map a (n_blocks, type_size) uint8 array to (n_blocks, 32) float32. The quantizers for Q8_0,
Q4_0 and Q4_1 follow llama.cpp's `quantize_row_*_ref` (and so match `gguf.quants.quantize`); they exist so
that tests and tools can write quantized GGUFs.
"""

import numpy as np

BLOCK = 32  # elements per block (QK4_0 = QK4_1 = QK5_0 = QK5_1 = QK8_0)
NIBBLE_SHIFTS = np.array([0, 4], dtype=np.uint8).reshape(1, 2, 1)  # low nibble first, then high
BIT_SHIFTS = np.arange(BLOCK, dtype=np.uint32).reshape(1, BLOCK)


def f16_field(blocks: np.ndarray, start: int) -> np.ndarray:
    """The f16 stored at byte `start` of every block, as a (n_blocks, 1) float32 column."""
    return blocks[:, start : start + 2].view("<f2").astype(np.float32)


def unpack_nibbles(qs: np.ndarray) -> np.ndarray:
    """(n, 16) packed bytes -> (n, 32) uint8 in element order: low nibbles, then high nibbles."""
    return ((qs[:, None, :] >> NIBBLE_SHIFTS) & np.uint8(0x0F)).reshape(qs.shape[0], BLOCK)


def unpack_fifth_bits(qh: np.ndarray) -> np.ndarray:
    """(n, 4) bytes holding one little-endian uint32 -> (n, 32) uint8 with bit j of it moved to bit 4."""
    bits = (qh.view("<u4") >> BIT_SHIFTS) & np.uint32(1)
    return (bits << np.uint32(4)).astype(np.uint8)


# Q4_0: 32 elements per 18-byte block (d:2, qs:16); x = (q - 8) * d, q in 0..15.
def dequantize_q4_0(blocks: np.ndarray) -> np.ndarray:
    d = f16_field(blocks, 0)
    q = unpack_nibbles(blocks[:, 2:18]).view(np.int8) - np.int8(8)
    return d * q.astype(np.float32)


# Q4_1: 32 elements per 20-byte block (d:2, m:2, qs:16); x = q * d + m, q in 0..15.
def dequantize_q4_1(blocks: np.ndarray) -> np.ndarray:
    d, m = f16_field(blocks, 0), f16_field(blocks, 2)
    q = unpack_nibbles(blocks[:, 4:20])
    return d * q.astype(np.float32) + m


# Q5_0: 32 elements per 22-byte block (d:2, qh:4, qs:16); x = (q - 16) * d, q in 0..31.
def dequantize_q5_0(blocks: np.ndarray) -> np.ndarray:
    d = f16_field(blocks, 0)
    q = (unpack_nibbles(blocks[:, 6:22]) | unpack_fifth_bits(blocks[:, 2:6])).view(np.int8) - np.int8(16)
    return d * q.astype(np.float32)


# Q5_1: 32 elements per 24-byte block (d:2, m:2, qh:4, qs:16); x = q * d + m, q in 0..31.
def dequantize_q5_1(blocks: np.ndarray) -> np.ndarray:
    d, m = f16_field(blocks, 0), f16_field(blocks, 2)
    q = unpack_nibbles(blocks[:, 8:24]) | unpack_fifth_bits(blocks[:, 4:8])
    return d * q.astype(np.float32) + m


# Q8_0: 32 elements per 34-byte block (d:2, qs:32 int8); x = q * d.
def dequantize_q8_0(blocks: np.ndarray) -> np.ndarray:
    d = f16_field(blocks, 0)
    return blocks[:, 2:34].view(np.int8).astype(np.float32) * d


# Quantizers: (n_blocks, 32) float32 -> (n_blocks, type_size) uint8.


def _reciprocal(d: np.ndarray) -> np.ndarray:
    """ggml's `id = d ? 1.0f/d : 0.0f`, in f32."""
    with np.errstate(divide="ignore"):
        return np.where(d == 0, np.float32(0), np.float32(1) / d).astype(np.float32)


def _pack_nibbles(q: np.ndarray) -> np.ndarray:
    """(n, 32) values 0..15 -> (n, 16) bytes: element j in the low nibble, element j + 16 in the high."""
    return q[:, :16] | (q[:, 16:] << np.uint8(4))


def _f16_bytes(values: np.ndarray) -> np.ndarray:
    return values.astype("<f2").view(np.uint8)


def _round_half_away(x: np.ndarray) -> np.ndarray:
    """C's roundf (halves away from zero) exactly in f32; np.round would round halves to even."""
    magnitude = np.abs(x)
    whole = np.floor(magnitude)
    return np.sign(x) * (whole + np.floor(2 * (magnitude - whole)))


def quantize_q8_0(values: np.ndarray) -> np.ndarray:
    """quantize_row_q8_0_ref: d = amax / 127, q = roundf(x / d)."""
    values = values.astype(np.float32, copy=False)
    d = np.abs(values).max(axis=1, keepdims=True) / np.float32(127)
    q = _round_half_away(values * _reciprocal(d)).astype(np.int8)
    return np.concatenate([_f16_bytes(d), q.view(np.uint8)], axis=1)


def quantize_q4_0(values: np.ndarray) -> np.ndarray:
    """quantize_row_q4_0_ref: d = -max / 8 where max is the signed value of largest magnitude."""
    values = values.astype(np.float32, copy=False)
    first_largest = np.abs(values).argmax(axis=1)[:, None]  # ggml keeps the first on ties
    d = np.take_along_axis(values, first_largest, axis=1) / np.float32(-8)
    # (int8_t)(x*id + 8.5f) truncates toward zero; MIN(15, .) caps the one value that reaches 16.
    q = np.trunc(values * _reciprocal(d) + np.float32(8.5)).astype(np.uint8).clip(0, 15)
    return np.concatenate([_f16_bytes(d), _pack_nibbles(q)], axis=1)


def quantize_q4_1(values: np.ndarray) -> np.ndarray:
    """quantize_row_q4_1_ref: d = (max - min) / 15, m = min, q = (int)((x - min) / d + 0.5)."""
    values = values.astype(np.float32, copy=False)
    lo = values.min(axis=1, keepdims=True)
    hi = values.max(axis=1, keepdims=True)
    d = (hi - lo) / np.float32(15)
    q = np.trunc((values - lo) * _reciprocal(d) + np.float32(0.5)).astype(np.uint8).clip(0, 15)
    return np.concatenate([_f16_bytes(d), _f16_bytes(lo), _pack_nibbles(q)], axis=1)
