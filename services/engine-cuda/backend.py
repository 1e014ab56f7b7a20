"""The CUDA backend: numba.cuda kernels (kernels.py) over weights that stay on one GPU in their file's form.

Implements fakcore.engine.backend.Backend. Activations are device arrays; `to_host` brings the logits back.
Weights are uploaded once as stored: quant blocks as uint8 rows (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K),
F16/BF16 as uint16 bits, F32 as float32; each kernel decodes its format as it multiplies. Any other type
is a BackendError naming it: this backend never falls back to the CPU.

Every kernel is batch-invariant (kernels.py says how), so `batch_invariant = True` and exact eviction
gives the fresh prefill's bits on the device too.

KV caches (CudaKVCache): the host arrays of engine/kvcache.KVCache stay the truth that the KV-MMU moves
(drop, copy_prefix, rerotate, digests); the device holds a copy of k and v that attention reads. The
forward pass writes both (the new rows are copied to the host once per layer); every move of host memory
re-uploads the cache (`keys_changed`). A device-resident, paged pool is the next step.

Sampling (`sample`, sampler.py): the sampler's choice made on the device from logits left there; only the token
ids come back. Bit for bit sampling.Sampler's arithmetic but for exp (sampler.py says what that means).

Without a GPU and driver (and without NUMBA_ENABLE_CUDASIM=1, numba's simulator that the tests use) the
constructor raises BackendError("no CUDA device: …").
"""

from __future__ import annotations

import logging
import threading
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


class CudaKVCache(KVCache):
    """KVCache plus device copies of k and v, (L, Hkv, S, D) each, the layout attention reads. The host arrays
    stay the cache's truth; the forward pass writes both, every other move re-uploads (`keys_changed`)."""

    def _alloc(self, capacity: int) -> None:
        from numba import cuda

        super()._alloc(capacity)
        self.dk = cuda.device_array(self.k.shape, np.float32)
        self.dv = cuda.device_array(self.v.shape, np.float32)

    def reserve(self, total: int) -> None:
        grows = total > self.capacity
        super().reserve(total)
        if grows:
            self._upload()

    def keys_changed(self, start: int, stop: int) -> None:
        if stop > start:  # a drop or copy moved v as well: both go up
            self._upload()

    def _upload(self) -> None:
        self.dk.copy_to_device(self.k)
        self.dv.copy_to_device(self.v)


class CudaRopeTable:
    """cos/sin for positions 0…n-1 (computed as the reference does), on the host and the device."""

    def __init__(self, head_dim: int, theta: float, scaling: RopeScaling):
        self.inv_freq = rope_inv_freq(head_dim, theta, scaling)
        self.n = 0
        self.cos = self.sin = None

    def upto(self, n: int) -> tuple[Any, Any]:
        if n > self.n:
            from numba import cuda

            n = max(n, 2 * self.n, 256)
            freqs = np.outer(np.arange(n, dtype=np.float32), self.inv_freq).astype(np.float32)
            emb = np.concatenate([freqs, freqs], axis=-1)
            self.cos, self.sin = cuda.to_device(np.cos(emb)), cuda.to_device(np.sin(emb))
            self.n = n
        return self.cos, self.sin


class CudaBackend:
    name = "cuda"
    batch_invariant = True
    attention_features = frozenset({"alibi"})  # fakcore/engine/backend.py; kernels.attention

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
        self._no_alibi = cuda.device_array(0, np.float32)  # the slopes of attention without ALiBi
        self._alibi: dict[bytes, Any] = {}  # ALiBi slopes on the device, by their host bytes
        self._scratch = cuda.device_array(0, np.float32)  # attention scores, grown on demand
        self._resident: dict[tuple, tuple[Any, DeviceMatrix]] = {}  # embeddings, for a tied LM head
        self._sampler = None  # sampler.DeviceSampler, made at the first `sample`
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
                  softcap: float, alibi: np.ndarray | None = None) -> Any:
        """Per segment: its new rows into its cache (device and host), then one launch of (rows, heads) blocks."""
        n_tok, n_heads, dim = q.shape
        out = self.cuda.device_array(q.shape, np.float32)
        host = [a.copy_to_host() for a in (k_pre, k, v)]  # the host mirror's new rows, one copy per layer
        slopes = self._no_alibi
        if alibi is not None:
            key = np.ascontiguousarray(alibi, np.float32).tobytes()
            if key not in self._alibi:
                self._alibi[key] = self.cuda.to_device(np.frombuffer(key, np.float32))
            slopes = self._alibi[key]
        for seg in segments:
            cache: CudaKVCache = seg.cache
            if cache.shape[1:] != k.shape[1:] or layer >= cache.shape[0]:
                raise BackendError(f"attention: cache of shape {cache.shape} for layer {layer}, rows {k.shape[1:]}")
            start, n = cache.length, seg.rows.stop - seg.rows.start
            cache.write(layer, start, *(a[seg.rows] for a in host))  # reserves (and re-uploads) as it grows
            threads = (min(dim, 4 * self.lanes),)
            self.k.store_kv[(self._g(n), self._g(k.shape[1])), threads](k, v, seg.rows.start, n, cache.dk, cache.dv,
                                                                        layer, start)
            scores = self._scores(n * n_heads * (start + n)).reshape(n, n_heads, start + n)
            self.k.attention[(self._g(n), self._g(n_heads)), (self.lanes,)](
                q, seg.rows.start, n, cache.dk, cache.dv, layer, start, int(window), np.float32(scale),
                np.float32(softcap), slopes, scores, out)
        return out

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
    def new_cache(self, config: ModelConfig) -> CudaKVCache:
        self.bind()
        return CudaKVCache(config.n_layers, config.n_kv_heads, config.head_dim, rope=self.host_rope)


register_backend("cuda", CudaBackend)
