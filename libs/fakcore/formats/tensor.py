"""One tensor as stored in a model file: a name, a quant type, a logical shape and the raw bytes.

Both GGUF and safetensors loaders produce these, so the engine sees one kind of weight whatever the file.
The bytes stay where the loader found them (normally a read-only view into an mmapped file); decoding is
explicit (`dequantize`) so that a backend can instead keep the quantized blocks and hand them to a kernel
(`as_blocks`).

Shapes are numpy's row-major order: a matrix is (rows = out_features, cols = in_features), and quant
blocks run along the last axis, so every row is its own run of whole blocks. That is what lets
`take_rows` reorder rows of a quantized tensor by moving bytes.

A matrix may store its columns in another order than the model's (`columns`, GPTQ act-order: stored column k
is input k' = columns[k], so that each quant block is one quantization group): `dequantize` puts them back; a
kernel reading `as_blocks` multiplies by x[:, columns] instead.
"""

from dataclasses import dataclass

import numpy as np

from . import quants

# Dequantize this many elements at a time: the temporaries stay in cache and peak memory stays near the
# size of the output rather than several times it.
CHUNK_ELEMENTS = 1 << 20


class FormatError(Exception):
    """A model file cannot be read as asked. The message always names the file, and the tensor or field."""


class UnsupportedTypeError(FormatError):
    """The tensor's quant type is a real ggml type that fak cannot decode (yet)."""


@dataclass(frozen=True, eq=False)  # eq would compare arrays; identity is what a weight means
class Tensor:
    name: str
    qtype: str  # a key of quants.QTYPES ("F32", "Q4_1", …) or of quants.UNSUPPORTED
    shape: tuple[int, ...]  # row-major logical shape; GGUF's ne order reversed
    raw: np.ndarray  # 1-D uint8, the stored bytes (zero-copy into the mmap when loaded from a file)
    source: str  # file path, for error messages
    columns: np.ndarray | None = None  # (shape[-1],) stored column k is logical column columns[k]; None: in order

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", tuple(int(dim) for dim in self.shape))
        where = f"{self.source}: tensor '{self.name}'"
        try:
            qt = quants.layout(self.qtype)
        except KeyError:
            raise FormatError(f"{where}: unknown quant type {self.qtype!r}") from None
        if not isinstance(self.raw, np.ndarray) or self.raw.dtype != np.uint8 or self.raw.ndim != 1:
            raise FormatError(f"{where}: raw must be a 1-D uint8 array")
        if any(dim < 0 for dim in self.shape):
            raise FormatError(f"{where}: negative dimension in shape {self.shape}")
        row_length = self.shape[-1] if self.shape else 1  # a scalar is one row of one element
        if row_length % qt.block_size:
            raise FormatError(
                f"{where}: row length {row_length} is not a multiple of the {self.qtype} block size "
                f"{qt.block_size} (shape {self.shape})"
            )
        if self.columns is not None:
            cols = np.asarray(self.columns)
            if cols.shape != (row_length,) or not np.array_equal(np.sort(cols), np.arange(row_length)):
                raise FormatError(f"{where}: columns is not a permutation of its {row_length} columns")
            object.__setattr__(self, "columns", cols.astype(np.intp))
        if self.raw.size != self.nbytes:
            raise FormatError(
                f"{where}: {self.qtype} {self.shape} needs {self.nbytes} bytes, got {self.raw.size}"
            )

    @classmethod
    def from_array(cls, name: str, values: np.ndarray, qtype: str = "F32", source: str = "<memory>") -> "Tensor":
        """Encode an array (F32, F16, BF16, Q8_0, Q4_0, Q4_1) — for tests, fixtures and tools."""
        values = np.asarray(values, dtype=np.float32)
        return cls(name, qtype, values.shape, quants.quantize(values, qtype).reshape(-1), source)

    @property
    def block_size(self) -> int:
        return quants.layout(self.qtype).block_size

    @property
    def type_size(self) -> int:
        return quants.layout(self.qtype).type_size

    @property
    def n_elements(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return self.n_elements // self.block_size * self.type_size

    def dequantize(self) -> np.ndarray:
        """Decode to float32 of `shape`. F32 tensors come back as a read-only view of the stored bytes
        (no copy of the mmap); every other type as a new array."""
        qt = quants.layout(self.qtype)
        if qt.dequantize is None:
            raise UnsupportedTypeError(
                f"{self.source}: tensor '{self.name}': {self.qtype} (ggml type {qt.ggml_type}) is not supported"
            )
        if self.qtype == "F32" and self.columns is None:
            return self.raw.view("<f4").reshape(self.shape)
        blocks = self.raw.reshape(-1, qt.type_size)
        out = np.empty((blocks.shape[0], qt.block_size), dtype=np.float32)
        step = max(1, CHUNK_ELEMENTS // qt.block_size)
        for start in range(0, blocks.shape[0], step):
            out[start : start + step] = qt.dequantize(blocks[start : start + step])
        out = out.reshape(self.shape)
        if self.columns is not None:  # back to the model's column order
            stored, out = out, np.empty_like(out)
            out[..., self.columns] = stored
        return out

    def as_blocks(self) -> np.ndarray:
        """raw as (n_rows, bytes_per_row) uint8, all leading axes folded into rows (a 1-D tensor is one
        row); zero-copy. Each row is a run of whole blocks, ready for a kernel."""
        row_bytes = self.shape[-1] // self.block_size * self.type_size if self.shape else self.type_size
        n_rows = int(np.prod(self.shape[:-1], dtype=np.int64)) if self.shape else 1
        return self.raw.reshape(n_rows, row_bytes)

    def take_rows(self, index: np.ndarray) -> "Tensor":
        """A new tensor whose rows (first axis) are this tensor's rows in `index` order, still in its own
        quant type: e.g. to undo llama.cpp's Q/K row permutation without decoding."""
        index = np.asarray(index)
        if len(self.shape) < 2:
            raise FormatError(f"{self.source}: tensor '{self.name}': take_rows needs 2+ dims, shape is {self.shape}")
        if index.ndim != 1 or not (index.size == 0 or np.issubdtype(index.dtype, np.integer)):
            raise TypeError(f"tensor '{self.name}': take_rows wants a 1-D integer index, got {index.dtype} {index.shape}")
        n_rows = self.shape[0]
        if index.size and (index.min() < 0 or index.max() >= n_rows):
            raise IndexError(f"{self.source}: tensor '{self.name}': row index out of range 0..{n_rows - 1}")
        rows = self.raw.reshape(n_rows, self.nbytes // n_rows if n_rows else 0)[index.astype(np.intp)]
        return Tensor(self.name, self.qtype, (index.size, *self.shape[1:]), rows.reshape(-1), self.source, self.columns)

    def __repr__(self) -> str:
        order = "" if self.columns is None else ", columns permuted"
        return f"Tensor({self.name!r}, {self.qtype}, shape={self.shape}{order}, source={self.source!r})"
