"""engine-cuda: one worker per GPU (CUDA_VISIBLE_DEVICES), same bus subjects as engine-cpu.

The CUDA backend is its own roadmap step (docs/architecture.md §6, after the fast CPU engine). Until it lands this
service refuses to start with an explicit error rather than quietly serving from the CPU.
"""

from __future__ import annotations

from fakcore.engine.backend import BackendError
from fakcore.settings import Settings


async def main(settings: Settings) -> None:
    raise BackendError("engine-cuda: the CUDA backend is not implemented yet; run engine-cpu "
                       "(FAK_BACKEND=reference or numba) instead")
