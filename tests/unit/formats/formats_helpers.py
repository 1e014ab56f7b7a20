"""Shared by the formats tests: random quant blocks that are safe to decode, and a byte-level GGUF / safetensors
builder for files the official writers refuse to produce (old versions, bad types, truncations)."""

import json
import struct

import numpy as np

from fakcore.formats.quants import QTYPES

# Byte offsets of the f16 scale fields inside each block type's layout (see quants/legacy.py, kquants.py).
F16_FIELDS = {
    "Q4_0": [0],
    "Q4_1": [0, 2],
    "Q5_0": [0],
    "Q5_1": [0, 2],
    "Q8_0": [0],
    "Q2_K": [80, 82],
    "Q3_K": [108],
    "Q4_K": [0, 2],
    "Q5_K": [0, 2],
    "Q6_K": [208],
    "TQ1_0": [52],
    "TQ2_0": [64],
    "MXFP4": [],  # its scale is one e8m0 byte (random_blocks keeps it where 12 x the scale is finite)
}


def finite_f16(rng: np.random.Generator, n: int) -> np.ndarray:
    """Finite f16 values across the whole range, including +-0 and subnormals (signed zeros matter)."""
    magnitude = np.exp2(rng.uniform(-26, 15, n))
    values = (np.where(rng.random(n) < 0.5, -1.0, 1.0) * magnitude).astype(np.float16)
    values[rng.random(n) < 0.05] = np.float16(0.0)
    values[rng.random(n) < 0.05] = np.float16(-0.0)
    assert np.isfinite(values).all()
    return values


def random_blocks(qtype: str, n_blocks: int, seed: int = 0) -> np.ndarray:
    """(n_blocks, type_size) uint8: random bytes, with every f16 scale field a finite random value."""
    rng = np.random.default_rng(seed)
    qt = QTYPES[qtype]
    if qtype == "F16":
        return finite_f16(rng, n_blocks).view(np.uint8).reshape(n_blocks, 2)
    if qtype in ("F32", "F64"):
        dtype = np.float32 if qtype == "F32" else np.float64
        return (rng.standard_normal(n_blocks) * 100).astype(dtype).view(np.uint8).reshape(n_blocks, qt.type_size)
    blocks = rng.integers(0, 256, size=(n_blocks, qt.type_size), dtype=np.uint8)
    for start in F16_FIELDS.get(qtype, []):
        blocks[:, start : start + 2] = finite_f16(rng, n_blocks).view(np.uint8).reshape(n_blocks, 2)
    if qtype == "MXFP4":  # every e8m0 scale from the subnormal ones (e < 2) to 2^122
        blocks[:, 0] = rng.integers(0, 251, n_blocks, dtype=np.uint8)
    return blocks


# --- a minimal GGUF writer, byte by byte ---------------------------------------------------------------

GGUF_TYPES = {"u8": 0, "i8": 1, "u16": 2, "i16": 3, "u32": 4, "i32": 5, "f32": 6, "bool": 7, "str": 8,
              "arr": 9, "u64": 10, "i64": 11, "f64": 12}
STRUCT_FMT = {"u8": "<B", "i8": "<b", "u16": "<H", "i16": "<h", "u32": "<I", "i32": "<i", "f32": "<f",
              "bool": "<?", "u64": "<Q", "i64": "<q", "f64": "<d"}


def gguf_string(text: str | bytes) -> bytes:
    raw = text.encode() if isinstance(text, str) else text
    return struct.pack("<Q", len(raw)) + raw


def gguf_value(kind: str, value) -> bytes:
    """kind: "u32", "str", … or "arr:<kind>" (nesting: "arr:arr:i32")."""
    if kind == "str":
        return gguf_string(value)
    if kind.startswith("arr:"):
        inner = kind[4:]
        head = struct.pack("<IQ", GGUF_TYPES[inner.split(":")[0]], len(value))
        return head + b"".join(gguf_value(inner, item) for item in value)
    return struct.pack(STRUCT_FMT[kind], value)


def gguf_file(
    metadata: list[tuple[str, str, object]] = (),
    tensors: list[tuple[str, list[int], int, bytes]] = (),
    version: int = 3,
    alignment: int = 32,
) -> bytes:
    """A GGUF file: metadata as (key, kind, value); tensors as (name, ne, ggml type id, data)."""
    out = bytearray(b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(metadata)))
    for key, kind, value in metadata:
        out += gguf_string(key) + struct.pack("<I", GGUF_TYPES[kind.split(":")[0]]) + gguf_value(kind, value)
    offset = 0
    for name, ne, type_id, data in tensors:
        out += gguf_string(name) + struct.pack("<I", len(ne)) + struct.pack(f"<{len(ne)}Q", *ne)
        out += struct.pack("<IQ", type_id, offset)
        offset += -(-len(data) // alignment) * alignment
    out += bytes(-len(out) % alignment)
    for _, _, _, data in tensors:
        out += data + bytes(-len(data) % alignment)
    return bytes(out)


# --- a minimal safetensors writer ----------------------------------------------------------------------


def safetensors_file(tensors: dict[str, tuple[str, list[int], bytes]], header_extra: dict | None = None) -> bytes:
    """tensors: name -> (dtype, shape, data). header_extra entries override/add header fields verbatim."""
    header: dict = {"__metadata__": {"format": "np"}}
    data = bytearray()
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    header.update(header_extra or {})
    encoded = json.dumps(header).encode()
    encoded += b" " * (-len(encoded) % 8)
    return struct.pack("<Q", len(encoded)) + encoded + bytes(data)
