"""The quant-type table: qtype name -> (ggml type id, block size, bytes per block, dequantizer).

A tensor of `n` elements along its last axis is stored as n / block_size blocks of type_size bytes each,
so rows never share a block. Every dequantizer maps a (n_blocks, type_size) uint8 array to
(n_blocks, block_size) float32 and lives with its block layout in the module of its format family:
floats.py (unblocked F32/F16/BF16 and friends), legacy.py (Q4_0 … Q8_0), kquants.py (Q2_K … Q6_K), lowbit.py
(the ternary TQ1_0 / TQ2_0 and MXFP4).
FAK_TYPES holds block types of fak's own that no GGUF file stores (id -1): grouped.py's Q4_G, what GPTQ and
AWQ checkpoints are repacked into at load.

ggml types whose layout we know but do not decode (the IQ family, NVFP4, …) are listed in
UNSUPPORTED so that a file holding them still opens and fails only when such a tensor is used, with the
type named. Ids, block sizes and type sizes follow ggml.h / gguf-py's GGML_QUANT_SIZES.
"""

from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from . import floats, grouped, kquants, legacy, lowbit

BlockFn = Callable[[np.ndarray], np.ndarray]


class QType(NamedTuple):
    ggml_type: int  # the id stored in GGUF tensor infos
    block_size: int  # elements per block
    type_size: int  # bytes per block
    dequantize: BlockFn | None  # (n_blocks, type_size) uint8 -> (n_blocks, block_size) float32; None: unsupported


QTYPES: dict[str, QType] = {
    "F32": QType(0, 1, 4, floats.dequantize_f32),
    "F16": QType(1, 1, 2, floats.dequantize_f16),
    "Q4_0": QType(2, 32, 18, legacy.dequantize_q4_0),
    "Q4_1": QType(3, 32, 20, legacy.dequantize_q4_1),
    "Q5_0": QType(6, 32, 22, legacy.dequantize_q5_0),
    "Q5_1": QType(7, 32, 24, legacy.dequantize_q5_1),
    "Q8_0": QType(8, 32, 34, legacy.dequantize_q8_0),
    "Q2_K": QType(10, 256, 84, kquants.dequantize_q2_k),
    "Q3_K": QType(11, 256, 110, kquants.dequantize_q3_k),
    "Q4_K": QType(12, 256, 144, kquants.dequantize_q4_k),
    "Q5_K": QType(13, 256, 176, kquants.dequantize_q5_k),
    "Q6_K": QType(14, 256, 210, kquants.dequantize_q6_k),
    "I8": QType(24, 1, 1, floats.dequantize_i8),
    "I16": QType(25, 1, 2, floats.dequantize_i16),
    "I32": QType(26, 1, 4, floats.dequantize_i32),
    "I64": QType(27, 1, 8, floats.dequantize_i64),
    "F64": QType(28, 1, 8, floats.dequantize_f64),
    "BF16": QType(30, 1, 2, floats.dequantize_bf16),
    "TQ1_0": QType(34, 256, 54, lowbit.dequantize_tq1_0),
    "TQ2_0": QType(35, 256, 66, lowbit.dequantize_tq2_0),
    "MXFP4": QType(39, 32, 17, lowbit.dequantize_mxfp4),
}

UNSUPPORTED: dict[str, QType] = {
    "Q8_1": QType(9, 32, 36, None),  # sizeof(block_q8_1) in ggml; gguf-py still says 40
    "Q8_K": QType(15, 256, 292, None),
    "IQ2_XXS": QType(16, 256, 66, None),
    "IQ2_XS": QType(17, 256, 74, None),
    "IQ3_XXS": QType(18, 256, 98, None),
    "IQ1_S": QType(19, 256, 50, None),
    "IQ4_NL": QType(20, 32, 18, None),
    "IQ3_S": QType(21, 256, 110, None),
    "IQ2_S": QType(22, 256, 82, None),
    "IQ4_XS": QType(23, 256, 136, None),
    "IQ1_M": QType(29, 256, 56, None),
    "NVFP4": QType(40, 64, 36, None),
    "Q1_0": QType(41, 128, 18, None),
}

FAK_TYPES: dict[str, QType] = {
    "Q4_G": QType(-1, grouped.BLOCK, grouped.TYPE_SIZE, grouped.dequantize_q4_g),
}

NAME_BY_GGML_TYPE: dict[int, str] = {qt.ggml_type: name for name, qt in (QTYPES | UNSUPPORTED).items()}

# Block quantizers, (n_blocks, block_size) float32 -> (n_blocks, type_size) uint8. Only what tests and tools
# need to write files; each matches gguf.quants.quantize bit for bit.
QUANTIZERS: dict[str, BlockFn] = {
    "F32": floats.quantize_f32,
    "F16": floats.quantize_f16,
    "BF16": floats.quantize_bf16,
    "Q8_0": legacy.quantize_q8_0,
    "Q4_0": legacy.quantize_q4_0,
    "Q4_1": legacy.quantize_q4_1,
    "TQ1_0": lowbit.quantize_tq1_0,
    "TQ2_0": lowbit.quantize_tq2_0,
    "MXFP4": lowbit.quantize_mxfp4,
}


def layout(qtype: str) -> QType:
    """The table row for any known ggml type name, supported or not, or of fak's own types; KeyError otherwise."""
    found = QTYPES.get(qtype) or UNSUPPORTED.get(qtype) or FAK_TYPES.get(qtype)
    if found is None:
        raise KeyError(qtype)
    return found


def quantize(values: np.ndarray, qtype: str) -> np.ndarray:
    """Encode `values` (last axis a multiple of the block size) as `qtype`; returns uint8 of shape
    (*values.shape[:-1], bytes_per_row), the layout GGUFWriter.add_tensor(raw_dtype=...) expects."""
    if qtype not in QUANTIZERS:
        raise ValueError(f"no quantizer for {qtype}; available: {', '.join(QUANTIZERS)}")
    qt = QTYPES[qtype]
    values = np.asarray(values, dtype=np.float32)
    if values.ndim == 0 or values.shape[-1] % qt.block_size:
        raise ValueError(f"{qtype} needs a last axis that is a multiple of {qt.block_size}, got shape {values.shape}")
    blocks = QUANTIZERS[qtype](values.reshape(-1, qt.block_size))
    return blocks.reshape(*values.shape[:-1], values.shape[-1] // qt.block_size * qt.type_size)
