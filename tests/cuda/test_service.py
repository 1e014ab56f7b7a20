"""engine-cuda refuses clearly without a device, never falls back to the CPU, and checks memory at start: weights,
the KV budget and a step's buffers (logits, the sampler's scratch, attention scores, activations)."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import weakref

import numpy as np
import pytest

from fak_engine_cuda.backend import CudaBackend, DeviceInfo
from fak_engine_cuda.main import ENGINE_KIND, check_memory, step_buffers, warm_up_sampling
from fak_engine_cuda.sampler import device_bytes
from fakcore.engine.backend import BackendError, Segment
from fakcore.engine.loader import make_backend
from fakcore.engine.sampling import Draw
from tests.cuda.conftest import SIMULATED
from tests.cuda.support import TINY, cuda_backend, tiny_tensors, transformer


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
    check_memory(gpu, weights=2 * 2**30, budget=4 * 2**30, free_after_load=6 * 2**30, model="m", step={}, rows=16)
    with pytest.raises(BackendError) as err:
        check_memory(gpu, weights=2 * 2**30, budget=12 * 2**30, free_after_load=6 * 2**30, model="m", step={}, rows=16)
    msg = str(err.value)
    for part in ("m does not fit on Test GPU", "8.00 GiB", "weights 2.00 GiB", "6.00 GiB free", "KV budget 12.00 GiB",
                 "needs 12.00 GiB", "FAK_KV_BUDGET"):
        assert part in msg, msg


def test_the_step_buffers_count_against_the_device_with_the_kv_budget():
    gpu = DeviceInfo(0, "Test GPU", (8, 0), total_bytes=8 * 2**30, free_bytes=8 * 2**30)
    step = {"logits": 2**29, "sampling": 3 * 2**29}  # 2 GiB: with the 3 GiB of KV pages, past 90% of 5 GiB free
    check_memory(gpu, weights=2 * 2**30, budget=3 * 2**30, free_after_load=5 * 2**30, model="m", step={}, rows=16)
    with pytest.raises(BackendError) as err:
        check_memory(gpu, weights=2 * 2**30, budget=3 * 2**30, free_after_load=5 * 2**30, model="m", step=step, rows=16)
    msg = str(err.value)
    for part in ("needs 3.00 GiB", "a step of 16 sequences 2.00 GiB", "logits 512.0 MiB", "sampling 1536.0 MiB",
                 ": 5.00 GiB", "FAK_MAX_SESSIONS"):
        assert part in msg, msg


def test_the_step_buffers_are_what_a_step_allocates():
    cfg = dataclasses.replace(TINY, vocab_size=1000)  # padded to 1024 for the sort
    step = step_buffers(cfg, rows=16, chunk=256, budget=2**20)
    kv_row = 3 * 4 * cfg.n_layers * cfg.n_kv_heads * cfg.head_dim  # 384 bytes a token: 1 MiB holds 2730
    assert step["logits"] == 16 * 1000 * 4
    assert step["sampling"] == 16 * (1024 * 16 + 1000 * 8) + 16 * 64 == device_bytes(16, 1000)
    assert step["attention"] == 256 * cfg.n_heads * 256 * 4  # the context (256) holds less than the budget
    long = dataclasses.replace(cfg, context_length=10**6)
    assert step_buffers(long, 16, 256, 2**20)["attention"] == 256 * cfg.n_heads * (2**20 // kv_row) * 4  # the budget's
    assert step_buffers(long, 16, 256, 64 * kv_row)["attention"] == 256 * cfg.n_heads * 256 * 4  # at least a chunk
    layer = 7 * 32 + (2 + 2) * 16 + (4 + 1) * 16 + 3 * 64  # dim 32, 2 heads and 1 kv head of 16, ffn 64
    assert step["activations"] == (256 + 16) * layer * 4


def test_the_sampling_warm_up_allocates_the_scratch_for_the_widest_batch():
    be = CudaBackend(lanes=1, max_grid=1)
    warm_up_sampling(be, 40, rows=5)
    keys, ids, probs = be._sampler._scratch
    assert keys.shape == ids.shape == (5, 64) and probs.shape == (5, 40)
    assert keys.nbytes + ids.nbytes + probs.nbytes + 5 * 64 == device_bytes(5, 40)


class Counted:
    """numba.cuda, counting the bytes alive of the arrays made through it (on the simulator an array is numpy's,
    freed with its last view)."""

    def __init__(self, cuda_):
        self._cuda, self.live, self.peak = cuda_, 0, 0

    def __getattr__(self, name):
        return getattr(self._cuda, name)

    def _count(self, a):
        self.live += a.nbytes
        self.peak = max(self.peak, self.live)
        weakref.finalize(a._ary, self._freed, a.nbytes)
        return a

    def _freed(self, n: int) -> None:
        self.live -= n

    def device_array(self, *args, **kwargs):
        return self._count(self._cuda.device_array(*args, **kwargs))

    def to_device(self, *args, **kwargs):
        return self._count(self._cuda.to_device(*args, **kwargs))


@pytest.mark.skipif(not SIMULATED, reason="counts the simulator's arrays (numpy's), not a GPU's")
def test_a_step_allocates_no_more_than_its_buffers_say():
    be = CudaBackend(lanes=1, max_grid=1)
    tf = transformer(be, tiny_tensors())
    a, b = tf.new_cache(), tf.new_cache()
    tf.forward(np.arange(8, dtype=np.int64), [Segment(a, slice(0, 8))])
    tf.forward(np.arange(3, dtype=np.int64), [Segment(b, slice(0, 3))])
    be.cuda = counted = Counted(be.cuda)  # a step of 2 sequences: a chunk of 8 at positions 8-15, one decoding
    try:
        logits = tf.forward(np.arange(9, dtype=np.int64), [Segment(a, slice(0, 8)), Segment(b, slice(8, 9))],
                            np.array([7, 8]), host=False)
        assert logits.nbytes == 2 * TINY.vocab_size * 4
        kv_row = 3 * 4 * TINY.n_layers * TINY.n_kv_heads * TINY.head_dim
        step = step_buffers(TINY, rows=2, chunk=8, budget=16 * kv_row)  # the budget: a context of 16
        forward_peak = counted.peak
        assert 0.5 * (step["logits"] + step["attention"] + step["activations"]) < forward_peak
        assert forward_peak <= step["logits"] + step["attention"] + step["activations"]
        counted.peak = counted.live
        be.sample(logits, np.arange(2), [Draw(False, 1.0, 0, 1.0, 0.5), Draw(False, 1.0, 5, 0.9, 0.5)])
        assert counted.peak - counted.live <= 64 * 2  # a launch's own arrays
        keys, ids, probs = be._sampler._scratch
        assert keys.nbytes + ids.nbytes + probs.nbytes + 64 * 2 == step["sampling"]
    finally:
        be.cuda = counted._cuda
