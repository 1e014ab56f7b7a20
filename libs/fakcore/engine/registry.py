"""Backends by name: each backend's module registers itself on import; the loader looks them up.

Shared code imports no service. The reference backend is shared code (engine/reference.py, which the loader
imports); a fast one lives with the service that runs it, and that service imports its backend module at
start: engine-cpu's `fak_engine_cpu.backend` registers "numba", engine-cuda's will register "cuda".
"""

from __future__ import annotations

from collections.abc import Callable

from fakcore.engine.backend import Backend

BackendFactory = Callable[..., Backend]  # the backend's options (threads=…, activations=…) -> a Backend

BACKENDS: dict[str, BackendFactory] = {}  # name (FAK_BACKEND) -> factory, filled by register_backend


def register_backend(name: str, factory: BackendFactory) -> None:
    BACKENDS[name] = factory
