"""engine-cuda: one worker per GPU, the same worker and bus subjects as engine-cpu, on the cuda backend.

    device = open_device(index)                       # no GPU or driver: refuse at once, before the bus
    model  = load_model(FAK_MODEL, CudaBackend(index))  # weights uploaded in their file's form
    check_memory(...)                                 # weights + KV budget + a step's buffers against the device
    warm_up(model)                                    # every kernel compiled before the first request
    warm_up_sampling(backend, vocab, max_sessions)    # the sampling kernel too, its scratch for the widest batch
    worker = EngineWorker(model, "fak-cuda")          # announces device "cuda:N"

One process per GPU: CUDA_VISIBLE_DEVICES picks it (compose and Kubernetes give each container its one
GPU, which is then index 0), or the `cuda_device` setting (FAK_CUDA_DEVICE, default 0). It never
serves from the CPU: without a device it exits with status 1 and one line saying why.
"""

from __future__ import annotations

import logging
import sys
import time

import numpy as np

import fak_engine_cuda.backend  # noqa: F401  registers "cuda"
from fak_engine_cuda.backend import CudaBackend, DeviceInfo, open_device
from fakcore.engine.backend import BackendError
from fakcore.engine.loader import describe, in_own_thread, load_model, make_backend, warm_up
from fakcore.engine.sampling import Draw
from fakcore.engine.scheduler import PREFILL_CHUNK
from fakcore.engine.worker import EngineWorker
from fakcore.models.config import ModelConfig
from fakcore.service import Service, run_service
from fakcore.settings import Settings

ENGINE_KIND = "fak-cuda"
KV_BYTES = 3 * 4  # a cache's float32 k, v and pre-RoPE keys, per layer, kv head and dim (engine/kvcache.py)
KV_ON_DEVICE = 1.0  # of a cache's bytes: the device's pages hold k, v and the pre-RoPE keys (backend.KVPages)
HEADROOM = 0.9  # of the free memory the KV budget and step buffers may plan on (the allocator's slack needs the rest)

log = logging.getLogger("fak.engine-cuda")


def device_index(settings: Settings) -> int:
    """The GPU this worker serves, among those CUDA_VISIBLE_DEVICES shows."""
    return settings.cuda_device


def step_buffers(cfg: ModelConfig, rows: int, chunk: int, budget: int) -> dict[str, int]:
    """The device memory a step allocates beside the weights and the KV caches, at its largest for a worker
    decoding `rows` sequences with `chunk` prompt tokens a step (Scheduler: max_sessions, prefill_chunk):

        logits        (rows, vocab) float32, left on the device for the sampler
        sampling      the sampler's scratch for `rows` rows and a launch's arrays (sampler.device_bytes)
        attention     the backend's scores scratch, (chunk, heads, context) float32 for a chunk at the end of
                      the longest context the KV budget holds (a longer one is past what the budget plans for)
        activations   one layer's arrays for chunk + rows tokens (x, norms, q k v and their rotations, the
                      attention's output, the MLP's gate, up and product), float32

    An estimate where it must be: numba frees an array some steps after its last use, the scores scratch
    grows by doubling; HEADROOM keeps the room for that."""
    from fak_engine_cuda.sampler import device_bytes

    tokens = chunk + rows
    kv_row = KV_BYTES * cfg.n_layers * cfg.n_kv_heads * cfg.head_dim  # a token's cache on the host
    context = min(cfg.context_length or chunk, max(chunk, budget // kv_row))
    qkv = (cfg.n_heads + 2 * cfg.n_kv_heads) * cfg.head_dim
    ffn = max(cfg.ffn_dim, cfg.n_experts_used * cfg.expert_ffn_dim + cfg.shared_expert_ffn_dim)
    layer = 7 * cfg.dim + qkv + (2 * cfg.n_heads + cfg.n_kv_heads) * cfg.head_dim + 3 * ffn
    return {"logits": rows * cfg.vocab_size * 4, "sampling": device_bytes(rows, cfg.vocab_size),
            "attention": chunk * cfg.n_heads * context * 4, "activations": tokens * layer * 4}


def check_memory(info: DeviceInfo, weights: int, budget: int, free_after_load: float, model: str,
                 step: dict[str, int], rows: int) -> None:
    """Refuse a model whose KV budget and step buffers (step_buffers, for `rows` sequences) do not fit beside
    its weights, with the numbers."""
    kv = int(budget * KV_ON_DEVICE)
    need = kv + sum(step.values())
    if need > free_after_load * HEADROOM:
        gib, mib = 2**30, 2**20
        parts = ", ".join(f"{name} {size / mib:.1f} MiB" for name, size in step.items())
        raise BackendError(
            f"{model} does not fit on {info.name} (cuda:{info.index}, {info.total_bytes / gib:.2f} GiB): weights "
            f"{weights / gib:.2f} GiB resident, {free_after_load / gib:.2f} GiB free after them; KV budget "
            f"{budget / gib:.2f} GiB needs {kv / gib:.2f} GiB on the device and a step of {rows} sequences "
            f"{sum(step.values()) / gib:.2f} GiB ({parts}): {need / gib:.2f} GiB, more than {HEADROOM:.0%} of "
            "what is free; lower FAK_KV_BUDGET or FAK_MAX_SESSIONS, or serve a smaller model")


def warm_up_sampling(backend: CudaBackend, vocab: int, rows: int = 2) -> None:
    """One sampled row and greedy ones through the sampling kernel, `rows` in all (at least 2): the kernel is
    compiled and the sampler's scratch allocated for the widest batch before a request."""
    rows = max(2, rows)
    logits = backend.cuda.to_device(np.zeros((rows, vocab), np.float32))
    draws = [Draw(False, 1.0, 0, 1.0, 0.5)] + [Draw(True, 0.0, 0, 1.0, 0.0)] * (rows - 1)
    backend.sample(logits, np.arange(rows), draws)


async def bootstrap(svc: Service) -> None:
    s = svc.settings
    index = device_index(s)
    t0 = time.perf_counter()
    backend = make_backend("cuda", device=index)
    log.info("engine-cuda on %s", backend.info)
    svc.starting = f"loading {s.model} onto cuda:{index}"
    try:
        model = await in_own_thread(load_model, s.model, backend, s.cache_dir)
    except Exception as exc:
        if "OUT_OF_MEMORY" not in str(exc):
            raise
        raise BackendError(f"{s.model}: out of device memory while uploading its weights to {backend.info} "
                           f"({backend.resident_bytes / 2**30:.2f} GiB placed before it failed)") from exc
    free = backend.free_bytes()
    step = step_buffers(model.config, s.max_sessions, PREFILL_CHUNK, s.kv_budget_bytes)
    check_memory(backend.info, backend.resident_bytes, s.kv_budget_bytes, free, model.name, step, s.max_sessions)
    backend.plan_kv(s.kv_budget_bytes)  # the KV pool's pages for the budget, taken at the first cache
    log.info("loaded %s in %.2fs: %.1f MiB of weights on cuda:%d, %.2f GiB free", describe(model),
             time.perf_counter() - t0, backend.resident_bytes / 2**20, index, free / 2**30)
    svc.starting = "warming up the cuda kernels (a first start compiles them)"
    t0 = time.perf_counter()
    await in_own_thread(warm_up, model)
    await in_own_thread(warm_up_sampling, backend, model.config.vocab_size, s.max_sessions)
    log.info("%s: warm in %.2fs", model.name, time.perf_counter() - t0)
    await EngineWorker(svc, model, ENGINE_KIND).start()


async def main(settings: Settings) -> int:
    try:  # before the bus: a machine without a GPU is told so at once, not after a connect
        open_device(device_index(settings))
    except BackendError as exc:
        print(f"fak engine-cuda: {exc}", file=sys.stderr)
        return 1
    return await run_service("engine-cuda", settings, bootstrap)
