"""engine-cuda refuses clearly without a device, never falls back to the CPU, and checks memory at start."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from fak_engine_cuda.backend import DeviceInfo
from fak_engine_cuda.main import ENGINE_KIND, check_memory
from fakcore.engine.backend import BackendError
from fakcore.engine.loader import make_backend
from tests.cuda.support import cuda_backend


def no_gpu_env() -> dict[str, str]:
    """This environment without the simulator and with every GPU hidden: a machine with none."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FAK_", "NUMBA_"))}
    env["CUDA_VISIBLE_DEVICES"] = ""
    return env


def test_the_backend_refuses_without_a_device():
    code = "from fak_engine_cuda.backend import CudaBackend\nCudaBackend()"
    run = subprocess.run([sys.executable, "-c", code], env=no_gpu_env(), capture_output=True, text=True, timeout=120)
    assert run.returncode != 0
    assert "BackendError: no CUDA device:" in run.stderr, run.stderr[-2000:]


def test_the_service_refuses_at_once_with_one_line():
    run = subprocess.run([sys.executable, "-m", "fak_engine_cuda"], env=no_gpu_env(), capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 1, run.stderr[-2000:]
    assert run.stderr.startswith("fak engine-cuda: no CUDA device:") and "Traceback" not in run.stderr
    assert "does not fall back to the CPU" in run.stderr


def test_the_backend_names_its_device():
    be = cuda_backend()
    assert make_backend("cuda", lanes=4).device == be.device == "cuda:0" and be.name == "cuda" and be.batch_invariant
    assert be.info.index == 0 and be.info.name and len(be.info.compute_capability) == 2
    assert ENGINE_KIND == "fak-cuda"
    with pytest.raises(BackendError, match="lanes must be a power of two"):
        make_backend("cuda", lanes=3)


def test_a_kv_budget_that_does_not_fit_is_an_error_with_the_numbers():
    gpu = DeviceInfo(0, "Test GPU", (8, 0), total_bytes=8 * 2**30, free_bytes=8 * 2**30)
    check_memory(gpu, weights=2 * 2**30, budget=4 * 2**30, free_after_load=6 * 2**30, model="m")  # 2.67 GiB on device
    with pytest.raises(BackendError) as err:
        check_memory(gpu, weights=2 * 2**30, budget=12 * 2**30, free_after_load=6 * 2**30, model="m")
    msg = str(err.value)
    for part in ("m does not fit on Test GPU", "8.00 GiB", "weights 2.00 GiB", "6.00 GiB free", "KV budget 12.00 GiB",
                 "needs 8.00 GiB", "FAK_KV_BUDGET"):
        assert part in msg, msg
