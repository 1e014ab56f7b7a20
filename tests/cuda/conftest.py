"""tests/cuda: engine-cuda's kernels, backend and service. Without a GPU they run on numba's CUDA simulator.

numba decides simulator or GPU once, when numba.cuda is first imported, from NUMBA_ENABLE_CUDASIM. pytest
imports this conftest before any test module of this folder, so it sets the variable first (unless the
caller chose: bench/gpu_check.sh runs `NUMBA_ENABLE_CUDASIM=0 pytest tests/cuda` on a real GPU). Nothing
outside engine-cuda imports numba.cuda, so this holds inside the full `make test` run as well as alone; if
something ever imports it first in the other mode, every test here fails with the one line saying so.
The variable stays set for the rest of the run: it matters to numba.cuda alone, and the tests here that
start processes set their environment themselves.
"""

from __future__ import annotations

import os
import sys
import threading
import traceback
from collections.abc import Iterator

import pytest

os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")
SIMULATED = os.environ["NUMBA_ENABLE_CUDASIM"] == "1"

import numba.core.config  # noqa: E402

numba.core.config.reload_config()  # numba (CPU) may already be imported by another folder's tests
_imported_before = "numba.cuda" in sys.modules

from numba import cuda  # noqa: E402

_mode = cuda.jit.__module__.startswith("numba.cuda.simulator")
MISMATCH = "" if _mode == SIMULATED else (
    f"numba.cuda was imported {'with' if _mode else 'without'} the simulator before tests/cuda set "
    f"NUMBA_ENABLE_CUDASIM={os.environ['NUMBA_ENABLE_CUDASIM']}{' (by an earlier import)' if _imported_before else ''}: "
    "run `NUMBA_ENABLE_CUDASIM=1 pytest tests/cuda` on its own")


if SIMULATED and _mode:
    # The simulator hands each thread of a block the block's shared array by looking it up, and making it when
    # missing, without a lock (numba/cuda/simulator/kernelapi.py FakeCUDAShared.array): two threads that both
    # miss make two arrays, each then reduces over its own, and a kernel gives wrong, load-dependent bits
    # (seen as rare failures of bit-for-bit tests in the full run). The same lookup, under a lock; the caller
    # is still the frame that asks (this function replaces the method, adding no frame).
    import numpy as np
    from numba.core import types
    from numba.cuda.simulator import kernelapi
    from numba.np import numpy_support

    _SHARED_LOCK = threading.Lock()
    _unlocked_array = kernelapi.FakeCUDAShared.array

    def _shared_array(self, shape, dtype):
        if shape == 0:  # dynamic shared memory: one buffer, nothing to make
            return _unlocked_array(self, shape, dtype)
        if isinstance(dtype, types.Type):
            dtype = numpy_support.as_dtype(dtype)
        caller = tuple(traceback.extract_stack(sys._getframe())[-2][0:2])
        with _SHARED_LOCK:
            res = self._allocations.get(caller)
            if res is None:
                res = self._allocations[caller] = np.empty(shape, dtype)
        return res

    kernelapi.FakeCUDAShared.array = _shared_array


@pytest.fixture(autouse=True)
def _cuda_mode() -> Iterator[None]:
    if MISMATCH:
        pytest.fail(MISMATCH)
    if not SIMULATED:
        yield
        return
    # The simulator's block manager spins on the GIL while its threads run: a short switch interval hands
    # the GIL over 50 times sooner (a tiny forward pass: 3.3 s -> 0.5 s). Restored after each test.
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-4)
    try:
        yield
    finally:
        sys.setswitchinterval(before)
