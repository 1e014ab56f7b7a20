"""The embedded nats-server and the process launcher start real processes and leave none behind; a process
that dies is restarted with backoff; the data dir outlives a run and serves one server at a time."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import nats
import pytest

from fakcore.launcher import Backoff, StartupError, Topology, data_dir, stop_process
from fakcore.natsd import DataDirInUse, EmbeddedNats
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

    broken = tmp_path / "broken.gguf"  # there (so fak up lets it through), but no GGUF: the worker dies loading it
    broken.write_bytes(b"not a gguf file")
    topo = Topology(base_settings(nats_server.url, model=str(broken)), services=("engine-cpu",), log_dir=tmp_path / "logs")
    with pytest.raises(StartupError, match="engine-cpu exited"):
        topo.start(timeout=30)
    assert topo.children == []
    assert "broken.gguf" in (tmp_path / "logs" / "engine-cpu.log").read_text()


def test_fak_up_sigterm_stops_everything(tmp_path):
    """Leftovers are looked for by what the run was, not by parentage (an orphan is re-parented to pid 1):
    any process in one of the sessions it made (each child leads its own; a session holds its process
    groups), any of its processes still alive by pid and start time, any TCP port it listened on (nats,
    gateway, each service's metrics)."""
    from tests.conftest import free_port, wait_for

    port = free_port()
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("FAK_")}, "FAK_PORT": str(port),
           "FAK_DATA_DIR": str(tmp_path / "data"), "FAK_ANNOUNCE_INTERVAL_S": "0.2",
           "FAK_PROMETHEUS_TARGETS": str(tmp_path / "targets.json")}
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
        tree = _tree(proc.pid)
        names = {_name(pid) for pid in tree}
        assert names == {"fak-up", "nats-server", "adjudicator", "kvmmu", "engine-cpu", "gateway"}, names
        listening = _listening(tree)
        nats_port = int(line.split("nats nats://127.0.0.1:", 1)[1].split()[0])
        assert {port, nats_port} <= set(listening), listening
        assert {"nats-server", "adjudicator", "kvmmu", "engine-cpu", "gateway"} <= set(listening.values()), listening
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    sessions = {sid for _, sid, _ in tree.values()}
    assert sessions >= {proc.pid} and len(sessions) == 6  # fak up's own, and one per child it started

    def left() -> list[str]:
        now = _processes()
        return [f"{pid} {_name(pid)} (session {st[1]})" for pid, st in now.items()
                if st[1] in sessions or (pid in tree and st[2] == tree[pid][2])]

    assert wait_for(lambda: not left(), timeout=5), f"processes left behind: {left()}"
    still = {p: who for p, who in listening.items() if p in _listening_ports()}
    assert still == {}, f"ports still listening: {still}"


# A process is (ppid, session id, start time in clock ticks since boot): the start time tells a pid reused
# by another process from the one recorded.
Stat = tuple[int, int, int]


def _processes() -> dict[int, Stat]:
    """Every live (not zombie) process, from /proc/<pid>/stat."""
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()  # after "pid (comm)": field 3 onwards
        except (FileNotFoundError, ProcessLookupError):
            continue
        if fields[0] != "Z":
            out[int(entry)] = (int(fields[1]), int(fields[3]), int(fields[19]))
    return out


def _tree(root: int) -> dict[int, Stat]:
    """`root` and all its descendants."""
    procs = _processes()
    tree, frontier = {root: procs[root]}, [root]
    while frontier:
        parent = frontier.pop()
        for pid, st in procs.items():
            if st[0] == parent and pid not in tree:
                tree[pid] = st
                frontier.append(pid)
    return tree


def _name(pid: int) -> str:
    """What a process of `fak up` is: the launcher, nats-server, or the service it serves."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = [a.decode() for a in f.read().split(b"\0") if a]
    except FileNotFoundError:
        return "?"
    if argv[-1:] == ["up"]:
        return "fak-up"
    if "-m" in argv:  # python -m fak_gateway: the service whose package that is
        from fakcore.service import PACKAGES

        module = argv[argv.index("-m") + 1]
        return next((name for name, package in PACKAGES.items() if package == module), module)
    return Path(argv[0]).name if argv else "?"


def _socket_inodes(pid: int) -> set[int]:
    inodes = set()
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
            if target.startswith("socket:["):
                inodes.add(int(target[8:-1]))
    except (FileNotFoundError, ProcessLookupError):
        pass
    return inodes


def _listening_sockets() -> dict[int, int]:
    """inode -> port of every TCP socket in LISTEN state (IPv4 and IPv6)."""
    out = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for row in f.readlines()[1:]:
                cols = row.split()
                if cols[3] == "0A":  # TCP_LISTEN
                    out[int(cols[9])] = int(cols[1].rsplit(":", 1)[1], 16)
    return out


def _listening_ports() -> set[int]:
    return set(_listening_sockets().values())


def _listening(pids) -> dict[int, str]:
    """port -> the process of `pids` listening on it."""
    sockets = _listening_sockets()
    return {sockets[i]: _name(pid) for pid in pids for i in _socket_inodes(pid) if i in sockets}


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


# -- supervision ------------------------------------------------------------------------------------------
def test_backoff_doubles_up_to_a_cap_and_starts_over_after_a_healthy_run():
    b = Backoff(first=0.5, cap=10.0, reset_after=30.0)
    t, delays = 100.0, []
    for _ in range(7):  # each restart dies again 1 s later
        delays.append(b.died(t))
        b.started = b.due
        t = b.due + 1
    assert delays == [0.5, 1, 2, 4, 8, 10, 10]
    assert b.died(b.started + 30) == 0.5  # it had stayed up 30 s


def test_a_failed_restart_counts_as_a_death(capsys):
    b = Backoff(first=0.001, started=time.monotonic() - 100)
    attempts = []

    def restart(ok: bool) -> None:
        attempts.append(ok)
        if not ok:
            raise RuntimeError("port taken")

    Topology._watch("x", b, -9, lambda: restart(False))
    assert b.deaths == 1 and attempts == []
    from tests.conftest import wait_for

    wait_for(lambda: time.monotonic() >= b.due, timeout=1)
    Topology._watch("x", b, None, lambda: restart(False))
    assert attempts == [False] and b.deaths == 2 and b.due is not None  # not reset: it was up 0 s
    wait_for(lambda: time.monotonic() >= b.due, timeout=1)
    Topology._watch("x", b, None, lambda: restart(True))
    assert attempts == [False, True] and b.due is None
    err = capsys.readouterr().err
    assert "fak up: x exited with status -9; restarting in" in err and "did not restart (port taken)" in err
    assert "fak up: x restarted" in err


def test_topology_restarts_a_child_that_dies(nats_server, tmp_path, capsys):
    from tests.conftest import base_settings, running, wait_for

    with running(Topology(base_settings(nats_server.url), services=("kvmmu",), log_dir=tmp_path), timeout=60) as topo:
        [child] = topo.children
        old = child.proc
        os.kill(old.pid, signal.SIGKILL)
        assert wait_for(lambda: topo.supervise_once() or (child.proc is not old and child.proc.poll() is None), timeout=10)
        assert old.poll() == -signal.SIGKILL
        assert _environ(child.proc.pid)["FAK_NATS_URL"] == nats_server.url
        assert "fak up: kvmmu exited with status -9; restarting in 0.5s" in capsys.readouterr().err
        topo.wait_ready(30)  # a heartbeat from the new process
        pid = child.proc.pid
    assert not _alive(pid) and not _alive(old.pid)


def _environ(pid: int) -> dict[str, str]:
    with open(f"/proc/{pid}/environ", "rb") as f:
        return dict(e.decode().split("=", 1) for e in f.read().split(b"\0") if b"=" in e)


# -- the data dir ---------------------------------------------------------------------------------------
def test_data_dir_defaults_to_the_cache_dir_and_temp_is_asked_for(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert data_dir(Settings.load(env={})) == tmp_path / "xdg" / "fak" / "data"
    assert data_dir(Settings.load(env={"FAK_CACHE_DIR": str(tmp_path / "cache")})) == tmp_path / "cache" / "data"
    assert data_dir(Settings.load(env={"FAK_DATA_DIR": str(tmp_path / "d")})) == tmp_path / "d"
    assert data_dir(Settings.load(env={"FAK_DATA_DIR": "~/fak-data"})) == Path.home() / "fak-data"
    assert data_dir(Settings.load(env={"FAK_DATA_DIR": "temp"})) is None


def test_a_temporary_data_dir_is_removed_on_stop():
    server = EmbeddedNats().start()
    tmp = server.data_dir
    assert (tmp / "js").is_dir()
    server.stop()
    assert not tmp.exists()


def test_a_given_data_dir_is_kept_and_serves_one_server_at_a_time(tmp_path):
    d = tmp_path / "data"
    with EmbeddedNats(data_dir=d) as first:
        with pytest.raises(DataDirInUse) as err:
            EmbeddedNats(data_dir=d).start()
        assert str(d) in str(err.value) and "--data-dir" in str(err.value) and str(os.getpid()) in str(err.value)
        assert first.alive()
    assert (d / "js").is_dir()
    EmbeddedNats(data_dir=d).start().stop()  # the lock went with the first server


def test_embedded_nats_restarts_on_its_port_with_its_streams(tmp_path):
    async def publish(url: str) -> None:
        nc = await nats.connect(url)
        js = nc.jetstream()
        await js.add_stream(name="T", subjects=["t.>"])
        await js.publish("t.1", b"kept")
        await nc.close()

    async def count(url: str) -> int:
        nc = await nats.connect(url)
        info = await nc.jetstream().stream_info("T")
        await nc.close()
        return info.state.messages

    with EmbeddedNats(data_dir=tmp_path) as server:
        url, old = server.url, server.proc
        asyncio.run(publish(url))
        os.kill(old.pid, signal.SIGKILL)
        old.wait()
        assert not server.alive()
        server.restart()
        assert server.alive() and server.url == url and server.proc.pid != old.pid
        assert asyncio.run(count(url)) == 1


def test_a_locked_embedded_nats_keeps_its_secrets_private_and_across_restarts(tmp_path):
    from fakcore.permissions import BusSecrets, render

    with EmbeddedNats(data_dir=tmp_path, auth=True) as server:
        first = server.secrets
        assert (os.stat(server.auth_dir).st_mode & 0o777) == 0o700
        assert all((os.stat(server.auth_dir / f).st_mode & 0o777) == 0o600 for f in ("nats.conf", "secrets.json"))

        async def refused() -> None:
            with pytest.raises(nats.errors.Error, match="Authorization Violation"):
                await nats.connect(server.url, allow_reconnect=False, connect_timeout=2)
            nc = await nats.connect(server.url, user="admin", password=first.passwords["admin"])
            await nc.close()

        asyncio.run(refused())
    with EmbeddedNats(data_dir=tmp_path, auth=True) as server:
        assert server.secrets == first == BusSecrets.load(tmp_path / "auth")
    assert "$FAK_NATS_ENGINE_PASSWORD" in render() and first.passwords["engine"] not in render()
    assert first.settings_for("engine-cpu") == {"nats_user": "engine", "nats_password": first.passwords["engine"],
                                                "nats_creds": "", "verdict_key": "", "release_key": first.release_key}


def test_fak_up_refuses_a_misspelt_mcp_servers_file_before_starting_anything(tmp_path):
    bad = tmp_path / "mcp.yaml"
    bad.write_text("servers:\n  fs: {commnd: [npx, server]}\n")
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("FAK_")}, "FAK_MCP": str(bad),
           "FAK_CACHE_DIR": str(tmp_path / "cache"), "FAK_DATA_DIR": "temp"}
    done = subprocess.run([sys.executable, "-m", "fakcore.cli", "up"], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "commnd" in done.stderr and str(bad) in done.stderr, done.stderr
    assert "nats-server" not in done.stdout and not (tmp_path / "cache" / "prometheus").exists()
