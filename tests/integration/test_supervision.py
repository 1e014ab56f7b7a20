"""`fak up` supervises its processes: kill -9 one engine worker, or the embedded nats-server, and the stack
serves on while the process comes back; quarantine verdicts outlive a restart of the whole stack (the
default data dir keeps the JetStream store), and a second `fak up` on the same data dir is refused.

Every test runs the real `fak up` command. Each process it starts inherits a tag in its environment, so the
finaliser finds and kills all of them, also when the test fails or `fak up` itself is gone.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from fakcore.natsd import AUTH_DIR
from fakcore.permissions import BusSecrets
from tests.conftest import free_port, wait_for, worker_metrics_url
from tests.integration.test_quarantine import MARKER, PAYLOAD, conversation

TAG = "FAK_TEST_SUPERVISION_TAG"
ADMIN = "ops-key"


class FakUp:
    """One `fak up` subprocess, its output in a log file."""

    def __init__(self, log: Path, *args: str, **env: str):
        self.args = args
        self.log = log
        self.port = free_port()
        self.tag = uuid.uuid4().hex
        self.env = {**{k: v for k, v in os.environ.items() if not k.startswith("FAK_")}, "FAK_PORT": str(self.port),
                    "FAK_ANNOUNCE_INTERVAL_S": "0.2", "FAK_WORKER_STALE_S": "3", TAG: self.tag, **env}
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 120) -> FakUp:
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "fakcore.cli", "up", *self.args], env=self.env,
                                         stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        wait_for(lambda: "fak is up" in self.output() or self.proc.poll() is not None, timeout)
        assert "fak is up" in self.output(), f"fak up did not come up:\n{self.output()[-4000:]}"
        return self

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def processes(self) -> dict[int, list[str]]:
        """pid -> argv of every live process carrying this run's tag (fak up, its services, nats-server)."""
        found = {}
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                env = _read(f"/proc/{entry}/environ")
                argv = _read(f"/proc/{entry}/cmdline").split(b"\0")
            except OSError:
                continue
            if f"{TAG}={self.tag}".encode() in env.split(b"\0") and argv[0]:  # a zombie has no argv
                found[int(entry)] = [a.decode() for a in argv if a]
        return found

    def find(self, *words: str) -> dict[int, list[str]]:
        return {pid: argv for pid, argv in self.processes().items() if all(w in argv for w in words)}

    def services(self) -> dict[int, list[str]]:
        """The service processes (`python -m fak_<service>`), the launcher and nats-server left out."""
        from fakcore.service import PACKAGES

        return {pid: argv for pid, argv in self.processes().items() if set(PACKAGES.values()) & set(argv)}

    def stop(self) -> None:
        """SIGTERM, as Ctrl-C would: fak up stops everything it started and exits 0."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        assert self.proc.wait(60) == 0, self.output()[-4000:]
        assert wait_for(lambda: not self.processes(), timeout=10), f"left running: {self.processes()}"

    def kill_all(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(30)
        for pid in self.processes():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if self.proc is not None and self.proc.poll() is None:
            self.proc.wait(10)
        wait_for(lambda: not self.processes(), timeout=10)


@contextlib.contextmanager
def fak_up(log: Path, *args: str, **env: str) -> Iterator[FakUp]:
    """A running `fak up`; stopped with SIGTERM at the end (nothing may be left), killed if anything failed."""
    up = FakUp(log, *args, **env)
    try:
        yield up.start()
        up.stop()
    finally:
        up.kill_all()


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def environ(pid: int) -> dict[str, str]:
    return dict(e.decode().split("=", 1) for e in _read(f"/proc/{pid}/environ").split(b"\0") if b"=" in e)


def alive(pid: int) -> bool:
    try:
        return _read(f"/proc/{pid}/stat").rsplit(b")", 1)[1].split()[0] != b"Z"
    except OSError:
        return False


def get(url: str, key: str = "") -> dict:
    req = urllib.request.Request(url, headers={"authorization": f"Bearer {key}"} if key else {})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as e:
        return json.loads(e.read() or b"{}")
    except OSError:
        return {}


def workers(up: FakUp) -> set[str]:
    return {w["worker"] for w in get(up.url + "/healthz").get("workers", [])}


def chat(up: FakUp, messages: list[dict] | None = None):
    client = openai.OpenAI(base_url=up.url + "/v1", api_key="-", max_retries=0, timeout=60)
    return client.chat.completions.create(model="synthetic", max_tokens=4, temperature=0,
                                          messages=messages or [{"role": "user", "content": "hi"}])


def chat_ok(up: FakUp) -> bool:
    try:
        return bool(chat(up).choices[0].message.content is not None)
    except openai.APIError:
        return False


def announcing_pid(nats_url: str, worker: str, timeout: float = 10) -> int:
    """The pid of the process behind `worker`'s next announce (from its own /healthz); 0 if none came."""

    metrics_url = worker_metrics_url(nats_url, worker, timeout)
    instance = get(metrics_url + "/healthz").get("instance", "") if metrics_url else ""
    return int(instance.rsplit("-", 1)[1]) if instance else 0


# -- one stack, two workers: kill parts of it -------------------------------------------------------------
@pytest.fixture(scope="module")
def stack(tmp_path_factory) -> Iterator[FakUp]:
    tmp = tmp_path_factory.mktemp("supervision")
    with fak_up(tmp / "fak-up.log", "--workers", "2", FAK_NATS_PORT=str(free_port()),
                FAK_CACHE_DIR=str(tmp / "cache"), FAK_DATA_DIR=str(tmp / "data"), FAK_ADMIN_KEYS=ADMIN) as up:
        assert wait_for(lambda: len(workers(up)) == 2, timeout=30), get(up.url + "/healthz")
        yield up


def test_fak_up_keeps_a_prometheus_file_sd_list_of_every_service(stack):
    path = Path(stack.env["FAK_CACHE_DIR"]) / "prometheus" / "targets.json"
    assert f"Prometheus file-SD targets: {path}" in stack.output()

    def groups() -> list[dict]:
        return json.loads(path.read_text()) if path.exists() else []

    wanted = ["adjudicator", "engine-cpu", "engine-cpu", "gateway", "kvmmu"]
    assert wait_for(lambda: sorted(g["labels"]["service"] for g in groups()) == wanted, timeout=20), groups()
    for g in groups():
        [target] = g["targets"]
        with urllib.request.urlopen(f"http://{target}{g['labels']['__metrics_path__']}", timeout=10) as r:
            assert r.status == 200 and b"fak_" in r.read(), g
        assert g["labels"]["job"] == "fak" and g["labels"]["instance"]


def test_a_killed_worker_is_restarted_while_the_other_serves(stack):
    """kill -9 of the worker serving a stream: the stream gets an error event within 5 s, the other worker
    keeps serving, the dead one is restarted under its name."""
    admin = BusSecrets.load(Path(stack.env["FAK_DATA_DIR"]) / AUTH_DIR).passwords["admin"]  # the bus is locked
    nats_url = f"nats://admin:{admin}@127.0.0.1:{stack.env['FAK_NATS_PORT']}"
    engines = {environ(pid)["FAK_WORKER_ID"]: pid for pid in stack.find("fak_engine_cpu")}
    assert len(engines) == 2 and set(engines) == workers(stack)
    assert chat_ok(stack)

    body = {"model": "synthetic", "stream": True, "max_tokens": 4000, "messages": [{"role": "user", "content": "go on"}]}
    with httpx.stream("POST", stack.url + "/v1/chat/completions", json=body, timeout=60) as stream:
        victim = stream.headers["x-fak-worker"]
        lines = stream.iter_lines()
        # tokens are flowing from the victim (a request killed before its first token is re-sent elsewhere)
        next(line for line in lines if line.startswith("data:") and '"content":"' in line and '"content":""' not in line)
        os.kill(engines[victim], signal.SIGKILL)
        killed = time.monotonic()
        error = next((line for line in lines if '"error"' in line), "")
        waited = time.monotonic() - killed
    assert error and "stopped" in error and waited < 5.0, f"error event after {waited:.1f}s: {error!r}"
    assert wait_for(lambda: not alive(engines[victim]), timeout=10)
    assert all(chat_ok(stack) for _ in range(4)), "the surviving worker did not serve"
    n = victim.rsplit("-", 1)[1]
    assert wait_for(lambda: f"engine-cpu#{n} exited with status -9; restarting in 0.5s" in stack.output(), timeout=10)

    def restarted() -> int:
        return next((pid for pid in stack.find("fak_engine_cpu") if pid != engines[victim]
                     and environ(pid).get("FAK_WORKER_ID") == victim), 0)

    new = wait_for(restarted, timeout=20)
    assert new, stack.output()[-4000:]
    assert wait_for(lambda: announcing_pid(nats_url, victim) == new, timeout=60), "the restarted worker never announced"
    assert workers(stack) == set(engines)
    assert all(chat_ok(stack) for _ in range(4))


def test_healthz_names_a_crashed_service_until_it_is_back(stack):
    """The kvmmu down: /healthz is 503 naming it, and ok again once fak up has restarted it. It is frozen
    (SIGSTOP) first, so that the 503 is seen while it is surely down (a crash alone is restarted in 0.5 s,
    before the gateway calls it stale), then killed -9 as it lies, which fak up sees as a crash."""
    assert wait_for(lambda: get(stack.url + "/healthz").get("ok"), timeout=30)
    [kvmmu] = stack.find("fak_kvmmu")
    os.kill(kvmmu, signal.SIGSTOP)
    try:
        assert wait_for(lambda: get(stack.url + "/healthz").get("missing_services") == ["kvmmu"], timeout=20), \
            get(stack.url + "/healthz")
        with urllib.request.urlopen(stack.url + "/healthz", timeout=10) as r:
            pytest.fail(f"/healthz answered {r.status} with the kvmmu down")
    except urllib.error.HTTPError as e:
        body = json.loads(e.read())
        assert e.code == 503 and not body["ok"] and body["missing_services"] == ["kvmmu"], body
    finally:
        os.kill(kvmmu, signal.SIGKILL)
    assert wait_for(lambda: "kvmmu exited with status -9; restarting" in stack.output(), timeout=10), stack.output()[-4000:]
    assert wait_for(lambda: stack.find("fak_kvmmu") and list(stack.find("fak_kvmmu")) != [kvmmu], timeout=20)
    assert wait_for(lambda: get(stack.url + "/healthz").get("ok"), timeout=60), get(stack.url + "/healthz")
    assert get(stack.url + "/healthz")["missing_services"] == []


def test_a_killed_nats_server_is_restarted_on_its_port_and_its_verdicts_survive(stack):
    first = chat(stack, conversation("Weather in Paris?", PAYLOAD))  # quarantined before the server dies
    assert MARKER not in (first.choices[0].message.content or "")
    port = stack.env["FAK_NATS_PORT"]
    [(old, argv)] = [(pid, argv) for pid, argv in stack.processes().items() if Path(argv[0]).name == "nats-server"]
    assert argv[argv.index("-p") + 1] == port

    os.kill(old, signal.SIGKILL)
    assert wait_for(lambda: "nats-server exited with status -9; restarting in 0.5s" in stack.output(), timeout=10)
    assert wait_for(lambda: "nats-server restarted" in stack.output(), timeout=20), stack.output()[-4000:]
    [(new, argv)] = [(pid, argv) for pid, argv in stack.processes().items() if Path(argv[0]).name == "nats-server"]
    assert new != old and argv[argv.index("-p") + 1] == port
    assert wait_for(lambda: chat_ok(stack), timeout=30), "services did not reconnect to the restarted nats-server"
    assert wait_for(lambda: get(stack.url + "/healthz").get("ok") and len(workers(stack)) == 2, timeout=30)

    # A fresh gateway (this one killed, fak up starts another) knows the verdict only from the JetStream
    # store the restarted server kept: the same result is filtered without being screened again.
    [gateway] = stack.find("fak_gateway")
    os.kill(gateway, signal.SIGKILL)
    assert wait_for(lambda: stack.find("fak_gateway") and list(stack.find("fak_gateway")) != [gateway], timeout=20)
    assert wait_for(lambda: get(stack.url + "/healthz").get("ok"), timeout=60), stack.output()[-4000:]
    again = chat(stack, conversation("And tomorrow?", PAYLOAD))
    context = get(f"{stack.url}/v1/fak/requests/{again.id}", ADMIN)
    assert context["screened"] == [] and len(context["placeholders"]) == 1, context
    assert MARKER not in json.dumps(context["messages"])


# -- the default data dir: verdicts outlive the stack -----------------------------------------------------
def test_a_quarantine_outlives_a_restart_of_fak_up(tmp_path):
    env = {"FAK_CACHE_DIR": str(tmp_path / "cache"), "FAK_ADMIN_KEYS": ADMIN}  # FAK_DATA_DIR unset: the default
    with fak_up(tmp_path / "first.log", **env) as up:
        assert f"data {tmp_path / 'cache' / 'data'}" in up.output()
        rival = subprocess.run([sys.executable, "-m", "fakcore.cli", "up"], env={**up.env, "FAK_PORT": str(free_port())},
                               stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
        assert rival.returncode == 1 and f"data dir {tmp_path / 'cache' / 'data'} is in use" in rival.stderr
        assert "--data-dir" in rival.stderr and up.proc.poll() is None
        first = chat(up, conversation("Weather in Paris?", PAYLOAD))
        context = get(f"{up.url}/v1/fak/requests/{first.id}", ADMIN)
        assert len(context["screened"]) == 1 and MARKER not in json.dumps(context["messages"])
    assert (tmp_path / "cache" / "data" / "js").is_dir()

    with fak_up(tmp_path / "second.log", **env) as up:
        def verdicts() -> list[dict]:
            records = get(f"{up.url}/v1/fak/audit?request_id={first.id}&kind=result", ADMIN).get("records", [])
            return [r for r in records if r["outcome"] == "quarantine"]

        assert wait_for(verdicts, timeout=20), "the audit log lost the verdict"
        again = chat(up, conversation("And tomorrow?", PAYLOAD))
        context = get(f"{up.url}/v1/fak/requests/{again.id}", ADMIN)
        assert context["screened"] == [] and len(context["placeholders"]) == 1  # known: filtered from the cache
        assert MARKER not in json.dumps(context["messages"])


# -- the launcher's own death: nothing is orphaned ----------------------------------------------------------
@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGHUP])
def test_no_process_outlives_the_launcher(tmp_path, how):
    """SIGKILL (the kernel's PR_SET_PDEATHSIG takes the children down) or SIGHUP (a closed terminal: a clean
    stop) of `fak up`: within 5 s no process of the topology is alive and the gateway's port is free."""
    up = FakUp(tmp_path / "up.log", FAK_CACHE_DIR=str(tmp_path / "cache"), FAK_DATA_DIR="temp")
    try:
        up.start()
        assert len(up.processes()) >= 5  # fak up, nats-server, adjudicator, kvmmu, engine-cpu, gateway
        up.proc.send_signal(how)
        t0 = time.monotonic()
        assert wait_for(lambda: not up.processes(), timeout=5), f"left running: {up.processes()}"
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as a server would: TIME_WAIT may linger
            s.bind(("127.0.0.1", up.port))  # the port is free for the next gateway
            s.listen()
        assert time.monotonic() - t0 < 5.0
    finally:
        up.kill_all()
