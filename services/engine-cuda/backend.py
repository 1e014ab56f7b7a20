"""The CUDA backend: numba.cuda kernels (kernels.py) over weights that stay on one GPU in their file's form.

Implements fakcore.engine.backend.Backend. Activations are device arrays; `to_host` brings the logits back.
Weights are uploaded once as stored: quant blocks as uint8 rows (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K),
F16/BF16 as uint16 bits, F32 as float32; each kernel decodes its format as it multiplies. Any other type
is a BackendError naming it: this backend never falls back to the CPU.

Beyond a Llama's ops it has the classic decoders' and gpt-oss's (engine/backend.py's optional ones): layernorm
(with or without bias, per-head gains), activation (erf and tanh GELU), scale, clamp, swiglu_oai, a partial rope
and the rope attention factor, ALiBi slopes and attention sinks. Not here: a hybrid model's Gated DeltaNet
(host arithmetic on host activations) and the GPTQ/AWQ, ternary and MXFP4 types, each refused by name.

Every kernel is batch-invariant (kernels.py says how), so `batch_invariant = True` and exact eviction
gives the fresh prefill's bits on the device too.

KV caches (CudaKVCache) live on the device, paged: one pool per model shape (KVPages, pages of kernels.PAGE
slots of keys, values and pre-RoPE keys), a page table per cache. The forward pass writes new rows into the
pages and attention reads them through the table; nothing comes back per step. The KV-MMU's moves (drop,
copy_prefix, rerotate) run on the device too; a host mirror is brought up to the device (`sync_host`) only for
digests (receipts) and host_kv.

Sampling (`sample`, sampler.py): the sampler's choice made on the device from logits left there; only the token
ids come back. Bit for bit sampling.Sampler's arithmetic but for exp (sampler.py says what that means).

Without a GPU and driver (and without NUMBA_ENABLE_CUDASIM=1, numba's simulator that the tests use) the
constructor raises BackendError("no CUDA device: …").
"""

from __future__ import annotations

import logging
import threading
import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np

from fakcore.engine.backend import BackendError, Segment, rope_inv_freq
from fakcore.engine.kvcache import KVCache
from fakcore.engine.registry import register_backend
from fakcore.models.config import ModelConfig, RopeScaling

log = logging.getLogger("fak.engine-cuda")

FLOAT_TYPES = ("F32", "F16", "BF16")
QUANT_TYPES = ("Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q4_K", "Q5_K", "Q6_K")  # kernels.QUANT_KERNELS
SUPPORTED = FLOAT_TYPES + QUANT_TYPES
MIN_PAGES = 16  # a KV pool's first size at least


@dataclass(frozen=True)
class DeviceInfo:
    index: int
    name: str
    compute_capability: tuple[int, int]
    total_bytes: float  # inf under the simulator
    free_bytes: float

    def __str__(self) -> str:
        cc = ".".join(map(str, self.compute_capability))
        return (f"cuda:{self.index} {self.name}, compute capability {cc}, "
                f"{self.total_bytes / 2**30:.1f} GiB ({self.free_bytes / 2**30:.1f} GiB free)")


def open_device(index: int = 0) -> DeviceInfo:
    """Select GPU `index` (of those CUDA_VISIBLE_DEVICES shows) for this thread; BackendError when there is none."""
    from numba import cuda

    from fak_engine_cuda.devices import visible

    try:
        count = len(visible())
    except RuntimeError as exc:
        raise BackendError(f"{exc}; engine-cuda does not fall back to the CPU (run engine-cpu instead)") from exc
    if not 0 <= index < count:
        raise BackendError(f"no CUDA device: index {index} asked for, {count} visible (CUDA_VISIBLE_DEVICES)")
    cuda.select_device(index)
    ctx = cuda.current_context()
    dev = ctx.device
    free, total = ctx.get_memory_info()  # the simulator says inf
    name = getattr(dev, "name", b"numba CUDA simulator")
    name = name.decode() if isinstance(name, bytes) else str(name)
    return DeviceInfo(index, name, tuple(dev.compute_capability), float(total), float(free))


@dataclass
class DeviceMatrix:
    """A (rows, cols) weight on the device, in its file's form: `data` is float32 (F32), uint16 bits (F16,
    BF16; decoded through `table`) or uint8 quant blocks, one row per row."""

    qtype: str
    shape: tuple[int, int]
    data: Any
    table: Any  # the f16 / bf16 -> float32 table on the device (F16, BF16 and every quant type's scales)

    @property
    def nbytes(self) -> int:
        return int(self.data.nbytes)


class KVPages:
    """One model shape's KV memory on the device, shared by all its caches: keys, values and pre-RoPE keys as
    pages of kernels.PAGE slots, (pages, L, Hkv, PAGE, D) float32 each (`arrays`, in KVCache._arrays' order).
    A cache takes pages as it grows and gives them back when it is freed; slot j of a cache is row j % PAGE of
    its page table[j // PAGE]. With every page taken the pool grows by half (the old pages copied on the
    device, their numbers kept); a device out of memory then is a BackendError with the numbers."""

    def __init__(self, backend: CudaBackend, shape: tuple[int, int, int], pages: int):
        self.be, self.shape = backend, shape
        self.total = 0
        self.free: list[int] = []  # a stack: the lowest numbers are taken first
        self.arrays: tuple = ()
        self.grow(max(1, pages))

    @property
    def page_bytes(self) -> int:
        n_layers, n_kv, hd = self.shape
        return 3 * 4 * n_layers * n_kv * self.be.k.PAGE * hd

    @property
    def used(self) -> int:
        return self.total - len(self.free)

    def grow(self, pages: int) -> None:
        n_layers, n_kv, hd = self.shape
        cuda = self.be.cuda
        try:
            new = tuple(cuda.device_array((pages, n_layers, n_kv, self.be.k.PAGE, hd), np.float32) for _ in range(3))
        except Exception as exc:
            if "OUT_OF_MEMORY" not in str(exc):
                raise
            raise BackendError(f"KV pages of {self.shape} (layers, kv heads, head dim): out of device memory growing "
                               f"the pool from {self.total} to {pages} pages of {self.be.k.PAGE} slots "
                               f"({self.total * self.page_bytes / 2**20:.1f} to {pages * self.page_bytes / 2**20:.1f} "
                               f"MiB) on {self.be.info}; lower FAK_KV_BUDGET or FAK_MAX_SESSIONS") from exc
        if self.total:  # the pages held so far keep their numbers and bits
            for old, grown in zip(self.arrays, new, strict=True):
                grown[:self.total].copy_to_device(old)
        self.free.extend(range(pages - 1, self.total - 1, -1))
        self.total, self.arrays = pages, new

    def take(self, n: int) -> list[int]:
        short = n - len(self.free)
        if short > 0:
            self.grow(max(self.total + short, self.total * 3 // 2))
        return [self.free.pop() for _ in range(n)]

    def give(self, ids: list[int]) -> None:
        self.free.extend(ids)
        ids.clear()


class CudaKVCache(KVCache):
    """KVCache whose truth is on the device, in its model's KVPages: the forward pass writes a layer's new rows
    into the cache's pages (kernels.store_kv) and attention reads them through the page table; the KV-MMU's
    moves (drop, copy_prefix, rerotate: KVCache's metadata arithmetic around _move_slots, _copy_slots and
    _rotate_slots) run as device kernels, the re-rotation with the forward pass's own rope. Nothing comes back
    per step or per move. The host arrays of engine/kvcache.KVCache are a mirror, brought up to the device
    (`sync_host`, one gather and copy) only for digests and host_kv; slots below `host_upto` hold the device's bits."""

    def __init__(self, backend: CudaBackend, pages: KVPages, n_layers: int, n_kv_heads: int, head_dim: int,
                 **kw: Any):
        self.be, self.pages = backend, pages
        self.page_ids: list[int] = []  # never rebound: the finalizer gives this list back
        self.table = None  # page_ids on the device (int32)
        self.host_upto = 0
        weakref.finalize(self, pages.give, self.page_ids)
        super().__init__(n_layers, n_kv_heads, head_dim, keep_pre_rope=True, **kw)

    def _alloc(self, capacity: int) -> None:
        super()._alloc(capacity)
        want = -(-capacity // self.be.k.PAGE)
        if want > len(self.page_ids):
            self.page_ids.extend(self.pages.take(want - len(self.page_ids)))
            self.table = self.be.cuda.to_device(np.asarray(self.page_ids, np.int32))

    def written(self, start: int) -> None:
        """The forward pass wrote slots from `start` on, on the device alone."""
        self.host_upto = min(self.host_upto, start)

    def write(self, layer: int, start: int, k_pre: np.ndarray, k: np.ndarray, v: np.ndarray) -> None:
        raise BackendError("a cuda KV cache is written on the device by the cuda backend's attention, not from the host")

    # -- the mirror ----------------------------------------------------------------------------------------
    def device_rows(self, start: int, stop: int) -> list[np.ndarray]:
        """Slots start…stop-1 as the pages hold them, on the host: (L, Hkv, n, D) for k, v and k_pre."""
        return [self._gather(pages, self.table, start, stop - start).copy_to_host() for pages in self.pages.arrays]

    def sync_host(self) -> None:
        """The mirror up to the pages for the committed slots (those past host_upto: one gather and copy)."""
        a, n = self.host_upto, self.length
        if n > a:
            for host, rows in zip(self._arrays(), self.device_rows(a, n), strict=True):
                host[:, :, a:n] = rows
        self.host_upto = max(a, n)

    def keys_changed(self, start: int, stop: int) -> None:
        """A move changed slots from `start` on, on the device (the _*_slots below): the mirror is behind there."""
        self.host_upto = min(self.host_upto, start)

    # -- the KV-MMU's moves, on the device (KVCache's metadata arithmetic around them) ------------------------
    def _gather(self, pages: Any, table: Any, start: int, n: int) -> Any:
        """Slots start…start+n-1 of every layer through `table`: a device (L, Hkv, n, D) array."""
        n_layers, n_kv, hd = self.shape
        rows = self.be.cuda.device_array((n_layers, n_kv, n, hd), np.float32)
        if n > 0:
            self.be.k.pages_to_rows[(self.be._g(n), self.be._g(n_layers * n_kv)), (min(hd, 4 * self.be.lanes),)](
                pages, table, start, rows)
        return rows

    def _scatter(self, rows: Any, start: int, pages: Any) -> None:
        """(L, Hkv, n, D) device rows into this cache's slots start…start+n-1."""
        n_layers, n_kv, n, hd = rows.shape
        self.be.k.rows_to_pages[(self.be._g(n), self.be._g(n_layers * n_kv)), (min(hd, 4 * self.be.lanes),)](
            rows, self.table, start, pages)

    def _move_slots(self, src_start: int, src_stop: int, dst: int) -> None:
        n = src_stop - src_start
        if n > 0:  # through a staging array: overlapping ranges move as KVCache's do
            for pages in self.pages.arrays:
                self._scatter(self._gather(pages, self.table, src_start, n), dst, pages)

    def _copy_slots(self, src: KVCache, n: int) -> None:
        if n <= 0:
            return
        if isinstance(src, CudaKVCache):
            for mine, theirs in zip(self.pages.arrays, src.pages.arrays, strict=True):
                self._scatter(self._gather(theirs, src.table, 0, n), 0, mine)
            return
        if src.k_pre is None:
            raise BackendError("a cuda KV cache keeps pre-RoPE keys: it cannot take a prefix from a cache without them")
        for host, pages in zip(src._arrays(), self.pages.arrays, strict=True):  # a host cache's slots up
            self._scatter(self.be.cuda.to_device(np.ascontiguousarray(host[:, :, :n])), 0, pages)

    def _rotate_slots(self, start: int, stop: int, tables: list[Any]) -> None:
        """Layer by layer, the pre-RoPE keys through the forward pass's own rope kernel into the keys."""
        _, n_kv, hd = self.shape
        n = stop - start
        keys, _, pre = self.pages.arrays
        positions = np.arange(start, stop)
        grid, threads = (self.be._g(n), self.be._g(n_kv)), (min(hd, 4 * self.be.lanes),)
        for layer, table in enumerate(tables):
            rows = self.be.cuda.device_array((n, n_kv, hd), np.float32)
            self.be.k.layer_rows[grid, threads](pre, self.table, layer, start, rows)
            self.be.k.rows_to_layer[grid, threads](self.be.rope(rows, positions, table), self.table, layer, start, keys)

    def truncate(self, n: int) -> None:
        super().truncate(n)
        self.host_upto = min(self.host_upto, self.length)

    def host_kv(self) -> tuple[np.ndarray, np.ndarray]:
        self.sync_host()
        return super().host_kv()

    def digest(self) -> str:
        self.sync_host()
        return super().digest()

    @property
    def nbytes(self) -> int:
        """Its pages' device memory (the KV budget counts the device); the host mirror, as large, holds what was
        last pulled."""
        return len(self.page_ids) * self.pages.page_bytes


class CudaRopeTable:
    """cos/sin for positions 0…n-1 (computed as the reference does), on the host and the device."""

    def __init__(self, head_dim: int, theta: float, scaling: RopeScaling):
        self.inv_freq = rope_inv_freq(head_dim, theta, scaling)  # head_dim: the dims rotated (partial: < the head's)
        self.factor = np.float32(scaling.attention_factor)  # longrope / YaRN: cos and sin scaled
        self.n = 0
        self.cos = self.sin = None

    def upto(self, n: int) -> tuple[Any, Any]:
        if n > self.n:
            from numba import cuda

            n = max(n, 2 * self.n, 256)
            freqs = np.outer(np.arange(n, dtype=np.float32), self.inv_freq).astype(np.float32)
            emb = np.concatenate([freqs, freqs], axis=-1)
            cos, sin = np.cos(emb), np.sin(emb)
            if self.factor != 1.0:
                cos, sin = cos * self.factor, sin * self.factor
            self.cos, self.sin = cuda.to_device(cos), cuda.to_device(sin)
            self.n = n
        return self.cos, self.sin


class CudaBackend:
    name = "cuda"
    batch_invariant = True
    attention_features = frozenset({"alibi", "sinks"})  # fakcore/engine/backend.py; kernels.attention
    rope_features = frozenset({"partial", "attention_factor"})  # kernels.rope, CudaRopeTable

    def __init__(self, device: int = 0, lanes: int = 32, max_grid: int = 0):
        """device: the GPU's index among those visible; lanes: threads per dot product (a power of two up to
        kernels.MAX_LANES; part of the numerics: results are batch-invariant for a fixed value); max_grid:
        blocks per grid dimension at most, 0 for one block per work item (kernels loop over the rest, with
        the same numerics: the simulator runs a thread per Python thread, so its tests launch few)."""
        self.info = open_device(device)
        self.index, self.device = device, f"cuda:{device}"
        self._bound = threading.local()  # numba's current device is per thread: set in each that calls
        self._bound.yes = True
        from numba import cuda

        from fak_engine_cuda import kernels

        if lanes < 1 or lanes > kernels.MAX_LANES or lanes & (lanes - 1):
            raise BackendError(f"cuda backend: lanes must be a power of two up to {kernels.MAX_LANES}, not {lanes}")
        self.cuda, self.k, self.lanes, self.max_grid = cuda, kernels, lanes, max_grid
        self.f16 = cuda.to_device(kernels.F16_TABLE)
        self.bf16 = cuda.to_device(kernels.BF16_TABLE)
        self._none = cuda.device_array(1, np.float32)  # the bias of a linear without one
        self._empty = cuda.device_array(0, np.float32)  # the slopes / sinks of attention without them
        self._heads: dict[bytes, Any] = {}  # ALiBi slopes and sink logits on the device, by their host bytes
        self._scratch = cuda.device_array(0, np.float32)  # attention scores, grown on demand
        self._resident: dict[tuple, tuple[Any, DeviceMatrix]] = {}  # embeddings, for a tied LM head
        self._sampler = None  # sampler.DeviceSampler, made at the first `sample`
        self._pages: dict[tuple[int, int, int], KVPages] = {}  # the KV pool of each cache shape
        self.kv_budget = 0  # what the first pool is sized for (plan_kv)
        self.resident_bytes = self.f16.nbytes + self.bf16.nbytes  # what weights (and tables) hold on the device

    def bind(self) -> None:
        """Make this backend's GPU current in the calling thread (the loader's, the scheduler's)."""
        if not getattr(self._bound, "yes", False):
            self.cuda.select_device(self.index)
            self._bound.yes = True

    def free_bytes(self) -> float:
        self.bind()
        return float(self.cuda.current_context().get_memory_info()[0])

    # -- weights ---------------------------------------------------------------------------------------
    def matrix(self, t) -> DeviceMatrix:
        self.bind()
        held = self._resident.get(self._key(t))
        if held is not None and held[0] is t:  # a tied embedding is the LM head: one resident copy
            return held[1]
        return self._upload(t)

    def embedding(self, t) -> DeviceMatrix:
        w = self.matrix(t)
        self._resident[self._key(t)] = (t, w)  # the tensor held too, so that its address names it alone
        return w

    @staticmethod
    def _key(t) -> tuple:
        return (t.source, t.name, t.qtype, tuple(t.shape), t.raw.ctypes.data)

    def _upload(self, t) -> DeviceMatrix:
        if t.qtype not in SUPPORTED:
            raise BackendError(f"{t.source}: tensor {t.name!r}: the cuda backend has no kernel for {t.qtype} "
                               f"(it runs {', '.join(SUPPORTED)})")
        rows = t.shape[0]
        cols = int(np.prod(t.shape[1:], dtype=np.int64))
        if t.qtype == "F32":
            host = np.ascontiguousarray(t.raw.view("<f4").reshape(rows, cols))
        elif t.qtype in ("F16", "BF16"):
            host = np.ascontiguousarray(t.raw.view("<u2").reshape(rows, cols))
        else:
            if cols % self.k.UNIT:
                raise BackendError(f"{t.source}: tensor {t.name!r}: {t.qtype} rows of {cols} elements")
            host = np.ascontiguousarray(t.as_blocks().reshape(rows, -1))
        data = self.cuda.to_device(host)
        self.resident_bytes += data.nbytes
        return DeviceMatrix(t.qtype, (rows, cols), data, self.bf16 if t.qtype == "BF16" else self.f16)

    def vector(self, t, offset: float = 0.0) -> Any:
        self.bind()
        host = np.ascontiguousarray(t.dequantize().reshape(-1) + np.float32(offset), dtype=np.float32)
        self.resident_bytes += host.nbytes
        return self.cuda.to_device(host)

    def dequantize(self, w: DeviceMatrix) -> np.ndarray:
        """Every row of `w` decoded by its format's kernel, on the host (what the tests compare)."""
        return self.to_host(self.embed(w, np.arange(w.shape[0], dtype=np.int64), 1.0))

    # -- ops -------------------------------------------------------------------------------------------
    def _dev(self, x: Any) -> Any:
        """A device array as is; a host one (the MoE block's weighted sum is host arithmetic) copied up."""
        return self.cuda.to_device(np.ascontiguousarray(x, dtype=np.float32)) if isinstance(x, np.ndarray) else x

    def _g(self, n: int) -> int:
        """Blocks for n work items along one grid dimension."""
        return max(1, min(n, self.max_grid) if self.max_grid else n)

    def _flat_grid(self, n: int) -> tuple[int, int]:
        """An elementwise launch: 4 * lanes threads a block, at most 32 * lanes blocks (grid-stride beyond)."""
        block = 4 * self.lanes
        return self._g(min(32 * self.lanes, -(-n // block))), block

    def embed(self, table: DeviceMatrix, ids: np.ndarray, scale: float) -> Any:
        self.bind()  # the first op of every forward pass
        ids_d = self.cuda.to_device(np.ascontiguousarray(ids, dtype=np.int64))
        out = self.cuda.device_array((len(ids), table.shape[1]), np.float32)
        grid, block = (self._g(len(ids)),), (self.lanes,)
        s = np.float32(scale)
        if table.qtype == "F32":
            self.k.lookup_f32[grid, block](table.data, ids_d, s, out)
        elif table.qtype in ("F16", "BF16"):
            self.k.lookup_bits[grid, block](table.data, table.table, ids_d, s, out)
        else:
            self.k.QUANT_KERNELS[table.qtype][1][grid, block](table.data, table.table, ids_d, s, out)
        return out

    def linear(self, x: Any, w: DeviceMatrix, bias: Any = None) -> Any:
        x = self._dev(x)
        n_tok, rows = x.shape[0], w.shape[0]
        if x.shape[1] != w.shape[1]:
            raise BackendError(f"linear: input of width {x.shape[1]} for a {w.qtype} matrix of shape {w.shape}")
        out = self.cuda.device_array((n_tok, rows), np.float32)
        grid, block = (self._g(-(-rows // self.k.ROWS)), self._g(n_tok)), (self.lanes, self.k.ROWS)
        b, has = (self._none, False) if bias is None else (bias, True)
        if w.qtype == "F32":
            self.k.linear_f32[grid, block](w.data, x, b, has, out)
        elif w.qtype in ("F16", "BF16"):
            self.k.linear_bits[grid, block](w.data, w.table, x, b, has, out)
        else:
            self.k.QUANT_KERNELS[w.qtype][0][grid, block](w.data, w.table, x, b, has, out)
        return out

    def rmsnorm(self, x: Any, w: Any, eps: float) -> Any:
        x = self._dev(x)
        shape = tuple(x.shape)  # (the simulator's shapes refuse negative indexes)
        x2 = x.reshape(int(np.prod(shape[:-1], dtype=np.int64)), shape[-1])
        out = self.cuda.device_array(x2.shape, np.float32)
        self.k.rmsnorm[(self._g(x2.shape[0]),), (self.lanes,)](x2, w, np.float32(eps), out)
        return out.reshape(shape)

    def rope_table(self, head_dim: int, theta: float, scaling: RopeScaling) -> CudaRopeTable:
        return CudaRopeTable(head_dim, theta, scaling)

    def rope(self, x: Any, positions: np.ndarray, table: CudaRopeTable) -> Any:
        cos, sin = table.upto(int(positions.max()) + 1)
        out = self.cuda.device_array(x.shape, np.float32)
        pos = self.cuda.to_device(np.ascontiguousarray(positions, dtype=np.int64))
        grid = (self._g(x.shape[0]), self._g(x.shape[1]))
        self.k.rope[grid, (min(x.shape[2], 4 * self.lanes),)](x, pos, cos, sin, out)
        return out

    def host_rope(self, x: np.ndarray, positions: np.ndarray, table: CudaRopeTable) -> np.ndarray:
        """The forward pass's rope (the same kernel, so the same bits) on host rows: a cache's re-rotation."""
        self.bind()
        return self.to_host(self.rope(self.cuda.to_device(np.ascontiguousarray(x, dtype=np.float32)), positions, table))

    def attention(self, q, k_pre, k, v, segments: list[Segment], layer: int, window: int, scale: float,
                  softcap: float, alibi: np.ndarray | None = None, sinks: np.ndarray | None = None) -> Any:
        """Per segment: its new rows into its cache's pages, then one launch of (rows, heads) blocks."""
        n_tok, n_heads, dim = q.shape
        out = self.cuda.device_array(q.shape, np.float32)
        slopes, sink = self._per_head(alibi), self._per_head(sinks)
        for seg in segments:
            cache: CudaKVCache = seg.cache
            if cache.shape[1:] != k.shape[1:] or layer >= cache.shape[0]:
                raise BackendError(f"attention: cache of shape {cache.shape} for layer {layer}, rows {k.shape[1:]}")
            start, n = cache.length, seg.rows.stop - seg.rows.start
            cache.reserve(start + n)  # takes pages (the pool may grow: its arrays are read after)
            cache.written(start)
            pk, pv, pk_pre = cache.pages.arrays
            threads = (min(dim, 4 * self.lanes),)
            self.k.store_kv[(self._g(n), self._g(k.shape[1])), threads](k_pre, k, v, seg.rows.start, n, pk_pre, pk, pv,
                                                                        cache.table, layer, start)
            scores = self._scores(n * n_heads * (start + n)).reshape(n, n_heads, start + n)
            self.k.attention[(self._g(n), self._g(n_heads)), (self.lanes,)](
                q, seg.rows.start, n, pk, pv, cache.table, layer, start, int(window), np.float32(scale),
                np.float32(softcap), slopes, sink, scores, out)
        return out

    def _per_head(self, values: np.ndarray | None) -> Any:
        """A layer's (n_heads,) ALiBi slopes or sink logits on the device, uploaded once (by their bytes); none:
        an empty array."""
        if values is None:
            return self._empty
        key = np.ascontiguousarray(values, np.float32).tobytes()
        if key not in self._heads:
            self._heads[key] = self.cuda.to_device(np.frombuffer(key, np.float32))
        return self._heads[key]

    def _scores(self, size: int) -> Any:
        if size > self._scratch.shape[0]:
            self._scratch = self.cuda.device_array(max(size, 2 * self._scratch.shape[0]), np.float32)
        return self._scratch[:size]

    def gated(self, gate: Any, up: Any, act: str) -> Any:
        out = self.cuda.device_array(gate.shape, np.float32)
        kernel = {"silu": self.k.gated_silu, "gelu_tanh": self.k.gated_gelu_tanh}.get(act)
        if kernel is None:
            raise BackendError(f"cuda backend: no kernel for the activation {act!r}")
        n = out.size
        kernel[self._flat_grid(n)](gate.reshape(n), up.reshape(n), out.reshape(n))
        return out

    def add(self, x: Any, y: Any) -> Any:
        x, y = self._dev(x), self._dev(y)
        out = self.cuda.device_array(x.shape, np.float32)
        n = out.size
        self.k.add_into[self._flat_grid(n)](x.reshape(n), y.reshape(n), out.reshape(n))
        return out

    def softcap(self, x: Any, cap: float) -> Any:
        out = self.cuda.device_array(x.shape, np.float32)
        n = out.size
        self.k.softcap[self._flat_grid(n)](x.reshape(n), np.float32(cap), out.reshape(n))
        return out

    def layernorm(self, x: Any, w: Any, b: Any, eps: float) -> Any:
        """Over the last axis; w and b of its width, or of heads * width for (T, heads, D) input."""
        x = self._dev(x)
        shape = tuple(x.shape)
        x2 = x.reshape(int(np.prod(shape[:-1], dtype=np.int64)), shape[-1])
        out = self.cuda.device_array(x2.shape, np.float32)
        bias, has = (self._none, False) if b is None else (b, True)
        self.k.layernorm[(self._g(x2.shape[0]),), (self.lanes,)](x2, w, bias, has, np.float32(eps), out)
        return out.reshape(shape)

    def activation(self, x: Any, act: str) -> Any:
        kernel = {"gelu": self.k.gelu_erf, "gelu_tanh": self.k.gelu_tanh}.get(act)
        if kernel is None:
            raise BackendError(f"cuda backend: no kernel for the activation {act!r}")
        return self._elementwise(kernel, x)

    def swiglu_oai(self, gate: Any, up: Any, alpha: float, limit: float) -> Any:
        out = self.cuda.device_array(gate.shape, np.float32)
        n = out.size
        self.k.swiglu_oai[self._flat_grid(n)](gate.reshape(n), up.reshape(n), np.float32(alpha), np.float32(limit),
                                              out.reshape(n))
        return out

    def scale(self, x: Any, s: float) -> Any:
        return self._elementwise(self.k.scale, x, np.float32(s))

    def clamp(self, x: Any, c: float) -> Any:
        return self._elementwise(self.k.clamp, x, np.float32(c))

    def _elementwise(self, kernel, x: Any, *args: Any) -> Any:
        x = self._dev(x)
        out = self.cuda.device_array(x.shape, np.float32)
        n = out.size
        kernel[self._flat_grid(n)](x.reshape(n), *args, out.reshape(n))
        return out

    def take_rows(self, x: Any, rows: np.ndarray) -> Any:
        x = self._dev(x)
        rows_d = self.cuda.to_device(np.ascontiguousarray(rows, dtype=np.int64))
        out = self.cuda.device_array((len(rows), x.shape[1]), np.float32)
        self.k.take_rows[(self._g(len(rows)),), (self.lanes,)](x, rows_d, out)
        return out

    def to_host(self, x: Any) -> np.ndarray:
        return x.copy_to_host() if hasattr(x, "copy_to_host") else np.asarray(x, dtype=np.float32)

    # -- sampling (sampler.py) ---------------------------------------------------------------------------
    def sample(self, logits: Any, rows: np.ndarray, draws: list) -> tuple[np.ndarray, np.ndarray]:
        """Sampler's choice for rows `rows` of the device logits, one sampling.Draw each: (tokens, statuses)."""
        self.bind()
        if self._sampler is None:
            from fak_engine_cuda.sampler import SAMPLE_THREADS, DeviceSampler

            self._sampler = DeviceSampler(self, min(SAMPLE_THREADS, 8 * self.lanes))
        return self._sampler(self._dev(logits), rows, draws)

    # -- caches ----------------------------------------------------------------------------------------
    def plan_kv(self, budget: int) -> None:
        """Size the first KV pool made by `new_cache` to hold `budget` bytes (FAK_KV_BUDGET); it grows beyond."""
        self.kv_budget = max(0, int(budget))

    def new_cache(self, config: ModelConfig, capacity: int = 64) -> CudaKVCache:
        """A cache with pages for `capacity` slots from the pool of its shape (made at the first, for the
        plan_kv budget); the pool grows past that."""
        self.bind()
        shape = (config.n_kv_layers, config.n_kv_heads, config.head_dim)
        pages = self._pages.get(shape)
        if pages is None:
            page_bytes = 3 * 4 * config.n_kv_layers * config.n_kv_heads * self.k.PAGE * config.head_dim
            pages = self._pages[shape] = KVPages(self, shape, max(MIN_PAGES, self.kv_budget // page_bytes))
        return CudaKVCache(self, pages, *shape, capacity=capacity, rope=self.host_rope)


register_backend("cuda", CudaBackend)
