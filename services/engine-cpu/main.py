"""engine-cpu: load the model, then serve it on the bus until told to stop.

    model  = load_model(FAK_MODEL, backend=FAK_BACKEND)   # reference (numpy f32) or numba
    worker = EngineWorker(model)                          # queue group per model + a subject per worker
"""

from __future__ import annotations

import asyncio
import logging
import time

import fak_engine_cpu.backend  # noqa: F401  registers "numba"
from fakcore.engine.backend import BackendError
from fakcore.engine.loader import describe, load_model, make_backend
from fakcore.engine.worker import EngineWorker
from fakcore.service import Service, run_service
from fakcore.settings import Settings

ENGINE_KIND = "fak-cpu"
CPU_BACKENDS = ("reference", "numba")

log = logging.getLogger("fak.engine-cpu")


async def bootstrap(svc: Service) -> None:
    s = svc.settings
    if s.backend not in CPU_BACKENDS:
        raise BackendError(f"engine-cpu runs backends {', '.join(CPU_BACKENDS)}, not {s.backend!r} (use engine-cuda for cuda)")
    t0 = time.perf_counter()
    backend = (make_backend(s.backend, threads=s.threads, activations=s.activations) if s.backend == "numba"
               else make_backend(s.backend))
    model = await asyncio.to_thread(load_model, s.model, backend, s.cache_dir)
    log.info("loaded %s in %.2fs", describe(model), time.perf_counter() - t0)
    await EngineWorker(svc, model, ENGINE_KIND).start()


async def main(settings: Settings) -> int:
    return await run_service("engine-cpu", settings, bootstrap)
