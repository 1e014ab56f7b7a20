"""The embedded nats-server and the process launcher start real processes and leave none behind."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time

import nats
import pytest

from fakcore.launcher import StartupError, Topology, stop_process
from fakcore.natsd import EmbeddedNats
from fakcore.settings import Settings


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie still answers kill(0); read its state
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


def test_embedded_nats_with_jetstream(tmp_path):
    with EmbeddedNats(data_dir=tmp_path) as server:
        assert server.url.startswith("nats://127.0.0.1:") and server.port != 4222
        pid = server.proc.pid

        async def check() -> None:
            nc = await nats.connect(server.url)
            info = await nc.jetstream().account_info()
            assert info is not None
            await nc.close()

        asyncio.run(check())
    assert not _alive(pid)


def test_stop_process_escalates_to_kill():
    proc = subprocess.Popen([sys.executable, "-c", "import signal,time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"],
                            start_new_session=True)
    time.sleep(0.3)
    t0 = time.monotonic()
    stop_process(proc, timeout=0.5)
    assert proc.returncode is not None and time.monotonic() - t0 < 5


def test_topology_starts_and_stops_every_process(nats_server, tmp_path):
    from tests.conftest import base_settings

    topo = Topology(base_settings(nats_server.url), log_dir=tmp_path)
    topo.start(timeout=60)
    pids = [c.proc.pid for c in topo.children]
    try:
        assert {c.service for c in topo.children} == {"adjudicator", "kvmmu", "engine-cpu", "gateway"}
        assert topo.health()["ok"] is True
    finally:
        topo.stop()
    assert not any(_alive(pid) for pid in pids)


def test_topology_reports_a_service_that_dies_at_start(nats_server, tmp_path):
    from tests.conftest import base_settings

    topo = Topology(base_settings(nats_server.url, model="/no/such/model.gguf"), services=("engine-cpu",), log_dir=tmp_path)
    with pytest.raises(StartupError, match="engine-cpu exited"):
        topo.start(timeout=30)
    assert topo.children == []
    assert "no/such/model.gguf" in (tmp_path / "engine-cpu.log").read_text()


def test_fak_up_sigterm_stops_everything(tmp_path):
    from tests.conftest import free_port

    port = free_port()
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("FAK_")}, "FAK_PORT": str(port),
           "FAK_DATA_DIR": str(tmp_path / "data"), "FAK_ANNOUNCE_INTERVAL_S": "0.2"}
    proc = subprocess.Popen([sys.executable, "-m", "fakcore.cli", "up"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        line = ""
        deadline = time.monotonic() + 60
        while "fak is up" not in line and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line and proc.poll() is not None:
                break
        assert "fak is up" in line, "fak up did not report readiness"
        assert f"127.0.0.1:{port}" in line
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    time.sleep(0.2)
    leftover = subprocess.run(["pgrep", "-f", "fakcore.cli serve"], capture_output=True, text=True).stdout.split()
    # Only processes of this test's `fak up` matter; their parent was `proc`.
    mine = [pid for pid in leftover if _parent(int(pid)) == proc.pid]
    assert mine == [], f"processes left behind: {mine}"


def _parent(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (FileNotFoundError, IndexError, ValueError):
        return -1


def test_settings_reach_children(nats_server, tmp_path):
    from tests.conftest import base_settings

    s: Settings = base_settings(nats_server.url, max_sessions=3)
    topo = Topology(s, services=("engine-cpu",), log_dir=tmp_path).start(timeout=60)
    try:
        async def announce() -> int:
            nc = await nats.connect(nats_server.url)
            fut = asyncio.get_running_loop().create_future()

            async def cb(msg):
                from fakcore.protocol import Decoders

                if not fut.done():
                    fut.set_result(Decoders.announce.decode(msg.data).capacity)

            await nc.subscribe("fak.v1.engine.announce", cb=cb)
            try:
                return await asyncio.wait_for(fut, 10)
            finally:
                await nc.close()

        assert asyncio.run(announce()) == 3
    finally:
        topo.stop()
