"""Shared fixtures: a real nats-server per test session, the fak topology as real processes, free ports.

Every process a fixture starts is stopped in its finaliser, also when the test fails.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fakcore.launcher import Topology
from fakcore.natsd import EmbeddedNats
from fakcore.settings import Settings

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def nats_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedNats]:
    server = EmbeddedNats(data_dir=tmp_path_factory.mktemp("nats")).start()
    try:
        yield server
    finally:
        server.stop()


def base_settings(nats_url: str, **overrides: object) -> Settings:
    """Settings for a test topology: isolated from the caller's FAK_* environment. Its engine runs the
    reference backend unless a test names another (the fast path's tests do; most test what surrounds it)."""
    overrides.setdefault("backend", "reference")
    return Settings.load(env={}, nats_url=nats_url, host="127.0.0.1", port=free_port(), announce_interval_s=0.2,
                         worker_stale_s=3.0, **overrides)


@contextlib.contextmanager
def running(topo: Topology, timeout: float = 90) -> Iterator[Topology]:
    """Start a topology (its logs printed if it fails to), yield it, stop every process it started."""
    try:
        topo.start(timeout=timeout)
    except BaseException:
        _dump_logs(topo.log_dir)
        raise
    try:
        yield topo
    finally:
        topo.stop()


@contextlib.contextmanager
def routed(nats_server: EmbeddedNats, d: Path, upstreams: dict[str, dict], routes: list[dict], policy: str | None = None,
           services: tuple[str, ...] | None = None, **overrides: object) -> Iterator[Topology]:
    """A topology whose gateway routes models to scripted upstreams: `upstreams` {name: {url, wire, ...}} and
    `routes` [{model, upstream, ...}] as a routes file (JSON is YAML) in `d`; `policy` a policy file's text."""
    (d / "routes.yaml").write_text(json.dumps({"upstreams": upstreams, "routes": routes}))
    if policy is not None:
        (d / "policy.yaml").write_text(policy)
        overrides["policy"] = str(d / "policy.yaml")
    settings = base_settings(nats_server.url, routes=str(d / "routes.yaml"), **overrides)
    extra = {"services": services} if services else {}
    with running(Topology(settings, log_dir=d / "logs", **extra)) as topo:
        yield topo


@contextlib.contextmanager
def smollm2(nats_server: EmbeddedNats, log_dir: Path, **overrides: object) -> Iterator[Topology]:
    """The whole topology serving the real SmolLM2-135M-Instruct on the fast path, for the real agent CLIs.
    Their first request is a long prefill (thousands of tokens): a silence beyond the default idle timeout is
    expected there, not a hang."""
    from fakcore.models.sources import pulled_path

    assert pulled_path("smollm2-135m").exists(), "SmolLM2 weights missing: run `fak model pull smollm2-135m` (make test does)"
    settings = base_settings(nats_server.url, **{"model": "smollm2-135m", "backend": "numba", "idle_timeout_s": 600.0, **overrides})
    with running(Topology(settings, log_dir=log_dir), timeout=240) as topo:
        yield topo


ADMIN = "ops-key"  # the operator key of the test topologies that read the audit endpoints
DENY_POLICY = """
default: allow
tools:
  delete_everything:
    action: deny
    reason: nothing gets deleted here
  wipe_disk:
    action: deny
    reason: no disk gets wiped
"""  # the policy of the tests that prove a denied call never reaches the client


@pytest.fixture(scope="module")
def operated(nats_server: EmbeddedNats, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Topology]:
    """The whole topology on the synthetic model, its operator endpoints open to ADMIN."""
    settings = base_settings(nats_server.url, admin_keys=(ADMIN,))
    with running(Topology(settings, log_dir=tmp_path_factory.mktemp("logs")), timeout=90) as topo:
        yield topo


@pytest.fixture(scope="module")
def topology(nats_server: EmbeddedNats, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Topology]:
    """adjudicator, kvmmu, one engine-cpu worker (synthetic) and the gateway."""
    settings = base_settings(nats_server.url)
    with running(Topology(settings, log_dir=tmp_path_factory.mktemp("logs"))) as topo:
        yield topo


def wait_for(fn, timeout: float = 20.0):
    """Poll fn every 0.1 s until it returns something truthy or `timeout` passes; return its last value."""
    deadline = time.monotonic() + timeout
    while True:
        value = fn()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.1)


def worker_metrics_url(nats_url: str, worker: str, timeout: float = 10) -> str:
    """A worker's metrics base URL, from its next announce on the bus ("" if none came within `timeout`)."""
    import asyncio

    import nats

    from fakcore.protocol import Decoders, subjects

    async def main() -> str:
        nc = await nats.connect(nats_url)
        heard = asyncio.get_running_loop().create_future()

        async def on_announce(msg) -> None:
            a = Decoders.announce.decode(msg.data)
            if a.worker == worker and not heard.done():
                heard.set_result(a.metrics_url)

        await nc.subscribe(subjects.ANNOUNCE, cb=on_announce)
        try:
            return await asyncio.wait_for(heard, timeout)
        except TimeoutError:
            return ""
        finally:
            await nc.close()

    return asyncio.run(main())


def _dump_logs(log_dir: Path | None) -> None:
    if log_dir:
        for f in sorted(log_dir.glob("*.log")):
            print(f"==== {f.name}\n{f.read_text()[-4000:]}")
