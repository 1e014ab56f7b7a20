"""`fak up --cuda`: an engine-cuda per visible GPU in the launcher's plan (devices given, no GPU needed), and on
a machine without a GPU or driver a clear refusal before anything starts, with nothing left running."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid

import pytest

from fakcore.launcher import START_ORDER, StartupError, Topology, cuda_devices, engine_services
from fakcore.settings import Settings


def two_gpus(environ) -> list[str]:
    return ["GPU A", "GPU B"]


def settings() -> Settings:
    return Settings.load(env={}, screen_judge="off")


def test_the_devices_are_those_cuda_visible_devices_names_else_every_gpu_the_driver_shows():
    seen = []

    def probe(environ) -> list[str]:
        seen.append(dict(environ))
        return ["GPU A", "GPU B", "GPU C"]

    assert cuda_devices({"CUDA_VISIBLE_DEVICES": "0,1"}, probe) == ("0", "1")
    assert seen[-1] == {"CUDA_VISIBLE_DEVICES": "0,1"}  # the probe counts under the same variable
    assert cuda_devices({"CUDA_VISIBLE_DEVICES": " 2, GPU-5e1f "}, probe) == ("2", "GPU-5e1f")
    assert cuda_devices({}, probe) == ("0", "1", "2")


@pytest.mark.parametrize("environ, probe, message", [
    ({"CUDA_VISIBLE_DEVICES": ""}, two_gpus, "CUDA_VISIBLE_DEVICES is set and empty, which hides every GPU"),
    ({"CUDA_VISIBLE_DEVICES": "0,1,7"}, two_gpus, "CUDA_VISIBLE_DEVICES=0,1,7 names 3 GPUs, the driver shows 2"),
    ({}, lambda env: [], "no CUDA device: the driver shows no GPU"),
], ids=["hidden", "too-many", "none"])
def test_missing_gpus_are_a_startup_error_saying_what_is_missing(environ, probe, message):
    with pytest.raises(StartupError, match="^--cuda: ") as err:
        cuda_devices(environ, probe)
    assert message in str(err.value)


def test_a_probe_that_finds_no_driver_is_passed_on():
    def probe(environ):
        raise StartupError("no CUDA device: CUDA driver library cannot be found")

    with pytest.raises(StartupError, match="^--cuda: no CUDA device: CUDA driver library cannot be found$"):
        cuda_devices({"CUDA_VISIBLE_DEVICES": "0,1"}, probe)


def test_the_plan_has_one_engine_cuda_per_device_each_seeing_its_gpu_alone():
    devices = cuda_devices({"CUDA_VISIBLE_DEVICES": "0,1"}, two_gpus)
    topo = Topology(settings(), workers=1, services=engine_services(START_ORDER, 1, cuda=True), cuda_devices=devices)
    plan = topo.plan()
    assert [p.service for p in plan] == ["adjudicator", "kvmmu", "engine-cpu", "engine-cuda", "engine-cuda", "gateway"]
    gpus = [p for p in plan if p.service == "engine-cuda"]
    assert [p.name for p in gpus] == ["engine-cuda#0", "engine-cuda#1"]
    assert [p.environ["CUDA_VISIBLE_DEVICES"] for p in gpus] == ["0", "1"]
    assert all(p.environ["NUMBA_ENABLE_CUDASIM"] == "0" and p.overrides["cuda_device"] == 0 for p in gpus)
    assert len({p.overrides["worker_id"] for p in gpus}) == 2  # each keeps its own name across restarts
    assert topo.engine_workers == 3  # what readiness waits for: every worker announced


def test_workers_0_starts_the_gpu_workers_alone():
    services = engine_services(START_ORDER, 0, cuda=True)
    assert services == ("adjudicator", "kvmmu", "engine-cuda", "gateway")
    topo = Topology(settings(), workers=0, services=services, cuda_devices=("3", "5"))
    assert [(p.name, p.environ.get("CUDA_VISIBLE_DEVICES")) for p in topo.plan() if p.service.startswith("engine")] == [
        ("engine-cuda#3", "3"), ("engine-cuda#5", "5")]
    assert topo.engine_workers == 2
    assert engine_services(START_ORDER, 2, cuda=False) == START_ORDER  # without --cuda: as before


def test_asking_for_no_engine_or_an_unused_gpu_is_refused():
    with pytest.raises(StartupError, match="--workers 0 leaves no engine worker"):
        engine_services(START_ORDER, 0, cuda=False)
    upstream_only = tuple(s for s in START_ORDER if s != "engine-cpu")
    with pytest.raises(StartupError, match="--cuda: every model goes upstream"):
        engine_services(upstream_only, 1, cuda=True)
    with pytest.raises(StartupError, match="no GPU given"):
        Topology(settings(), services=("engine-cuda",)).plan()


def _with_marker(marker: str) -> list[int]:
    """The live processes whose environment holds `marker` (all that `fak up` started inherit it)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/environ", "rb") as f:
                    if marker.encode() in f.read():
                        found.append(int(entry))
            except OSError:
                continue
    return found


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="this machine has an NVIDIA driver")
def test_fak_up_cuda_without_a_gpu_refuses_at_once_and_leaves_nothing_running(tmp_path):
    from tests.conftest import free_port

    marker = f"FAKTEST_RUN={uuid.uuid4().hex}"
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FAK_", "NUMBA_", "CUDA_"))}
    env |= {"FAK_PORT": str(port), "FAK_DATA_DIR": str(tmp_path / "data"), "FAK_CACHE_DIR": str(tmp_path / "cache"),
            "NUMBA_ENABLE_CUDASIM": "1",  # the simulator is no GPU: fak up does not count it as one
            marker.split("=")[0]: marker.split("=")[1]}
    done = subprocess.run([sys.executable, "-m", "fakcore.cli", "up", "--cuda"], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 1, done.stderr
    assert done.stderr.startswith("fak up: --cuda: no CUDA device: "), done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert "fak is up" not in done.stdout
    assert not (tmp_path / "data").exists() and not (tmp_path / "cache").exists()  # no nats-server, no key file
    assert _with_marker(marker) == []
