"""The fast CPU backend: numba kernels over weights that stay quantized.

Implements fakcore.engine.backend.Backend. Weights are repacked once at load into small integers with a
float32 scale and offset per sub-block (formats/quants/unpack.py; no offsets for the types that have none:
Q8_0, Q5_0, Q6_K, Q3_K, so neither their bytes nor their work); float tensors stay float32. Two ways to
multiply, chosen by `activations`:

- "f32": kernels.py dequantizes one weight row at a time into a per-thread buffer and multiplies
  float activations; argmax-exact against the f32 reference.
- "int8": vnni.py quantizes activations to int8 per 32-element block and multiplies bytes with integer
  dot products, as llama.cpp does: faster, and close to (not bit-equal with) the reference. The
  instructions (`isa`: AVX-512 VNNI, AVX-VNNI or AVX2) are the best the CPU has unless forced; all give the same bits.
  Its matrices are stored in vnni.py's interleaved sets (a row's groups 16 to a vector's lanes), with
  their scales and offsets per set and lane.
- "auto": int8 where the CPU runs an int8 path, else f32; the log says which. Not the default: on SmolLM2
  Q4_1 the int8 path answers "What is the capital of France?" wrongly where f32 says Paris.

Every kernel of both paths is batch-invariant, so `batch_invariant = True`: exact KV eviction relies on it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fakcore.engine.backend import BackendError, Segment, rope_inv_freq
from fakcore.engine.kvcache import KVCache
from fakcore.engine.registry import register_backend
from fakcore.formats.quants.unpack import INTEGER_TYPES, unpack
from fakcore.models.config import ModelConfig, RopeScaling

FLOAT_TYPES = ("F32", "F16", "BF16")


NIBBLE_TYPES = ("Q4_0", "Q4_1", "Q4_K", "Q4_G")  # 4-bit values: kept two to a byte (Q4_G: GPTQ, AWQ)
ACTIVATIONS = ("auto", "f32", "int8")

log = logging.getLogger("fak.engine-cpu")
_NO_OFFSETS = np.zeros((0, 0), np.float32)  # what an int8 kernel of a type without offsets gets (and ignores)
_NO_BIAS = np.zeros((0, 0), np.float32)  # what the layernorm kernel gets for a norm without bias
_NO_ALIBI = np.zeros(0, np.float32)  # what the attention kernel gets without ALiBi


@dataclass
class QMatrix:
    """A (rows, cols) weight kept as small integers with a float32 scale and offset per sub-block:
    w = scale * q + offset.

    layout "nib": 4-bit values two to a byte, q uint8 (rows, subs, 16), byte j holding elements j (low
                  nibble) and j + 16 (high nibble) of its 32-element sub-block;
    layout "i8":  one int8 per value, q (rows, subs, sub); with int8 activations only for the types
                  without offsets (Q8_0, Q5_0, Q6_K, Q3_K: w = scale * q);
    layout "u8":  (int8 activations) one byte per value shifted to 0..255 (int8 + 128, the offset
                  corrected), for the types with offsets, q uint8 (rows, subs, sub);
    layouts "i6", "i5": (int8 activations) "i8" whose values all lie within -32..31 / -16..15 (Q6_K; Q5_0,
                  Q3_K), stored alike: the AVX2 kernels sum their products in 16 bits for longer (vnni._Avx2).
    offset is None where every offset is zero: those kernels skip the offset (bytes and work).
    columns (GPTQ act-order, Tensor.columns): the matrix's columns are the inputs in this order, so `linear`
    multiplies x[:, columns].

    On the int8 path (group = G, the sub-block size, 16 or 32) the same values are stored for its kernels:
    q (rows, bytes) in vnni.py's interleaved set order (4-bit values still two to a byte), scale and offset
    (rows, groups) with zeros for the sets' padding groups (vnni.padded_groups), cols the row length
    (vnni.embed_rows reads rows back)."""

    q: np.ndarray
    scale: np.ndarray  # (rows, subs) float32, or half bits (uint16) on the int8 path where exact
    offset: np.ndarray | None  # (rows, subs) float32; None: all zero
    qtype: str
    layout: str
    columns: np.ndarray | None = None  # (cols,) input order of the stored columns; None: in order
    group: int = 0  # int8 path: the sub-block size, stored interleaved (vnni.py); 0: the layout above
    cols: int = 0  # int8 path: the row length
    plan: tuple | None = field(default=None, repr=False, compare=False)  # NumbaBackend._kernel8's, once looked up

    @property
    def nibbles(self) -> bool:
        return self.layout == "nib"

    @property
    def sub(self) -> int:
        return self.group or (32 if self.nibbles else self.q.shape[2])

    @property
    def shape(self) -> tuple[int, int]:
        return (self.q.shape[0], self.cols) if self.group else (self.q.shape[0], self.q.shape[1] * self.sub)


def _aligned(a: np.ndarray) -> np.ndarray:
    """`a` (C-contiguous) with its first byte 64-byte aligned, copied where it is not: the int8 kernels load
    whole 64-byte vectors of a row, and one that straddles two cache lines costs two loads (a 16-token tile
    ran 0-9% slower on misaligned rows, Intel Xeon)."""
    if a.ctypes.data % 64 == 0:
        return a
    buf = np.empty(a.nbytes + 64, np.uint8)
    skip = -buf.ctypes.data % 64
    out = buf[skip:skip + a.nbytes].view(a.dtype).reshape(a.shape)
    out[...] = a
    return out


def _as_half_if_exact(values: np.ndarray) -> np.ndarray:
    """float32 -> IEEE half bits (uint16) when every value survives the round trip exactly (scales read
    from f16 fields do), else unchanged: the int8 kernels widen halves on load, halving scale traffic."""
    halves = values.astype(np.float16)
    return halves.view(np.uint16) if np.array_equal(halves.astype(np.float32), values) else values


def _as_float(values: np.ndarray) -> np.ndarray:
    """Scales/offsets as float32, whether stored as float32 or as half bits."""
    return values.view(np.float16).astype(np.float32) if values.dtype == np.uint16 else np.ascontiguousarray(values)


def _offsets(w: QMatrix, rows: np.ndarray | None = None) -> np.ndarray:
    """A matrix's offsets (of `rows`, default all) as float32, zeros where it stores none."""
    if w.offset is None:
        return np.zeros((w.q.shape[0] if rows is None else len(rows),) + w.scale.shape[1:], np.float32)
    return np.ascontiguousarray(w.offset if rows is None else w.offset[rows])


def _widest(layouts: set[str], signed: list[str]) -> str | None:
    """The one layout matrices of `layouts` can be fused under: theirs when they share one, the widest when
    all are signed kinds (`signed`, narrowest first: stored alike), else None."""
    if len(layouts) == 1:
        return next(iter(layouts))
    return max(layouts, key=signed.index) if layouts <= set(signed) else None


def pack_nibbles(q: np.ndarray) -> np.ndarray:
    """(rows, subs, 32) values 0..15 -> (rows, subs, 16) bytes: low nibble element j, high element j + 16."""
    v = q.astype(np.uint8)
    return np.ascontiguousarray(v[..., :16] | (v[..., 16:] << np.uint8(4)))


class NumbaKVCache(KVCache):
    """KVCache plus the copies the attention kernel reads: the keys transposed, (L, Hkv, D, S) float32; or, for
    a `half` cache (the int8 path's), the keys and the values as half floats (their uint16 bits: numba has no
    float16 on the CPU), the keys in blocks of attention.KEY_BLOCK (16) positions, (L, Hkv, key_blocks(S), D,
    16) with position p's feature d at [.., p // 16, d, p % 16] (a block of keys is one stretch of memory), and
    the values (L, Hkv, value_rows(S, D), D), padded so that the kernel's whole-vector loads stay inside them.
    Half the bytes a decode step reads per cached position, as llama.cpp's default f16 cache; each value
    rounded to nearest (ties to even) from the float32 one.
    Kept in step on every write and after every move (`keys_changed`, which the KV-MMU's moves of keys and
    values call); `k` and `v` stay the cache's truth (digests, moves), so a move followed by the copy's refresh
    gives the same bits as writing the moved rows afresh. `addresses` names its arrays to the batched attention
    kernel (attention.py's CACHE_FIELDS), which writes the forward pass's new rows itself."""

    def __init__(self, *args, half: bool = False, **kwargs):
        self.half = half
        super().__init__(*args, **kwargs)

    def _alloc(self, capacity: int) -> None:
        from fak_engine_cpu.attention import KEY_BLOCK, key_blocks, value_rows

        old_kt, old_vh = getattr(self, "kt", None), getattr(self, "vh", None)
        super()._alloc(capacity)
        n_layers, n_kv, hd = self.shape
        assert self.dtype == np.float32, "the attention kernel reads float32 caches"
        n = min(getattr(self, "length", 0), capacity)
        if self.half:
            self.kt = np.zeros((n_layers, n_kv, key_blocks(capacity), hd, KEY_BLOCK), np.uint16)
            self.vh = np.zeros((n_layers, n_kv, value_rows(capacity, hd), hd), np.uint16)
            if old_kt is not None:
                self.kt[:, :, :key_blocks(n)] = old_kt[:, :, :key_blocks(n)]
                self.vh[:, :, :n] = old_vh[:, :, :n]
        else:
            self.kt, self.vh = np.zeros((n_layers, n_kv, hd, capacity), self.dtype), None
            if old_kt is not None:
                self.kt[..., :n] = old_kt[..., :n]
        self.addresses = (self.k.ctypes.data, self.v.ctypes.data, 0 if self.k_pre is None else self.k_pre.ctypes.data,
                          self.kt.ctypes.data, capacity)
        self.half_values = 0 if self.vh is None else self.vh.ctypes.data  # the table's last field

    @property
    def nbytes(self) -> int:  # the kernel's copies count against the KV budget too
        return super().nbytes + self.kt.nbytes + (0 if self.vh is None else self.vh.nbytes)

    def write(self, layer: int, start: int, k_pre: np.ndarray, k: np.ndarray, v: np.ndarray) -> None:
        super().write(layer, start, k_pre, k, v)
        end = start + k.shape[0]
        if self.half:
            from fak_engine_cpu.attention import KEY_BLOCK

            p = np.arange(start, end)
            self.kt[layer, :, p // KEY_BLOCK, :, p % KEY_BLOCK] = _half_bits(k)  # (rows, Hkv, D): each row's block, lane
            self.vh[layer, :, start:end] = _half_bits(v.transpose(1, 0, 2))
        else:
            self.kt[layer, :, :, start:end] = k.transpose(1, 2, 0)

    def keys_changed(self, a: int, b: int) -> None:
        if b <= a:
            return
        if self.half:  # from the moved truth, as a write would have made them
            from fak_engine_cpu.attention import KEY_BLOCK

            p = np.arange(a, b)
            self.kt[:, :, p // KEY_BLOCK, :, p % KEY_BLOCK] = _half_bits(self.k[:, :, a:b].transpose(2, 0, 1, 3))
            self.vh[:, :, a:b] = _half_bits(self.v[:, :, a:b])
        else:
            from fak_engine_cpu import kernels

            kernels.transpose_keys(self.k, self.kt, a, b)


def _half_bits(x: np.ndarray) -> np.ndarray:
    """float32 values rounded to half floats, as their uint16 bits (the kernel's _half_bits, elementwise)."""
    return np.asarray(x, np.float32).astype(np.float16).view(np.uint16)


class RopeTable:
    def __init__(self, head_dim: int, theta: float, scaling: RopeScaling):
        self.inv_freq = rope_inv_freq(head_dim, theta, scaling)
        self.factor = np.float32(scaling.attention_factor)  # longrope: cos and sin scaled
        self.cos = np.zeros((0, head_dim), np.float32)
        self.sin = np.zeros((0, head_dim), np.float32)

    def upto(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        if n > len(self.cos):
            n = max(n, 2 * len(self.cos), 256)
            freqs = np.outer(np.arange(n, dtype=np.float32), self.inv_freq).astype(np.float32)
            emb = np.concatenate([freqs, freqs], axis=-1)
            cos, sin = np.cos(emb), np.sin(emb)
            if self.factor != 1.0:
                cos, sin = cos * self.factor, sin * self.factor
            self.cos, self.sin = np.ascontiguousarray(cos), np.ascontiguousarray(sin)
        return self.cos, self.sin


class NumbaBackend:
    name = "numba"
    device = "cpu"
    batch_invariant = True
    rope_features = frozenset({"partial", "attention_factor"})  # fakcore/engine/backend.py; RopeTable, kernels.rope
    attention_features = frozenset({"alibi", "sinks"})  # attention._attend
    recurrent_features = frozenset({"gated_deltanet"})  # activations are host arrays (fakcore/engine/deltanet.py)
    isa = ""  # the int8 path's instructions ("avx512-vnni" | "avx-vnni" | "avx2"); empty for f32 activations

    def __init__(self, threads: int = 0, activations: str = "f32", isa: str = ""):
        """isa: force an int8 path (vnni.ISAS), for tests and benchmarks; empty: the best this CPU has."""
        import numba

        from fak_engine_cpu import attention, kernels

        if activations not in ACTIVATIONS:
            raise BackendError(f"numba backend: activations must be one of {', '.join(ACTIVATIONS)}, not {activations!r}")
        if activations == "auto":  # the best path this CPU has: int8 where it runs one
            from fak_engine_cpu import vnni

            activations = "int8" if isa or vnni.best_isa() else "f32"
            if activations == "f32":
                log.info("numba backend: activations auto -> f32 (this CPU runs no int8 path)")
        if activations == "int8":
            from fak_engine_cpu import vnni

            if isa and isa not in vnni.ISAS:
                raise BackendError(f"numba backend: int8 paths are {', '.join(vnni.ISAS)}, not {isa!r}")
            if isa and vnni.missing_features(isa):  # forced: the path asked for or an error, never another
                raise BackendError(f"numba backend: the {isa} int8 path needs CPU features "
                                   f"{', '.join(vnni.missing_features(isa))}, which this machine lacks or NUMBA_CPU_FEATURES "
                                   "leaves out")
            chosen = isa or vnni.best_isa()
            if chosen is None:
                lacks = "; ".join(f"{i} needs {', '.join(vnni.missing_features(i))}" for i in vnni.ISAS)
                raise BackendError(f"numba backend: this CPU runs no int8 path ({lacks}); use activations f32")
            self.vnni, self.isa, self.name = vnni, chosen, "numba-int8"
            self.device = f"cpu:{chosen}"  # receipts and heartbeats name the path that ran
            self._linear8 = vnni.LINEARS[chosen]
            log.info("numba backend: int8 activations on the %s path%s", chosen, " (forced)" if isa else "")
        elif isa:
            raise BackendError(f"numba backend: isa {isa!r} is for int8 activations, not {activations}")
        self.activations = activations
        self.k = kernels
        self._attend = attention.attention
        if threads:
            numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
        self.threads = numba.get_num_threads()
        self._resident: dict[tuple, Any] = {}
        self._attention_lines: tuple | None = None  # (segments, layer, table): see attention

    def bind(self) -> None:
        """Give the calling thread this backend's thread count: numba's is per thread, and the scheduler
        thread (or a warm-up's) would otherwise run on every core whatever FAK_THREADS says."""
        import numba

        numba.set_num_threads(self.threads)

    # -- weights ---------------------------------------------------------------------------------------
    def matrix(self, t) -> QMatrix | np.ndarray:
        key = (t.source, t.name, t.qtype, tuple(t.shape), t.raw.ctypes.data)
        if key in self._resident:  # a tied embedding is the LM head: one resident copy
            return self._resident[key]
        return self._repack(t)

    def _repack(self, t) -> QMatrix | np.ndarray:
        rows = t.shape[0]
        if t.qtype in FLOAT_TYPES:
            w: Any = np.ascontiguousarray(t.dequantize().reshape(rows, -1), dtype=np.float32)
        elif t.qtype in INTEGER_TYPES:
            u = unpack(t.qtype, t.as_blocks().reshape(-1, t.type_size))
            n_blocks = u.q.shape[0] // rows
            subs, sub = u.q.shape[1] * n_blocks, u.q.shape[2]
            q = u.q.reshape(rows, subs, sub)
            scale = u.scale.reshape(rows, subs)
            offset = u.offset.reshape(rows, subs)
            if t.qtype in NIBBLE_TYPES:
                if t.qtype == "Q4_0":  # values -8..7: store q + 8, fold the -8 into the offset (exact: -8d)
                    q = q + np.int8(8)
                    offset = offset - np.float32(8.0) * scale
                q, layout = (q if self.activations == "int8" else pack_nibbles(q)), "nib"
            elif self.activations == "int8" and offset.any():  # unsigned bytes (signed ones: q + 128, offset - 128 d)
                if q.min() < 0:
                    q = (q.astype(np.int16) + 128).astype(np.uint8)
                    offset = offset - np.float32(128.0) * scale
                q, layout = q.astype(np.uint8), "u8"
            else:  # int8 values; on the int8 path only types without offsets (signed bytes x signed bytes)
                layout = self.vnni.signed_kind(q) if self.activations == "int8" else "i8"
            if self.activations == "int8":  # the kernels' interleaved sets, scales as half floats where exact
                if sub not in (16, 32):
                    raise BackendError(f"{t.source}: tensor {t.name!r}: {t.qtype} has {sub}-element sub-blocks; "
                                       "the int8 path takes 16 or 32")
                v = self.vnni
                return QMatrix(_aligned(v.interleave(q, layout == "nib")), v.padded_groups(_as_half_if_exact(scale), sub),
                               v.padded_groups(offset, sub) if offset.any() else None, t.qtype, layout, t.columns,
                               group=sub, cols=subs * sub)
            w = QMatrix(np.ascontiguousarray(q), np.ascontiguousarray(scale),
                        np.ascontiguousarray(offset) if offset.any() else None, t.qtype, layout, t.columns)
        else:
            raise BackendError(f"{t.source}: tensor {t.name!r}: the numba backend has no kernel for {t.qtype}")
        return w

    def vector(self, t, offset: float = 0.0) -> np.ndarray:
        return np.ascontiguousarray(t.dequantize().reshape(-1) + np.float32(offset), dtype=np.float32)

    def embedding(self, t) -> QMatrix | np.ndarray:
        w = self.matrix(t)
        self._resident[(t.source, t.name, t.qtype, tuple(t.shape), t.raw.ctypes.data)] = w
        return w

    def fuse(self, weights: list) -> QMatrix | np.ndarray | None:
        """Rows of `weights` stacked into one matrix, so one kernel call (one pass over the input) serves
        all of them; None when their layouts differ. Each output row is computed exactly as before."""
        if all(isinstance(w, np.ndarray) for w in weights):
            return np.ascontiguousarray(np.concatenate(weights, axis=0))
        if all(isinstance(w, QMatrix) for w in weights):
            first = weights[0]
            same_columns = all((w.columns is None and first.columns is None)
                               or (w.columns is not None and first.columns is not None
                                   and np.array_equal(w.columns, first.columns)) for w in weights)
            layouts = {w.layout for w in weights}
            layout = _widest(layouts, list(self.vnni.SIGNED) if self.activations == "int8" else ["i8"])
            if same_columns and layout and all(w.q.shape[1:] == first.q.shape[1:] and w.group == first.group
                                               and w.cols == first.cols and w.scale.dtype == first.scale.dtype for w in weights):
                offsets = None if all(w.offset is None for w in weights) else np.concatenate([_offsets(w) for w in weights])
                return QMatrix(_aligned(np.concatenate([w.q for w in weights])),
                               np.ascontiguousarray(np.concatenate([w.scale for w in weights])),
                               None if offsets is None else np.ascontiguousarray(offsets),
                               "+".join(sorted({w.qtype for w in weights})), layout, first.columns,
                               first.group, first.cols)
        return None

    # -- ops -------------------------------------------------------------------------------------------
    def embed(self, table, ids: np.ndarray, scale: float) -> np.ndarray:
        ids = np.ascontiguousarray(ids, dtype=np.int64)
        if isinstance(table, QMatrix):
            out = np.empty((len(ids), table.shape[1]), np.float32)
            rows = np.arange(len(ids), dtype=np.int64)
            if table.group:  # int8 path: the rows asked for, back in natural order
                m = np.zeros((len(ids), table.scale.shape[1]), np.float32) if table.offset is None else table.offset[ids]
                self.vnni.embed_rows(table.q[ids], _as_float(table.scale[ids]), np.ascontiguousarray(m, np.float32),
                                     table.cols, table.group, table.nibbles, scale, out)
            else:
                q, sc, off = table.q[ids], _as_float(table.scale[ids]), _offsets(table, ids)  # the rows asked for
                (self.k.embed_q4 if table.nibbles else self.k.embed_q)(q, sc, off, rows, np.float32(scale), out)
            if table.columns is not None:  # back to the model's column order
                stored, out = out, np.empty_like(out)
                out[:, table.columns] = stored
            return out
        x = table[ids]
        return x * np.float32(scale) if scale != 1.0 else x.copy()

    def _kernel8(self, w: QMatrix) -> tuple:
        """The int8 kernel of `w` and the scales and offsets it reads, looked up once per matrix: a decode step
        makes ~120 linear calls of a few µs each, where this lookup (layout name, dtype test, offsets copied
        contiguous) cost ~2 µs a call. With half scales the offsets go as half floats too where that is exact
        (Q4_0's -8 d, Q4_1's and Q5_1's m: half floats in the file), so a decode step reads 2 bytes less per
        block; where it is not, the scales are widened (exactly) for the float32 kernel instead."""
        plan = w.plan
        if plan is None or plan[0] is not self._linear8:  # first use, or by a backend on another path
            layout = "nib" if w.nibbles else f"{w.layout}_{w.sub}"
            half = w.scale.dtype == np.uint16
            signed = w.layout in self.vnni.SIGNED
            d, m = w.scale, (_NO_OFFSETS if signed else _offsets(w))  # the signed kinds' kernels read none
            if half and not signed:
                m16 = m.astype(np.float16)
                if np.array_equal(m16.astype(np.float32), m):
                    m = m16.view(np.uint16)
                else:
                    d, half = d.view(np.float16).astype(np.float32), False
            sets = self.vnni.Sets.of(w.cols, w.group)
            plan = w.plan = (self._linear8, self._linear8[layout, half], d, m, sets.tables, sets.full, sets.tails)
        return plan

    def linear(self, x: np.ndarray, w, bias: np.ndarray | None = None) -> np.ndarray:
        if x.dtype != np.float32 or not x.flags.c_contiguous:
            x = np.ascontiguousarray(x, dtype=np.float32)
        if type(w) is QMatrix and w.columns is None and self.activations == "int8":  # the decode hot path
            _, kernel, d, m, tables, full, tails = self._kernel8(w)
            out = np.empty((x.shape[0], w.q.shape[0]), np.float32)
            kernel(w.q, d, m, x, tables, full, tails, out)
            if bias is not None:
                out += bias
            return out
        if isinstance(w, QMatrix) and w.columns is not None:  # act-order: the inputs in the stored order
            x = np.ascontiguousarray(x[:, w.columns])
        if isinstance(w, QMatrix) and self.activations == "int8":
            out = np.empty((x.shape[0], w.shape[0]), np.float32)
            _, kernel, d, m, tables, full, tails = self._kernel8(w)
            kernel(w.q, d, m, x, tables, full, tails, out)
        elif isinstance(w, QMatrix):
            out = np.empty((x.shape[0], w.shape[0]), np.float32)
            if w.offset is None:
                (self.k.linear_q4_scaled if w.nibbles else self.k.linear_q_scaled)(w.q, w.scale, x, out)
            else:
                (self.k.linear_q4 if w.nibbles else self.k.linear_q)(w.q, w.scale, w.offset, x, out)
        else:
            out = np.empty((x.shape[0], w.shape[0]), np.float32)
            self.k.linear_f32(w, x, out)
        if bias is not None:
            out += bias
        return out

    def rmsnorm(self, x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
        if x.ndim == 2 and x.dtype == np.float32 and x.flags.c_contiguous:  # the residual stream, as it is
            out = np.empty_like(x)
            self.k.rmsnorm(x, w, np.float32(eps), out)
            return out
        shape = x.shape
        x2 = np.ascontiguousarray(x, dtype=np.float32).reshape(-1, shape[-1])
        out = np.empty_like(x2)
        self.k.rmsnorm(x2, w, np.float32(eps), out)
        return out.reshape(shape)

    def layernorm(self, x: np.ndarray, w: np.ndarray, b: np.ndarray | None, eps: float) -> np.ndarray:
        shape = x.shape
        d = shape[-1]
        x2 = np.ascontiguousarray(x, dtype=np.float32).reshape(-1, d)
        out = np.empty_like(x2)
        bias = _NO_BIAS if b is None else b.reshape(-1, d)
        self.k.layernorm(x2, w.reshape(-1, d), bias, np.float32(eps), out)  # per-head gains: row n, head n % G
        return out.reshape(shape)

    def rope_table(self, head_dim: int, theta: float, scaling: RopeScaling) -> RopeTable:
        return RopeTable(head_dim, theta, scaling)

    def rope(self, x: np.ndarray, positions: np.ndarray, table: RopeTable) -> np.ndarray:
        # a decode step's few positions: max() of a list, not ndarray.max() (~3 µs, twice a layer)
        cos, sin = table.upto((max(positions.tolist()) if len(positions) <= 64 else int(positions.max())) + 1)
        if not x.flags.c_contiguous:
            x = np.ascontiguousarray(x)
        if positions.dtype != np.int64 or not positions.flags.c_contiguous:
            positions = np.ascontiguousarray(positions, dtype=np.int64)
        out = np.empty_like(x)
        self.k.rope(x, positions, cos, sin, out)
        return out

    def attention(self, q, k_pre, k, v, segments: list[Segment], layer: int, window: int, scale: float,
                  softcap: float, alibi: np.ndarray | None = None, sinks: np.ndarray | None = None) -> np.ndarray:
        """Every segment's rows in one kernel call: the kernel stores them in their caches and attends.

        The kernel's table of caches is built (shapes checked, caches reserved) at a forward pass's first
        attention layer and reused by its later ones: the same segments list at a higher layer is the same
        pass, whose caches neither grow nor move before it commits (a decode step of 16 sequences spent
        ~15 us a layer building it). Any other call builds it afresh."""
        last = self._attention_lines
        if last is not None and last[0] is segments and layer > last[1]:
            lines = last[2]
        else:
            rows = []
            for seg in segments:
                cache: NumbaKVCache = seg.cache
                if cache.shape[1:] != k.shape[1:] or layer >= cache.shape[0]:  # the kernel writes by address: no stray shapes
                    raise BackendError(f"attention: cache of shape {cache.shape} for layer {layer}, rows {k.shape[1:]}")
                cache.reserve(cache.length + seg.rows.stop - seg.rows.start)
                rows.append((*cache.addresses, cache.length, seg.rows.start, seg.rows.stop, cache.half_values))
            lines = np.array(rows, np.int64)
        # held to the pass's last layer only (it holds the segments, so their caches)
        self._attention_lines = None if layer >= segments[0].cache.shape[0] - 1 else (segments, layer, lines)
        out = np.empty_like(q)
        self._attend(q, k_pre, k, v, lines, layer, int(window), np.float32(scale),
                         np.float32(softcap), _NO_ALIBI if alibi is None else np.ascontiguousarray(alibi, np.float32),
                         _NO_ALIBI if sinks is None else np.ascontiguousarray(sinks, np.float32), out)
        return out

    def gated(self, gate: np.ndarray, up: np.ndarray, act: str) -> np.ndarray:
        # the kernels read rows as contiguous (kernels._unit_row): the halves of one matmul's output are
        if gate.dtype != np.float32 or gate.strides[-1] != 4:
            gate = np.ascontiguousarray(gate, dtype=np.float32)
        if up.dtype != np.float32 or up.strides[-1] != 4:
            up = np.ascontiguousarray(up, dtype=np.float32)
        out = np.empty(gate.shape, np.float32)
        if gate.shape[0] >= self.k.PARALLEL_ROWS:
            (self.k.gated_silu_rows if act == "silu" else self.k.gated_gelu_tanh_rows)(gate, up, out)
        else:
            (self.k.gated_silu if act == "silu" else self.k.gated_gelu_tanh)(gate, up, out)
        return out

    def swiglu_oai(self, gate: np.ndarray, up: np.ndarray, alpha: float, limit: float) -> np.ndarray:
        """gpt-oss's clamped SwiGLU (kernels.swiglu_oai), elementwise: batch-invariant."""
        out = np.empty_like(gate)
        self.k.swiglu_oai(np.ascontiguousarray(gate), np.ascontiguousarray(up), np.float32(alpha), np.float32(limit), out)
        return out

    def deltanet_scan(self, *args):
        """Gated DeltaNet's recurrence after its projections, with delta_scan's signature and contract
        (fakcore/engine/deltanet.py), as numba kernels (deltanet.py): batch-invariant as the rest."""
        from fak_engine_cpu import deltanet

        return deltanet.deltanet_scan(*args)

    def activation(self, x: np.ndarray, act: str) -> np.ndarray:
        x = np.ascontiguousarray(x, dtype=np.float32)
        out = np.empty_like(x)
        (self.k.gelu if act == "gelu" else self.k.gelu_tanh)(x, out)
        return out

    def add(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        return x + y

    def clamp(self, x: np.ndarray, c: float) -> np.ndarray:
        return np.clip(x, np.float32(-c), np.float32(c))

    def scale(self, x: np.ndarray, s: float) -> np.ndarray:
        return x * np.float32(s)

    def softcap(self, x: np.ndarray, cap: float) -> np.ndarray:
        return np.tanh(x / np.float32(cap)) * np.float32(cap)

    def take_rows(self, x: np.ndarray, rows: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(x[rows])

    def to_host(self, x: np.ndarray) -> np.ndarray:
        return x

    # -- caches ----------------------------------------------------------------------------------------
    def new_cache(self, config: ModelConfig) -> NumbaKVCache:
        # the int8 path (approximate already) reads half-float keys and values; the f32 path float32 ones
        return NumbaKVCache(config.n_kv_layers, config.n_kv_heads, config.head_dim, rope=self.rope,
                            half=self.activations == "int8")


register_backend("numba", NumbaBackend)
