"""GGUF reader: llama.cpp's single-file format of metadata plus (mostly quantized) tensors.

We parse it ourselves instead of using the `gguf` package's GGUFReader because that reader builds numpy
views for every metadata item (a 49k-entry token list takes seconds), keeps no bounds checks (a truncated
file surfaces as a numpy error), and knows nothing of which types fak can decode. The package stays a
test dependency: it is the oracle our reader and dequantizers are checked against.

File layout (little-endian; v2 and v3 are identical here, v3 only added big-endian files, which we refuse):

    magic "GGUF" | version:u32 | n_tensors:u64 | n_kv:u64
    n_kv x       key:string | value_type:u32 | value
    n_tensors x  name:string | n_dims:u32 | ne:u64[n_dims] | ggml_type:u32 | offset:u64
    padding to general.alignment (default 32)
    tensor data; each tensor at data_start + offset, offsets multiples of the alignment

    string = len:u64 | utf-8 bytes;  array = elem_type:u32 | count:u64 | elements (arrays nest)

ne[0] is the fastest-varying dimension, so the numpy shape is ne reversed. The file is mmapped and every
tensor's bytes are a zero-copy view into it.
"""

import mmap
import os
import struct
from typing import Any

import numpy as np

from .quants import NAME_BY_GGML_TYPE, layout
from .tensor import FormatError, Tensor

MAGIC = b"GGUF"
SUPPORTED_VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32
MAX_DIMS = 4  # GGML_MAX_DIMS

# Metadata value types (enum gguf_type in gguf.h).
UINT8, INT8, UINT16, INT16, UINT32, INT32, FLOAT32, BOOL, STRING, ARRAY, UINT64, INT64, FLOAT64 = range(13)

# scalar value type -> (struct format for one value, numpy dtype for an array of them)
SCALARS: dict[int, tuple[struct.Struct, np.dtype]] = {
    UINT8: (struct.Struct("<B"), np.dtype("u1")),
    INT8: (struct.Struct("<b"), np.dtype("i1")),
    UINT16: (struct.Struct("<H"), np.dtype("<u2")),
    INT16: (struct.Struct("<h"), np.dtype("<i2")),
    UINT32: (struct.Struct("<I"), np.dtype("<u4")),
    INT32: (struct.Struct("<i"), np.dtype("<i4")),
    FLOAT32: (struct.Struct("<f"), np.dtype("<f4")),
    BOOL: (struct.Struct("<?"), np.dtype("u1")),  # one byte, nonzero = true
    UINT64: (struct.Struct("<Q"), np.dtype("<u8")),
    INT64: (struct.Struct("<q"), np.dtype("<i8")),
    FLOAT64: (struct.Struct("<d"), np.dtype("<f8")),
}
U32, U64 = SCALARS[UINT32][0], SCALARS[UINT64][0]


class GGUFError(FormatError):
    """A GGUF file is malformed or asks for something fak does not support; names file and field/tensor."""


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()


class _Cursor:
    """Walks the header; every read is bounds-checked so a truncated file fails naming what was being read."""

    def __init__(self, buf: mmap.mmap, path: str):
        self.buf, self.path, self.pos, self.size = buf, path, 0, len(buf)

    def error(self, message: str) -> GGUFError:
        return GGUFError(f"{self.path}: {message}")

    def take(self, n: int, what: str) -> int:
        start = self.pos
        if start + n > self.size:
            raise self.error(f"file truncated while reading {what} (needs bytes {start}..{start + n}, size is {self.size})")
        self.pos = start + n
        return start

    def u32(self, what: str) -> int:
        return U32.unpack_from(self.buf, self.take(4, what))[0]

    def u64(self, what: str) -> int:
        return U64.unpack_from(self.buf, self.take(8, what))[0]

    def string(self, what: str) -> str:
        n = self.u64(f"{what} (length)")
        start = self.take(n, what)
        try:
            return str(self.buf[start : start + n], "utf-8")
        except UnicodeDecodeError as e:
            raise self.error(f"{what} is not valid UTF-8 ({e.reason} at byte {e.start})") from None

    def value(self, value_type: int, what: str) -> Any:
        if value_type == STRING:
            return self.string(what)
        if value_type == ARRAY:
            return self.array(what)
        if value_type not in SCALARS:
            raise self.error(f"{what} has unknown value type {value_type}")
        fmt, _ = SCALARS[value_type]
        return fmt.unpack_from(self.buf, self.take(fmt.size, what))[0]

    def array(self, what: str) -> list[Any]:
        elem_type = self.u32(f"{what} (array element type)")
        count = self.u64(f"{what} (array length)")
        if elem_type == STRING:
            return self.string_array(count, what)
        if elem_type == ARRAY:
            return [self.array(f"{what}[{i}]") for i in range(count)]
        if elem_type not in SCALARS:
            raise self.error(f"{what} has unknown array element type {elem_type}")
        dtype = SCALARS[elem_type][1]
        values = np.frombuffer(self.buf, dtype, count, self.take(count * dtype.itemsize, what))
        return (values != 0).tolist() if elem_type == BOOL else values.tolist()

    def string_array(self, count: int, what: str) -> list[str]:
        # The hot loop of opening a model (tokens and merges: ~100k strings), so it is kept bare.
        if self.pos + 8 * count > self.size:  # every string costs at least its length field
            raise self.error(f"file truncated while reading {what} ({count} strings declared)")
        buf, pos, size, unpack = self.buf, self.pos, self.size, U64.unpack_from
        out: list[str] = []
        append = out.append
        try:
            for _ in range(count):
                (n,) = unpack(buf, pos)
                pos += 8
                if pos + n > size:
                    raise self.error(f"file truncated while reading {what}[{len(out)}]")
                append(str(buf[pos : pos + n], "utf-8"))
                pos += n
        except struct.error:
            raise self.error(f"file truncated while reading {what}[{len(out)}] (length)") from None
        except UnicodeDecodeError as e:
            raise self.error(f"{what}[{len(out)}] is not valid UTF-8 ({e.reason} at byte {e.start})") from None
        self.pos = pos
        return out


class GGUFFile:
    """An open GGUF file: `metadata` (key -> int/float/bool/str/list), `tensors` (name -> Tensor, in file
    order). Tensors of ggml types fak cannot decode still load; using them raises, naming the type."""

    def __init__(self, path: str | os.PathLike[str]):
        self.path = os.fspath(path)
        self.version = 0
        self.alignment = DEFAULT_ALIGNMENT
        self.data_offset = 0  # where the tensor data section starts
        self.metadata: dict[str, Any] = {}
        self.tensors: dict[str, Tensor] = {}
        try:
            with open(self.path, "rb") as f:
                if os.fstat(f.fileno()).st_size == 0:
                    raise GGUFError(f"{self.path}: file is empty")
                self._mmap: mmap.mmap | None = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except OSError as e:
            raise GGUFError(f"{self.path}: cannot open: {e.strerror or e}") from e
        try:
            self._parse(self._mmap)
        except BaseException:
            self.close()
            raise

    def _parse(self, buf: mmap.mmap) -> None:
        cur = _Cursor(buf, self.path)
        magic = buf[cur.take(4, "magic") : 4]
        if magic != MAGIC:
            raise cur.error(f"not a GGUF file (magic {magic!r}, expected {MAGIC!r})")
        version = cur.u32("version")
        if version & 0xFFFF == 0:
            raise cur.error(f"big-endian GGUF (version field {version:#010x}) is not supported")
        if version not in SUPPORTED_VERSIONS:
            raise cur.error(f"GGUF version {version} is not supported (only {SUPPORTED_VERSIONS})")
        self.version = version
        n_tensors = cur.u64("tensor count")
        n_kv = cur.u64("metadata count")

        for i in range(n_kv):
            key = cur.string(f"metadata key #{i}")
            value_type = cur.u32(f"value type of metadata '{key}'")
            if key in self.metadata:
                raise cur.error(f"duplicate metadata key '{key}'")
            if key == "general.alignment" and value_type != UINT32:
                raise cur.error(f"metadata 'general.alignment' must be uint32, has value type {value_type}")
            self.metadata[key] = cur.value(value_type, f"metadata '{key}'")

        self.alignment = self.metadata.get("general.alignment", DEFAULT_ALIGNMENT)
        if self.alignment <= 0 or self.alignment & (self.alignment - 1):
            raise cur.error(f"metadata 'general.alignment' = {self.alignment} is not a power of two")

        infos = []
        for i in range(n_tensors):
            name = cur.string(f"name of tensor #{i}")
            n_dims = cur.u32(f"tensor '{name}' (dimension count)")
            if n_dims > MAX_DIMS:
                raise cur.error(f"tensor '{name}' has {n_dims} dimensions (at most {MAX_DIMS})")
            ne = [cur.u64(f"tensor '{name}' (dimension {d})") for d in range(n_dims)]
            ggml_type = cur.u32(f"tensor '{name}' (type)")
            offset = cur.u64(f"tensor '{name}' (data offset)")
            infos.append((name, ne, ggml_type, offset))

        self.data_offset = -(-cur.pos // self.alignment) * self.alignment
        data = np.frombuffer(buf, dtype=np.uint8)
        for name, ne, ggml_type, offset in infos:
            self.tensors[name] = self._tensor_at(data, name, ne, ggml_type, offset)

    def _tensor_at(self, data: np.ndarray, name: str, ne: list[int], ggml_type: int, offset: int) -> Tensor:
        where = f"{self.path}: tensor '{name}'"
        if name in self.tensors:
            raise GGUFError(f"{where} appears twice")
        qtype = NAME_BY_GGML_TYPE.get(ggml_type)
        if qtype is None:
            raise GGUFError(f"{where} has unknown ggml type id {ggml_type}")
        qt = layout(qtype)
        row_length = ne[0] if ne else 1
        if row_length % qt.block_size:
            raise GGUFError(
                f"{where}: row length ne[0]={row_length} is not a multiple of the {qtype} block size {qt.block_size}"
            )
        n_elements = 1
        for dim in ne:
            n_elements *= dim
        nbytes = n_elements // qt.block_size * qt.type_size
        if offset % self.alignment:
            raise GGUFError(f"{where}: data offset {offset} is not a multiple of the alignment {self.alignment}")
        start = self.data_offset + offset
        if start + nbytes > data.size:
            raise GGUFError(
                f"{where}: data (bytes {start}..{start + nbytes}, {qtype} {ne[::-1]}) runs past the end of the "
                f"file ({data.size} bytes)"
            )
        return Tensor(name, qtype, tuple(reversed(ne)), data[start : start + nbytes], self.path)

    @property
    def architecture(self) -> str:
        return self.get("general.architecture")

    def get(self, key: str, default: Any = MISSING) -> Any:
        """metadata[key]; without a default, a missing key raises GGUFError naming file and key."""
        if key in self.metadata:
            return self.metadata[key]
        if default is MISSING:
            raise GGUFError(f"{self.path}: missing metadata key '{key}'")
        return default

    def tensor(self, name: str) -> Tensor:
        if self._mmap is None:
            raise GGUFError(f"{self.path}: file is closed (asked for tensor '{name}')")
        if name not in self.tensors:
            raise GGUFError(f"{self.path}: missing tensor '{name}' (file has {len(self.tensors)} tensors)")
        return self.tensors[name]

    def close(self) -> None:
        """Drop our references to the mapping. Tensors handed out keep it alive (their bytes are views into
        it); the pages go away once the last of them does."""
        self.tensors = {}
        if self._mmap is not None:
            try:
                self._mmap.close()
            except BufferError:  # views still exported: the mmap closes when they are collected
                pass
            self._mmap = None

    def __enter__(self) -> "GGUFFile":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"GGUFFile({self.path!r}, v{self.version}, {len(self.metadata)} keys, {len(self.tensors)} tensors)"
