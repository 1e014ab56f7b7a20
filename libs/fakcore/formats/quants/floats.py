"""Unblocked element types: every "block" is one element, stored as-is.

F32, F16 and BF16 are what norms, small models and HuggingFace checkpoints use; F64 and the integer types
appear in GGUF files only as odd side tensors, and are decoded because it costs a line each.

Every dequantizer takes a (n_blocks, type_size) uint8 array and returns (n_blocks, 1) float32; the bytes
are little-endian, as GGUF and safetensors both store them.
"""

import numpy as np


def _view(blocks: np.ndarray, dtype: str) -> np.ndarray:
    return blocks.view(dtype).astype(np.float32)


# F32: 4 bytes, IEEE binary32.
def dequantize_f32(blocks: np.ndarray) -> np.ndarray:
    return blocks.view("<f4")


# F16: 2 bytes, IEEE binary16; every value is exact in f32.
def dequantize_f16(blocks: np.ndarray) -> np.ndarray:
    return _view(blocks, "<f2")


# BF16: 2 bytes, the top half of an f32 (sign:1, exponent:8, mantissa:7); decoding is a 16-bit shift.
def dequantize_bf16(blocks: np.ndarray) -> np.ndarray:
    return (blocks.view("<u2").astype(np.uint32) << np.uint32(16)).view(np.float32)


def dequantize_f64(blocks: np.ndarray) -> np.ndarray:
    return _view(blocks, "<f8")


def dequantize_i8(blocks: np.ndarray) -> np.ndarray:
    return _view(blocks, "i1")


def dequantize_i16(blocks: np.ndarray) -> np.ndarray:
    return _view(blocks, "<i2")


def dequantize_i32(blocks: np.ndarray) -> np.ndarray:
    return _view(blocks, "<i4")


def dequantize_i64(blocks: np.ndarray) -> np.ndarray:
    return _view(blocks, "<i8")


# Quantizers: (n_blocks, 1) float32 -> (n_blocks, type_size) uint8.


def quantize_f32(values: np.ndarray) -> np.ndarray:
    return values.astype("<f4").view(np.uint8)


def quantize_f16(values: np.ndarray) -> np.ndarray:
    # numpy rounds to nearest even, as ggml's GGML_FP32_TO_FP16 does.
    return values.astype("<f2").view(np.uint8)


def quantize_bf16(values: np.ndarray) -> np.ndarray:
    """Round to nearest even, NaNs forced quiet: ggml_compute_fp32_to_bf16 in ggml-impl.h."""
    bits = values.astype(np.float32).view(np.uint32)
    is_nan = (bits & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000)
    rounded = (bits.astype(np.uint64) + (np.uint64(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1)))) >> 16
    quiet_nan = (bits >> np.uint32(16)) | np.uint32(64)
    return np.where(is_nan, quiet_nan, rounded).astype("<u2").view(np.uint8)
