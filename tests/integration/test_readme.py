"""The README's quickstart works as written: `fak up` (what `make up` runs) prints where it is and how each
client points at it, and the README's own code blocks (its ```python and `curl` snippets) run against it and
print answers. Only the address changes: tests never bind 8080."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import free_port

pytestmark = pytest.mark.slow

README = Path(__file__).parents[2] / "README.md"
DEFAULT = "127.0.0.1:8080"


def blocks(language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", README.read_text(), flags=re.S | re.M)


@pytest.fixture(scope="module")
def fak_up(tmp_path_factory):
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAK_")}
    env["FAK_CACHE_DIR"] = str(tmp_path_factory.mktemp("cache"))  # where fak up keeps the operator key it makes
    proc = subprocess.Popen([sys.executable, "-m", "fakcore.cli", "up", "--port", str(port), "--data-dir", "temp"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True).start()  # type: ignore[arg-type]
    try:
        deadline = time.monotonic() + 240
        while not any(line.startswith("fak is up") for line in lines):
            assert proc.poll() is None and time.monotonic() < deadline, "".join(lines[-40:])
            time.sleep(0.2)
        time.sleep(0.5)  # the lines printed after "fak is up"
        yield f"127.0.0.1:{port}", lines, env
    finally:
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C, as the README says
        try:
            assert proc.wait(timeout=60) == 0, "".join(lines[-40:])
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)


def test_fak_up_says_where_it_is_and_how_clients_point_at_it(fak_up):
    address, lines, _ = fak_up
    out = "".join(lines)
    assert f"gateway http://{address}" in out and "models:      synthetic" in out
    for client in (f"ANTHROPIC_BASE_URL=http://{address} claude", f"OPENAI_BASE_URL=http://{address}/v1",
                   f"GOOGLE_GEMINI_BASE_URL=http://{address} gemini", f'base_url = "http://{address}/v1"'):
        assert client in out, out


def test_the_readmes_python_snippets_run_and_print_answers(fak_up):
    address, _, _ = fak_up
    snippets = blocks("python")
    assert snippets, "the README has no python snippet"
    for code in snippets:
        run = subprocess.run([sys.executable, "-c", code.replace(DEFAULT, address)], capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, run.stderr
        printed = [line for line in run.stdout.splitlines() if line.strip()]
        assert len(printed) == code.count("print("), run.stdout  # each print shows an answer


def test_the_readmes_curl_lines_run(fak_up):
    address, _, _ = fak_up
    curls = [line for code in blocks("sh") for line in code.splitlines() if line.startswith("curl ")]
    assert curls and shutil.which("curl"), "curl lines, and curl to run them"
    for line in curls:
        run = subprocess.run(line.replace(DEFAULT, address), shell=True, capture_output=True, text=True, timeout=30)
        assert run.returncode == 0, (line, run.stderr)
        answer = json.loads(run.stdout)  # every route the README curls answers JSON
        assert "error" not in answer, (line, answer)
        if "/healthz" in line:
            assert answer["ok"] is True, answer  # ready: every routed model has a warm worker


def test_the_operator_key_fak_up_made_opens_the_audit_log(fak_up):
    """Configured with no keys, fak up makes an operator key (owner-only, kept in the cache dir) and says
    where; `fak audit tail` finds it by itself."""
    address, lines, env = fak_up
    key = Path(env["FAK_CACHE_DIR"]) / "auth" / "admin.key"
    assert f"console:     http://{address}/console  (admin key: {key}" in "".join(lines)
    assert key.stat().st_mode & 0o777 == 0o600 and key.read_text().startswith("fak-admin-")
    port = address.rsplit(":", 1)[1]
    tail = subprocess.run([sys.executable, "-m", "fakcore.cli", "audit", "tail", "--no-follow"], capture_output=True, text=True,
                          timeout=60, env={**env, "FAK_PORT": port})
    assert tail.returncode == 0, tail.stderr
    refused = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", f"http://{address}/v1/fak/audit"],
                             capture_output=True, text=True, timeout=30)
    assert refused.stdout in ("401", "403")  # without the key: refused
