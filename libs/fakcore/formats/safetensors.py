"""safetensors reader: HuggingFace's format of one JSON header plus raw little-endian tensors.

Parsed here (a length, a JSON object, an mmap) rather than through the `safetensors` package, so that the
runtime needs nothing beyond numpy and every inconsistency fails with file and tensor named. The package is
a test dependency only.

File layout:

    header_len:u64 little-endian | header: header_len bytes of JSON | data
    header = {"<tensor>": {"dtype": "BF16", "shape": [rows, cols], "data_offsets": [begin, end]}, ...,
              "__metadata__": {"<str>": "<str>"}}   (optional; ignored)

Offsets are relative to the start of data; shapes are already numpy's row-major order. A checkpoint
directory holds either `model.safetensors` or shards listed by `model.safetensors.index.json`
({"weight_map": {"<tensor>": "<shard file>"}}); every tensor must be in exactly the shard the index names.
"""

import json
import mmap
import os
import struct
from pathlib import Path
from typing import Any

import numpy as np

from .tensor import FormatError, Tensor

SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
MAX_HEADER_BYTES = 100 * 1024 * 1024  # the reference implementation's own limit

# safetensors dtype -> (fak qtype, bytes per element). Other dtypes are refused, naming the tensor.
# I32: GPTQ / AWQ's packed qweight, qzeros and g_idx (formats/gptq.py, formats/awq.py).
DTYPES = {"F32": ("F32", 4), "F16": ("F16", 2), "BF16": ("BF16", 2), "I32": ("I32", 4)}


class SafetensorsError(FormatError):
    """A safetensors file or index is malformed or unsupported; names file and tensor/field."""


def load_safetensors(path: str | os.PathLike[str]) -> dict[str, Tensor]:
    """Tensors of one `.safetensors` file, or of a checkpoint directory (single file or sharded)."""
    path = Path(path)
    if not path.is_dir():
        return _load_file(path)
    if (path / INDEX_FILE).is_file():
        return _load_sharded(path / INDEX_FILE)
    if (path / SINGLE_FILE).is_file():
        return _load_file(path / SINGLE_FILE)
    raise SafetensorsError(f"{path}: directory has neither {SINGLE_FILE} nor {INDEX_FILE}")


def _load_file(path: Path) -> dict[str, Tensor]:
    source = str(path)
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size < 8:
                raise SafetensorsError(f"{source}: file truncated ({size} bytes, the header length alone is 8)")
            buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except OSError as e:
        raise SafetensorsError(f"{source}: cannot open: {e.strerror or e}") from e
    try:
        header, data_start = _read_header(buf, source)
        data = np.frombuffer(buf, dtype=np.uint8)[data_start:]
        tensors = {name: _tensor(name, entry, data, source) for name, entry in header.items() if name != "__metadata__"}
    except BaseException:
        try:
            buf.close()
        except BufferError:
            pass
        raise
    return tensors


def _read_header(buf: mmap.mmap, source: str) -> tuple[dict[str, Any], int]:
    (header_len,) = struct.unpack_from("<Q", buf, 0)
    if header_len > min(MAX_HEADER_BYTES, len(buf) - 8):
        raise SafetensorsError(
            f"{source}: header length {header_len} runs past the end of the file ({len(buf)} bytes) or the "
            f"{MAX_HEADER_BYTES}-byte limit"
        )
    try:
        header = json.loads(buf[8 : 8 + header_len], object_pairs_hook=_no_duplicate_keys)
    except (ValueError, _DuplicateKey) as e:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise SafetensorsError(f"{source}: header is not valid JSON: {e}") from None
    if not isinstance(header, dict):
        raise SafetensorsError(f"{source}: header is a JSON {type(header).__name__}, not an object")
    return header, 8 + header_len


class _DuplicateKey(Exception):
    pass


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(f"key '{key}' appears twice")
        out[key] = value
    return out


def _tensor(name: str, entry: Any, data: np.ndarray, source: str) -> Tensor:
    where = f"{source}: tensor '{name}'"
    if not isinstance(entry, dict) or not {"dtype", "shape", "data_offsets"} <= entry.keys():
        raise SafetensorsError(f"{where}: header entry needs dtype, shape and data_offsets, got {entry!r}")
    dtype, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
    if dtype not in DTYPES:
        raise SafetensorsError(f"{where}: dtype {dtype} is not supported (only {', '.join(DTYPES)})")
    if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape):
        raise SafetensorsError(f"{where}: shape {shape!r} is not a list of non-negative integers")
    if not (
        isinstance(offsets, list) and len(offsets) == 2 and all(type(o) is int for o in offsets)
        and 0 <= offsets[0] <= offsets[1]
    ):
        raise SafetensorsError(f"{where}: data_offsets {offsets!r} is not [begin, end] with 0 <= begin <= end")
    begin, end = offsets
    if end > data.size:
        raise SafetensorsError(
            f"{where}: data_offsets [{begin}, {end}] run past the end of the data ({data.size} bytes)"
        )
    qtype, itemsize = DTYPES[dtype]
    expected = itemsize
    for dim in shape:
        expected *= dim
    if end - begin != expected:
        raise SafetensorsError(
            f"{where}: {dtype} {shape} needs {expected} bytes but data_offsets span {end - begin}"
        )
    return Tensor(name, qtype, tuple(shape), data[begin:end], source)


def _load_sharded(index_path: Path) -> dict[str, Tensor]:
    try:
        index = json.loads(index_path.read_text())
    except (OSError, ValueError) as e:
        raise SafetensorsError(f"{index_path}: cannot read index: {e}") from None
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict) or not all(isinstance(s, str) for s in weight_map.values()):
        raise SafetensorsError(f"{index_path}: field 'weight_map' is missing or not a tensor -> shard map")

    tensors: dict[str, Tensor] = {}
    for shard in sorted(set(weight_map.values())):
        if Path(shard).name != shard:
            raise SafetensorsError(f"{index_path}: shard name '{shard}' must be a plain file name")
        shard_path = index_path.parent / shard
        if not shard_path.is_file():
            named = next(name for name, s in weight_map.items() if s == shard)
            raise SafetensorsError(f"{index_path}: shard '{shard}' (holding tensor '{named}') does not exist")
        for name, tensor in _load_file(shard_path).items():
            if name not in weight_map:
                raise SafetensorsError(f"{shard_path}: tensor '{name}' is not listed in {index_path.name}")
            if weight_map[name] != shard:
                raise SafetensorsError(
                    f"{shard_path}: tensor '{name}' is listed in {index_path.name} under shard '{weight_map[name]}'"
                )
            tensors[name] = tensor
    for name, shard in weight_map.items():
        if name not in tensors:
            raise SafetensorsError(f"{index_path}: tensor '{name}' is listed but missing from shard '{shard}'")
    return {name: tensors[name] for name in weight_map}  # in index order
