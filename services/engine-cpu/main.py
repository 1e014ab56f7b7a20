"""engine-cpu: load the model, then serve it on the bus until told to stop.

    model  = load_model(FAK_MODEL, backend=FAK_BACKEND)   # reference (numpy f32) or numba
    warm_up(model)                                        # numba compiles (or loads from its cache) every kernel
    worker = EngineWorker(model)                          # queue group per model + a subject per worker

Until the worker subscribes it is neither announced (so no gateway routes to it) nor healthy (/healthz says
what it is doing): the first request never waits for a compile.
"""

from __future__ import annotations

import logging
import time

import fak_engine_cpu.backend  # noqa: F401  registers "numba"
from fakcore.engine.backend import BackendError
from fakcore.engine.loader import describe, in_own_thread, load_model, make_backend, warm_up
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
    svc.starting = f"loading {s.model}"
    model = await in_own_thread(load_model, s.model, backend, s.cache_dir, s.state_checkpoint_every)
    log.info("loaded %s in %.2fs", describe(model), time.perf_counter() - t0)
    svc.starting = f"warming up {model.backend.name} (compiling its kernels on a first start)"
    log.info("%s: warming up the %s kernels (a first start on this machine compiles them, ~10-60 s; cached after)",
             model.name, model.backend.name)
    t0 = time.perf_counter()
    await in_own_thread(warm_up, model)
    log.info("%s: warm in %.2fs", model.name, time.perf_counter() - t0)
    await EngineWorker(svc, model, ENGINE_KIND).start()


async def main(settings: Settings) -> int:
    return await run_service("engine-cpu", settings, bootstrap)
