"""engine-cuda: one worker per GPU, the same worker and bus subjects as engine-cpu, on the cuda backend.

    device = open_device(index)                       # no GPU or driver: refuse at once, before the bus
    model  = load_model(FAK_MODEL, CudaBackend(index))  # weights uploaded in their file's form
    check_memory(...)                                 # weights + KV budget against the device, numbers in the error
    warm_up(model)                                    # every kernel compiled before the first request
    warm_up_sampling(backend, vocab)                  # the sampling kernel too (sampler.py)
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
from fakcore.engine.worker import EngineWorker
from fakcore.service import Service, run_service
from fakcore.settings import Settings

ENGINE_KIND = "fak-cuda"
KV_ON_DEVICE = 2 / 3  # of a cache's bytes: the device holds k and v, the host also the pre-RoPE keys
HEADROOM = 0.9  # of the free memory the KV budget may plan on (activations and scratch need the rest)

log = logging.getLogger("fak.engine-cuda")


def device_index(settings: Settings) -> int:
    """The GPU this worker serves, among those CUDA_VISIBLE_DEVICES shows."""
    return settings.cuda_device


def check_memory(info: DeviceInfo, weights: int, budget: int, free_after_load: float, model: str) -> None:
    """Refuse a model whose KV budget does not fit beside its weights, with the numbers."""
    kv = int(budget * KV_ON_DEVICE)
    if kv > free_after_load * HEADROOM:
        gib = 2**30
        raise BackendError(
            f"{model} does not fit on {info.name} (cuda:{info.index}, {info.total_bytes / gib:.2f} GiB): weights "
            f"{weights / gib:.2f} GiB resident, {free_after_load / gib:.2f} GiB free after them, KV budget "
            f"{budget / gib:.2f} GiB needs {kv / gib:.2f} GiB on the device (at most {HEADROOM:.0%} of what is free); "
            "lower FAK_KV_BUDGET or serve a smaller model")


def warm_up_sampling(backend: CudaBackend, vocab: int) -> None:
    """One sampled and one greedy row through the sampling kernel, so that it is compiled before a request."""
    logits = backend.cuda.to_device(np.zeros((2, vocab), np.float32))
    backend.sample(logits, np.arange(2), [Draw(False, 1.0, 0, 1.0, 0.5), Draw(True, 0.0, 0, 1.0, 0.0)])


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
    check_memory(backend.info, backend.resident_bytes, s.kv_budget_bytes, free, model.name)
    log.info("loaded %s in %.2fs: %.1f MiB of weights on cuda:%d, %.2f GiB free", describe(model),
             time.perf_counter() - t0, backend.resident_bytes / 2**20, index, free / 2**30)
    svc.starting = "warming up the cuda kernels (a first start compiles them)"
    t0 = time.perf_counter()
    await in_own_thread(warm_up, model)
    await in_own_thread(warm_up_sampling, backend, model.config.vocab_size)
    log.info("%s: warm in %.2fs", model.name, time.perf_counter() - t0)
    await EngineWorker(svc, model, ENGINE_KIND).start()


async def main(settings: Settings) -> int:
    try:  # before the bus: a machine without a GPU is told so at once, not after a connect
        open_device(device_index(settings))
    except BackendError as exc:
        print(f"fak engine-cuda: {exc}", file=sys.stderr)
        return 1
    return await run_service("engine-cuda", settings, bootstrap)
