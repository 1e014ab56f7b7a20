"""`fak up`: the whole topology as local OS processes, for a machine without Docker.

    embedded nats-server (unless FAK_NATS_URL)  ->  adjudicator, kvmmu, engine-cpu xN, gateway
                                                    (+ an engine-cpu for the judge's model: judge_worker)
                                                    (+ with --cuda, an engine-cuda per visible GPU)
    wait until each has announced itself on the bus and the gateway's /healthz is ok
    print the gateway URL, then supervise: a process that dies is started again after a backoff while the
    others keep serving; only Ctrl-C / SIGTERM stops everything, gateway first, the bus last

A child dying during start-up fails the start (StartupError): that is a configuration to fix, not a crash
to ride out. Once up, a child is restarted with the environment it had (worker N keeps its FAK_WORKER_ID),
and the embedded nats-server on its port and data dir, so services, which reconnect forever, find it again.

The embedded server's data dir is kept across runs (`<cache dir>/data` by default), so quarantine verdicts
and the audit log survive a restart; `--data-dir temp` asks for a throw-away one.

The embedded server is locked (natsd.py, permissions.py): each child connects as its service's NATS user
with that user's permissions, and holds only the signing keys its service needs (verdicts, Releases), all
handed over in its environment, never on its command line; `fak up` itself is `admin`. With FAK_NATS_URL
the children use the credentials and keys configured.

TLS: with FAK_NATS_TLS_SERVER_CERT/_KEY the embedded server requires TLS (natsd.ServerTLS) and the children
connect to its tls:// URL, verifying it with FAK_NATS_TLS_CA; with FAK_NATS_TLS_CERT/_KEY as well, the
server requires client certificates signed by that CA and every child presents that one. With FAK_NATS_URL
the children use the TLS settings as given. The embedded server is one node: FAK_STREAM_REPLICAS above 1
needs a cluster, and is refused here.

GPUs (`fak up --cuda`): one engine-cuda worker per GPU that CUDA_VISIBLE_DEVICES shows (all of them when it
is unset), beside the engine-cpu workers (`--workers 0`: none of those). `cuda_devices` counts them before
anything starts, by asking numba.cuda in a child process (fak_engine_cuda.devices) as a worker would; no GPU,
no driver or fewer GPUs than CUDA_VISIBLE_DEVICES names is a StartupError saying which: never a quiet CPU
fallback (numba's CUDA simulator included: the probe and the workers run with NUMBA_ENABLE_CUDASIM=0). Worker
i sees its GPU alone (CUDA_VISIBLE_DEVICES=<entry i>, so FAK_CUDA_DEVICE=0) and keeps its FAK_WORKER_ID.

What starts is `Topology.plan()`, a list of Planned processes, so that it can be read (and tested) without
starting anything. The same `Topology` class starts the processes for the integration tests.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from fakcore.mcp_config import McpConfigError
from fakcore.mcp_config import load as load_mcp
from fakcore.models.sources import cache_dir
from fakcore.natsd import EmbeddedNats, ServerTLS, die_with_parent
from fakcore.permissions import BusSecrets
from fakcore.routes import RoutesError, RouteTable
from fakcore.service import PACKAGES
from fakcore.settings import Settings

START_ORDER = ("adjudicator", "kvmmu", "engine-cpu", "gateway")  # the default topology, in start order
ENGINES = ("engine-cpu", "engine-cuda")
ORDER = ("adjudicator", "kvmmu", *ENGINES, "gateway")  # start order of every service; stop is the reverse
TEMP = "temp"  # FAK_DATA_DIR value: a temporary data dir, removed on stop


class StartupError(RuntimeError):
    pass


def data_dir(settings: Settings) -> Path | None:
    """The embedded nats-server's data dir: FAK_DATA_DIR, by default `<cache dir>/data` (kept across runs);
    None for `temp` (EmbeddedNats makes a temporary one and removes it on stop)."""
    if settings.data_dir == TEMP:
        return None
    if settings.data_dir:
        return Path(settings.data_dir).expanduser()
    return cache_dir(settings.cache_dir) / "data"


@dataclass
class Backoff:
    """When a supervised process that died is started again: `first` seconds after it dies, doubling with
    each death in a row up to `cap`. A process that stayed up `reset_after` seconds was healthy: its next
    death waits `first` again. A failed restart counts as a death after 0 s up."""

    first: float = 0.5
    cap: float = 10.0
    reset_after: float = 30.0
    deaths: int = 0  # deaths in a row
    started: float = 0.0  # monotonic time of the last start (or restart attempt)
    due: float | None = None  # while dead: when to restart it

    def died(self, now: float) -> float:
        """Note a death at `now`; returns the delay before the restart (also kept in `due`)."""
        if now - self.started >= self.reset_after:
            self.deaths = 0
        self.deaths += 1
        delay = min(self.cap, self.first * 2 ** (self.deaths - 1))
        self.due = now + delay
        return delay


@dataclass
class Child:
    service: str
    proc: subprocess.Popen
    name: str  # "engine-cpu#1" when several
    env: dict[str, str] = field(default_factory=dict)  # what it was started with; a restart reuses it
    backoff: Backoff = field(default_factory=lambda: Backoff(started=time.monotonic()))


@dataclass(frozen=True)
class Planned:
    """One process the topology starts: its service, its name, the settings it differs in, other variables."""

    service: str
    index: int
    name: str
    overrides: Mapping[str, object] = field(default_factory=dict)  # Settings fields
    environ: Mapping[str, str] = field(default_factory=dict)  # besides FAK_*: CUDA_VISIBLE_DEVICES…


@dataclass
class Topology:
    settings: Settings
    workers: int = 1  # engine-cpu processes (when "engine-cpu" is one of the services)
    services: tuple[str, ...] = START_ORDER
    cuda_devices: tuple[str, ...] = ()  # CUDA_VISIBLE_DEVICES entries: an engine-cuda each (with "engine-cuda")
    log_dir: Path | None = None  # None: children write to this process's stderr
    children: list[Child] = field(default_factory=list)
    nats: EmbeddedNats | None = None
    nats_backoff: Backoff = field(default_factory=Backoff)
    auth: bool = True  # lock the embedded nats-server (when this starts one): per-service users, signing keys
    secrets: BusSecrets | None = None  # of the locked embedded server: what each child is handed

    # -- start / stop ---------------------------------------------------------------------------------
    def start(self, timeout: float = 120.0) -> Topology:
        t0 = time.monotonic()
        tls = embedded_tls(self.settings)
        check_model(self.settings, self.services)
        check_judge(self.settings, self.services)
        planned = self.plan()  # (a plan that cannot be is refused before the bus starts)
        if not self.settings.nats_url:
            server = EmbeddedNats(data_dir=data_dir(self.settings), port=self.settings.nats_port, auth=self.auth, tls=tls)
            try:
                self.nats = server.start()
            except (OSError, RuntimeError) as exc:  # taken data dir, no binary, a server that does not come up
                raise StartupError(str(exc)) from exc
            self.nats_backoff = Backoff(started=time.monotonic())
            # the children need the server's URL (tls:// with TLS), not its certificate's key
            self.settings = self.settings.replace(nats_url=self.nats.url, nats_tls_server_cert="", nats_tls_server_key="")
            if self.nats.secrets is not None:  # keys set in the configuration win over the generated ones
                s = self.settings
                self.secrets = replace(self.nats.secrets, verdict_key=s.verdict_key or self.nats.secrets.verdict_key,
                                       release_key=s.release_key or self.nats.secrets.release_key)
                self.settings = s.replace(**self.secrets.settings_for("admin"))
        try:
            for p in planned:
                self.spawn(p.service, p.index, p.name, environ=p.environ, **p.overrides)
            self.wait_ready(timeout - (time.monotonic() - t0))
        except BaseException:
            self.stop()
            raise
        return self

    def plan(self) -> list[Planned]:
        """The processes `start` starts, in order (the bus aside)."""
        out: list[Planned] = []
        for service in self.services:
            if service == "engine-cpu":  # (spawn names them, and gives each its FAK_WORKER_ID when several)
                many = self.workers > 1
                out.extend(Planned(service, i, f"engine-cpu#{i + 1}" if many else service) for i in range(self.workers))
            elif service == "engine-cuda":
                if not self.cuda_devices:
                    raise StartupError("engine-cuda asked for, but no GPU given to it (cuda_devices)")
                for i, device in enumerate(self.cuda_devices):
                    out.append(Planned(service, i, f"engine-cuda#{device if device.isdigit() else i}",
                                       {"cuda_device": 0, "worker_id": f"engine-cuda-{os.getpid()}-{i}"},
                                       {"CUDA_VISIBLE_DEVICES": device, "NUMBA_ENABLE_CUDASIM": "0"}))
            else:
                out.append(Planned(service, 0, service))
        if judge_worker(self.settings, self.services):
            out.append(Planned("engine-cpu", self.workers, "engine-cpu-judge", {
                "model": self.settings.screen_judge_model, "worker_id": f"engine-cpu-judge-{os.getpid()}"}))
        return out

    @property
    def engine_workers(self) -> int:
        """The engine workers of the served model that start with it (the judge's own aside)."""
        return (self.workers if "engine-cpu" in self.services else 0) + \
            (len(self.cuda_devices) if "engine-cuda" in self.services else 0)

    def spawn(self, service: str, index: int = 0, name: str = "", *, environ: Mapping[str, str] | None = None,
              **overrides: object) -> Child:
        if self.secrets is not None:  # its own user, password and keys: nothing of admin's
            overrides = {**self.secrets.settings_for(service), **overrides}
        env = {**os.environ, **self.settings.replace(**overrides).to_env(), **(environ or {})}
        name = name or (f"{service}#{index + 1}" if service == "engine-cpu" and self.workers > 1 else service)
        if service == "engine-cpu" and not self.settings.worker_id and self.workers > 1 and "worker_id" not in overrides:
            env["FAK_WORKER_ID"] = f"engine-cpu-{os.getpid()}-{index + 1}"
        child = Child(service, self._popen(service, name, env), name, env)
        self.children.append(child)
        return child

    def _popen(self, service: str, name: str, env: dict[str, str]) -> subprocess.Popen:
        out = None
        if self.log_dir is not None:
            self.log_dir.mkdir(parents=True, exist_ok=True)
            out = open(self.log_dir / f"{name.replace('#', '-')}.log", "ab")
        try:
            return subprocess.Popen([sys.executable, "-m", PACKAGES[service]], env=env,
                                    stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT if out else None,
                                    start_new_session=True, preexec_fn=die_with_parent)  # never an orphan
        finally:
            if out:
                out.close()

    def stop(self, timeout: float = 15.0) -> None:
        # gateway first (no new requests), engines last but one, the bus last
        for child in sorted(self.children, key=lambda c: -ORDER.index(c.service)):
            stop_process(child.proc, timeout)
        self.children.clear()
        if self.nats:
            self.nats.stop()
            self.nats = None

    def dead(self) -> list[Child]:
        return [c for c in self.children if c.proc.poll() is not None]

    # -- supervision ----------------------------------------------------------------------------------
    def supervise(self, stopping: Callable[[], bool], interval: float = 0.2) -> None:
        """Keep every process running until `stopping()` says otherwise (fak up: Ctrl-C / SIGTERM)."""
        while not stopping():
            self.supervise_once()
            time.sleep(interval)

    def supervise_once(self) -> None:
        """One look at every process: one that died gets a restart time (its backoff), one whose time has
        come is started again. Nothing here waits for a restart, so the others keep being watched."""
        if self.nats is not None:
            server = self.nats
            code = server.proc.poll() if server.proc else -1
            self._watch("nats-server", self.nats_backoff, code, server.restart)
        for child in self.children:
            self._watch(child.name, child.backoff, child.proc.poll(), lambda c=child: self._respawn(c))

    def _respawn(self, child: Child) -> None:
        child.proc = self._popen(child.service, child.name, child.env)

    @staticmethod
    def _watch(name: str, backoff: Backoff, code: int | None, restart: Callable[[], object]) -> None:
        now = time.monotonic()
        if backoff.due is None:
            if code is not None:
                delay = backoff.died(now)
                say(f"{name} exited with status {code}; restarting in {delay:.1f}s")
            return
        if now < backoff.due:
            return
        backoff.started, backoff.due = now, None
        try:
            restart()
        except (OSError, RuntimeError) as exc:  # e.g. nats-server's port taken meanwhile
            delay = backoff.died(time.monotonic())
            say(f"{name} did not restart ({exc}); trying again in {delay:.1f}s")
            return
        say(f"{name} restarted")

    # -- readiness ------------------------------------------------------------------------------------
    def wait_ready(self, timeout: float) -> None:
        """Every service heard on the bus, then the gateway's /healthz says ok."""
        wanted = {s for s in self.services if s not in ENGINES}
        engines = self.engine_workers
        try:
            asyncio.run(self._wait_bus(wanted, engines, timeout))
        except ConnectionError as exc:  # e.g. a server certificate the CA does not verify
            raise StartupError(str(exc)) from exc
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
                    missing = sorted(wanted - heard) + ([f"engine workers ({len(workers)}/{engines})"] if len(workers) < engines else [])
                    raise StartupError(f"not ready within {timeout:.0f}s: {', '.join(missing)}")
                await asyncio.sleep(0.05)
        finally:
            await nc.close()

    def _check_alive(self) -> None:
        if self.nats is not None and not self.nats.alive():
            raise StartupError(f"nats-server exited during start-up; see {self.nats.log_file}")
        dead = self.dead()
        if dead:
            c = dead[0]
            raise StartupError(f"{c.name} exited with status {c.proc.returncode} during start-up")

    @property
    def gateway_url(self) -> str:
        return self.settings.gateway_url

    def health(self) -> dict:
        try:
            with urllib.request.urlopen(self.gateway_url + "/healthz", timeout=2) as r:
                return json.loads(r.read())
        except urllib.error.HTTPError as e:
            return json.loads(e.read() or b"{}")
        except OSError:
            return {}

    def health_ok(self) -> bool:
        """The gateway reports ok and already routes to every engine worker this topology started (it may
        have heard only the first one's announce when it became ready)."""
        body = self.health()
        return bool(body.get("ok")) and len(body.get("workers", [])) >= self.engine_workers


def embedded_tls(settings: Settings) -> ServerTLS | None:
    """The TLS of the embedded nats-server, from the settings; StartupError for a combination that cannot
    work (checked before anything starts): the client's files are read here too (bus.tls_context)."""
    from fakcore import bus

    s = settings
    if s.nats_url and s.nats_tls_server_cert:
        raise StartupError("FAK_NATS_TLS_SERVER_CERT is the certificate of the embedded nats-server, and with "
                           "FAK_NATS_URL set `fak up` starts none: configure TLS on that server instead")
    if not s.nats_url and s.stream_replicas > 1:
        raise StartupError(f"FAK_STREAM_REPLICAS={s.stream_replicas}: the embedded nats-server is one node; "
                           "replicas need a JetStream cluster (FAK_NATS_URL)")
    if s.nats_tls_server_cert and s.nats_tls_cert and not s.nats_tls_ca:
        raise StartupError("FAK_NATS_TLS_CERT with FAK_NATS_TLS_SERVER_CERT: the embedded nats-server verifies "
                           "client certificates with FAK_NATS_TLS_CA, which is not set")
    try:
        bus.tls_context(s)
    except ConnectionError as exc:
        raise StartupError(str(exc)) from exc
    if not s.nats_tls_server_cert or s.nats_url:
        return None
    return ServerTLS(s.nats_tls_server_cert, s.nats_tls_server_key, ca_file=s.nats_tls_ca if s.nats_tls_cert else "")


def judge_worker(settings: Settings, services: tuple[str, ...]) -> bool:
    """Whether the judge stage needs an engine worker of its own: it is on, and the topology's workers do not
    serve its model already (then they answer its questions too)."""
    s = settings
    return (s.screen_judge != "off" and "adjudicator" in services
            and not (any(e in services for e in ENGINES) and s.model == s.screen_judge_model))


def client_lines(url: str, models: tuple[str, ...]) -> list[str]:
    """What `fak up` prints once it is up: the models, and how each kind of client points at the gateway."""
    return [f"  models:      {', '.join(models) or '(the upstream routes)'}    health: {url}/healthz",
            f"  SDKs:        OPENAI_BASE_URL={url}/v1  ANTHROPIC_BASE_URL={url}  (google-genai: http_options base_url={url})",
            f"  Claude Code: ANTHROPIC_BASE_URL={url} claude",
            f"  Codex:       ~/.codex/config.toml: model_provider = \"fak\", [model_providers.fak] base_url = \"{url}/v1\", "
            "wire_api = \"responses\"",
            f"  Gemini CLI:  GEMINI_API_KEY=<key> GOOGLE_GEMINI_BASE_URL={url} gemini"]


def check_model(settings: Settings, services: tuple[str, ...]) -> None:
    """The engine's model must resolve before anything starts: a misspelt name or a missing file is one line,
    not a worker's traceback after the whole stack came up."""
    from fakcore.models.sources import ModelSourceError, resolve

    if not any(e in services for e in ENGINES):
        return
    try:
        resolve(settings.model, settings.cache_dir)
    except ModelSourceError as exc:
        raise StartupError(f"FAK_MODEL={settings.model}: {exc}") from exc


def check_judge(settings: Settings, services: tuple[str, ...]) -> None:
    """The judge's model must be there before anything starts (the adjudicator would wait for it in vain)."""
    from fakcore.models.sources import ModelSourceError, resolve

    if settings.screen_judge == "off" or "adjudicator" not in services:
        return
    if settings.screen_judge_method == "probe":
        from fakcore.screening.probe import head_path

        if not head_path(settings.screen_judge_model).is_file():
            raise StartupError(f"FAK_SCREEN_JUDGE_METHOD=probe: no probe head is shipped for {settings.screen_judge_model!r} "
                               f"(FAK_SCREEN_JUDGE_MODEL); set it to a model with a head in fakcore/data/screening/ "
                               f"(probe-<model>.npz), or FAK_SCREEN_JUDGE_METHOD=ask")
    try:
        resolve(settings.screen_judge_model, settings.cache_dir)
    except ModelSourceError as exc:
        raise StartupError(f"FAK_SCREEN_JUDGE={settings.screen_judge}: the judge's model is not available: {exc}") from exc


def cuda_devices(environ: Mapping[str, str], probe: Callable[[Mapping[str, str]], list[str]] | None = None) -> tuple[str, ...]:
    """The GPUs `fak up --cuda` starts an engine-cuda for, as CUDA_VISIBLE_DEVICES entries (one each): those the
    variable names, else every GPU the driver shows. `probe(environ)` lists the GPUs a worker would see (the
    default asks numba.cuda in a child process); StartupError naming what is missing when there are none, or
    fewer than the variable names."""
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and not visible.strip():
        raise StartupError("--cuda: CUDA_VISIBLE_DEVICES is set and empty, which hides every GPU; unset it or name "
                           "the GPUs (0,1,…)")
    try:
        gpus = (probe or probe_gpus)(environ)
    except StartupError as exc:
        raise StartupError(f"--cuda: {exc}") from exc
    if not gpus:
        raise StartupError("--cuda: no CUDA device: the driver shows no GPU")
    if visible is None:
        return tuple(str(i) for i in range(len(gpus)))
    entries = tuple(e.strip() for e in visible.split(","))
    if len(entries) > len(gpus):  # CUDA stops reading the list at the first entry it does not know
        raise StartupError(f"--cuda: CUDA_VISIBLE_DEVICES={visible} names {len(entries)} GPUs, the driver shows "
                           f"{len(gpus)} of them ({', '.join(gpus)}); name only GPUs that exist")
    return entries


def probe_gpus(environ: Mapping[str, str]) -> list[str]:
    """The names of the GPUs numba.cuda sees under `environ` (fak_engine_cuda.devices, in a child process: this
    one never initialises a driver); StartupError with its one line when it sees none."""
    env = {**environ, "NUMBA_ENABLE_CUDASIM": "0"}  # the simulator is a CPU: never counted as a GPU
    try:
        run = subprocess.run([sys.executable, "-m", f"{PACKAGES['engine-cuda']}.devices"], env=env,
                             capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise StartupError(f"no CUDA device: cannot ask numba.cuda ({exc})") from exc
    if run.returncode != 0:
        lines = run.stderr.strip().splitlines()
        reason = lines[-1] if lines else f"the probe exited with status {run.returncode}"
        if "no CUDA device" not in reason:  # e.g. numba.cuda not importable: the traceback's last line
            reason = f"no CUDA device: {reason}"
        raise StartupError(reason + nvidia_smi_note())
    return [line.split("\t", 1)[-1] for line in run.stdout.splitlines() if line.strip()]


def nvidia_smi_note() -> str:
    """When numba.cuda finds no GPU but nvidia-smi lists some: a hint that it is numba-cuda that is missing."""
    import shutil

    smi = shutil.which("nvidia-smi")
    if smi is None:
        return " (and there is no nvidia-smi: no NVIDIA driver is installed)"
    try:
        listed = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30).stdout.strip().splitlines()
    except (OSError, subprocess.TimeoutExpired):
        return ""
    if not listed:
        return " (nvidia-smi -L lists no GPU either)"
    return (f" (nvidia-smi -L lists {len(listed)} GPU(s): numba.cuda cannot use them; install numba-cuda with the "
            "CUDA libraries, `pip install \"numba-cuda[cu12]\"`)")


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


def say(text: str) -> None:
    print(f"fak up: {text}", file=sys.stderr, flush=True)


def services_for(table: RouteTable) -> tuple[str, ...]:
    """Every service, less the engine workers when every model goes upstream."""
    return START_ORDER if table.needs_engine else tuple(s for s in START_ORDER if s != "engine-cpu")


def admin_key_path(settings: Settings) -> Path:
    """Where `fak up` keeps the operator key it made (owner-only), for a system configured with none."""
    return cache_dir(settings.cache_dir) / "auth" / "admin.key"


def with_admin_key(settings: Settings) -> tuple[Settings, Path | None]:
    """Settings with an operator key: the configured ones, else one `fak up` made (kept across runs, mode 0600,
    handed to the gateway as a file so that it is on no command line), so that the console, `fak audit tail`
    and the audit endpoints work on a local system without restarting it with keys."""
    if settings.admin_keys or settings.admin_keys_file:
        return settings, None
    path = admin_key_path(settings)
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(f"fak-admin-{secrets.token_urlsafe(24)}\n")
    return settings.replace(admin_keys_file=str(path)), path


def engine_services(services: tuple[str, ...], workers: int, cuda: bool) -> tuple[str, ...]:
    """`services_for`'s services with the engines `fak up` was asked for: engine-cpu only with workers, engine-cuda
    with --cuda (where an engine is needed at all). StartupError when an engine is needed and none is left."""
    if not any(e in services for e in ENGINES):
        if cuda:
            raise StartupError("--cuda: every model goes upstream, so no in-kernel model is left for a GPU to serve")
        return services
    if workers < 0:
        raise StartupError(f"--workers {workers}: a number of engine-cpu workers, 0 or more")
    if workers == 0 and not cuda:
        raise StartupError("--workers 0 leaves no engine worker for the in-kernel model: add --cuda (a worker per GPU)")
    out = tuple(s for s in services if s != "engine-cpu" or workers > 0)
    if cuda:
        out = tuple(sorted({*out, "engine-cuda"}, key=ORDER.index))
    return out


def up(settings: Settings, workers: int = 1, cuda: bool = False) -> int:
    """The `fak up` command: start, report, supervise, stop."""
    t0 = time.monotonic()
    try:
        table = RouteTable.from_settings(settings)
        if settings.mcp:
            load_mcp(settings.mcp)
    except (RoutesError, McpConfigError) as exc:  # a misspelt routes or MCP servers file stops here, before anything starts
        say(str(exc))
        return 1
    try:  # the GPUs before anything starts: none (or no driver) is one line and exit 1, with nothing left running
        services = engine_services(services_for(table), workers, cuda)
        gpus = cuda_devices(os.environ) if "engine-cuda" in services else ()
    except StartupError as exc:
        say(str(exc))
        return 1
    settings, admin_file = with_admin_key(settings)
    topo = Topology(settings, workers=workers, services=services, cuda_devices=gpus)
    stopping = False

    def on_signal(signum, frame) -> None:
        nonlocal stopping
        stopping = True

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):  # a closed terminal stops the stack cleanly too
        signal.signal(sig, on_signal)
    try:
        topo.start()
    except StartupError as exc:
        say(str(exc))
        return 1
    s = topo.settings
    targets = None
    if s.prometheus_targets != "off":
        from fakcore.targets import Targets

        path = Path(s.prometheus_targets).expanduser() if s.prometheus_targets else cache_dir(s.cache_dir) / "prometheus" / "targets.json"
        targets = Targets(s, path).start()
    engines = [f"backend {s.backend}"] if "engine-cpu" in topo.services else []
    engines += [f"cuda on GPU {','.join(gpus)}"] if gpus else []
    serves = (f"model {s.model}, {' + '.join(engines)}" if engines else "") + \
        (f"{', ' if engines else ''}upstream {s.base_url or s.routes}" if table.upstreams else "")
    print(f"fak is up in {time.monotonic() - t0:.1f}s: gateway {topo.gateway_url}  ({serves}, "
          f"nats {s.nats_url}{f' embedded, data {topo.nats.data_dir}' if topo.nats else ''})", flush=True)
    for line in client_lines(topo.gateway_url, s.routed_models):
        print(line, flush=True)
    if admin_file is not None:
        print(f"  console:     {topo.gateway_url}/console  (admin key: {admin_file}; also what `fak audit tail` uses)", flush=True)
    if targets is not None:
        print(f"  Prometheus file-SD targets: {targets.path}", flush=True)
    try:
        topo.supervise(lambda: stopping)
    finally:
        say("stopping")
        if targets is not None:
            targets.stop()
        topo.stop()
    return 0
