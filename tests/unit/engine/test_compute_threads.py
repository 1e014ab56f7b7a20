"""An engine's start-up work leaves no OpenMP team behind (engine/loader.py, in_own_thread).

numba's OpenMP layer gives each thread that starts a parallel region a team of worker threads, alive as
long as that thread is. Warming up in one of asyncio's pooled threads left a second team beside the
scheduler thread's; with more OpenMP threads than cores the runtime throttles spin-waiting for all of them
and a 2-core worker decoded at about half its speed (bench serve, SmolLM2: 33 -> 67 tok/s once fixed).
Here: after in_own_thread the process has the threads it had before; the same warm-up in a pooled thread
leaves its team (which shows the count sees teams at all)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import re
import time
from pathlib import Path

import pytest

import fak_engine_cpu.backend  # noqa: F401  registers "numba"
from fakcore.engine.loader import in_own_thread, load_model, make_backend, warm_up

ROOT = Path(__file__).resolve().parents[3]


def threads() -> int:
    return len(os.listdir("/proc/self/task"))


def settled(want: int, timeout: float = 10.0) -> int:
    """The thread count once it reaches `want` (a finished team's threads exit a moment after their owner)."""
    deadline = time.monotonic() + timeout
    while (n := threads()) != want and time.monotonic() < deadline:
        time.sleep(0.02)
    return n


@pytest.fixture(scope="module")
def model():
    return load_model("synthetic", make_backend("numba", threads=2))


def test_warming_up_in_its_own_thread_leaves_no_team(model):
    before = threads()
    asyncio.run(in_own_thread(warm_up, model))
    assert settled(before) == before
    pool = concurrent.futures.ThreadPoolExecutor(1)
    try:
        pool.submit(warm_up, model).result()
        time.sleep(0.2)
        assert threads() >= before + 2  # the pooled thread and its team's worker stay
    finally:
        pool.shutdown()
    assert settled(before) == before


def test_in_own_thread_returns_and_raises_what_the_function_does():
    assert asyncio.run(in_own_thread(lambda a, b: a + b, 2, 3)) == 5

    def fails() -> None:
        raise ValueError("no such model")

    with pytest.raises(ValueError, match="no such model"):
        asyncio.run(in_own_thread(fails))


@pytest.mark.parametrize("service", ["engine-cpu", "engine-cuda"])
def test_the_engines_load_and_warm_up_in_their_own_threads(service):
    source = (ROOT / "services" / service / "main.py").read_text()
    assert not re.search(r"to_thread\((load_model|warm_up)", source)
    assert "in_own_thread(load_model" in source and "in_own_thread(warm_up, model)" in source


def test_the_scheduler_thread_runs_on_the_configured_thread_count():
    """numba's thread count is per thread: the backend's (FAK_THREADS) must hold on the scheduler's thread."""
    import numba

    from fakcore.engine.scheduler import Scheduler

    model = load_model("synthetic", make_backend("numba", threads=1))
    numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)  # this thread back to every core
    seen = []
    sched = Scheduler(model, lambda event: None)
    sched.start()
    try:
        seen.append(sched.call(numba.get_num_threads).result(timeout=30))
    finally:
        sched.stop()
    assert seen == [1]
