"""`fak up`: the whole topology as local OS processes, for a machine without Docker.

    embedded nats-server (unless FAK_NATS_URL)  ->  adjudicator, kvmmu, engine-cpu xN, gateway
    wait until each has announced itself on the bus and the gateway's /healthz is ok
    print the gateway URL; on Ctrl-C / SIGTERM (or a child dying) stop everything, gateway first

The same `Topology` class starts the processes for the integration tests.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from fakcore.natsd import EmbeddedNats
from fakcore.settings import Settings

START_ORDER = ("adjudicator", "kvmmu", "engine-cpu", "gateway")


class StartupError(RuntimeError):
    pass


@dataclass
class Child:
    service: str
    proc: subprocess.Popen
    name: str  # "engine-cpu#1" when several


@dataclass
class Topology:
    settings: Settings
    workers: int = 1
    services: tuple[str, ...] = START_ORDER
    log_dir: Path | None = None  # None: children write to this process's stderr
    children: list[Child] = field(default_factory=list)
    nats: EmbeddedNats | None = None

    # -- start / stop ---------------------------------------------------------------------------------
    def start(self, timeout: float = 120.0) -> Topology:
        t0 = time.monotonic()
        if not self.settings.nats_url:
            data = Path(self.settings.data_dir) if self.settings.data_dir else None
            self.nats = EmbeddedNats(data_dir=data, port=self.settings.nats_port).start()
            self.settings = self.settings.replace(nats_url=self.nats.url)
        try:
            for service in self.services:
                for i in range(self.workers if service == "engine-cpu" else 1):
                    self.spawn(service, i)
            self.wait_ready(timeout - (time.monotonic() - t0))
        except BaseException:
            self.stop()
            raise
        return self

    def spawn(self, service: str, index: int = 0, **overrides: object) -> Child:
        env = {**os.environ, **self.settings.replace(**overrides).to_env()}
        name = f"{service}#{index + 1}" if service == "engine-cpu" and self.workers > 1 else service
        if service == "engine-cpu" and not self.settings.worker_id and self.workers > 1:
            env["FAK_WORKER_ID"] = f"engine-cpu-{os.getpid()}-{index + 1}"
        out = None
        if self.log_dir is not None:
            self.log_dir.mkdir(parents=True, exist_ok=True)
            out = open(self.log_dir / f"{name.replace('#', '-')}.log", "ab")
        proc = subprocess.Popen([sys.executable, "-m", "fakcore.cli", "serve", service], env=env, stdin=subprocess.DEVNULL,
                                stdout=out, stderr=subprocess.STDOUT if out else None, start_new_session=True)
        if out:
            out.close()
        child = Child(service, proc, name)
        self.children.append(child)
        return child

    def stop(self, timeout: float = 15.0) -> None:
        # gateway first (no new requests), engines last but one, the bus last
        for child in sorted(self.children, key=lambda c: -START_ORDER.index(c.service) if c.service in START_ORDER else 0):
            stop_process(child.proc, timeout)
        self.children.clear()
        if self.nats:
            self.nats.stop()
            self.nats = None

    def dead(self) -> list[Child]:
        return [c for c in self.children if c.proc.poll() is not None]

    # -- readiness ------------------------------------------------------------------------------------
    def wait_ready(self, timeout: float) -> None:
        """Every service heard on the bus, then the gateway's /healthz says ok."""
        wanted = {s for s in self.services if s != "engine-cpu"}
        engines = self.workers if "engine-cpu" in self.services else 0
        asyncio.run(self._wait_bus(wanted, engines, timeout))
        if "gateway" in self.services:
            deadline = time.monotonic() + max(5.0, timeout)
            while not self.health_ok():
                self._check_alive()
                if time.monotonic() > deadline:
                    raise StartupError(f"gateway at {self.gateway_url} did not report ok")
                time.sleep(0.1)

    async def _wait_bus(self, wanted: set[str], engines: int, timeout: float) -> None:
        from fakcore import bus
        from fakcore.protocol import Decoders, subjects

        nc = await bus.connect(self.settings, "fak-up")
        heard: set[str] = set()
        workers: set[str] = set()

        async def on_health(msg) -> None:
            heard.add(Decoders.heartbeat.decode(msg.data).service)

        async def on_announce(msg) -> None:
            a = Decoders.announce.decode(msg.data)
            if a.model == self.settings.model:
                workers.add(a.worker)

        await nc.subscribe(subjects.HEALTH, cb=on_health)
        await nc.subscribe(subjects.ANNOUNCE, cb=on_announce)
        deadline = time.monotonic() + timeout
        try:
            while not (wanted <= heard and len(workers) >= engines):
                self._check_alive()
                if time.monotonic() > deadline:
                    missing = sorted(wanted - heard) + ([f"engine-cpu ({len(workers)}/{engines})"] if len(workers) < engines else [])
                    raise StartupError(f"not ready within {timeout:.0f}s: {', '.join(missing)}")
                await asyncio.sleep(0.05)
        finally:
            await nc.close()

    def _check_alive(self) -> None:
        dead = self.dead()
        if dead:
            c = dead[0]
            raise StartupError(f"{c.name} exited with status {c.proc.returncode} during start-up")

    @property
    def gateway_url(self) -> str:
        return f"http://{self.settings.host}:{self.settings.port}"

    def health(self) -> dict:
        try:
            with urllib.request.urlopen(self.gateway_url + "/healthz", timeout=2) as r:
                return json.loads(r.read())
        except urllib.error.HTTPError as e:
            return json.loads(e.read() or b"{}")
        except OSError:
            return {}

    def health_ok(self) -> bool:
        return bool(self.health().get("ok"))


def stop_process(proc: subprocess.Popen, timeout: float = 15.0) -> None:
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def up(settings: Settings, workers: int = 1) -> int:
    """The `fak up` command: start, report, supervise, stop."""
    t0 = time.monotonic()
    topo = Topology(settings, workers=workers)
    stopping = False

    def on_signal(signum, frame) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    try:
        topo.start()
    except StartupError as exc:
        print(f"fak up: {exc}", file=sys.stderr)
        return 1
    s = topo.settings
    print(f"fak is up in {time.monotonic() - t0:.1f}s: gateway {topo.gateway_url}  (model {s.model}, backend {s.backend}, "
          f"nats {s.nats_url}{' embedded' if topo.nats else ''})", flush=True)
    print(f"  OpenAI:    {topo.gateway_url}/v1    Anthropic: {topo.gateway_url}    health: {topo.gateway_url}/healthz", flush=True)
    code = 0
    try:
        while not stopping:
            dead = topo.dead()
            if dead:
                print(f"fak up: {dead[0].name} exited with status {dead[0].proc.returncode}; stopping", file=sys.stderr)
                code = 1
                break
            time.sleep(0.2)
    finally:
        print("fak up: stopping", file=sys.stderr, flush=True)
        topo.stop()
    return code
