"""The operator's commands against a running topology, as a user types them (`python -m fakcore.cli` is the
`fak` script): `fak status`, `fak audit tail`, `fak chat`, and the offline `fak policy check`, `fak model rm`."""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.request

import openai
import pytest

from fakcore.launcher import Topology
from fakcore.models.sources import PULLABLE
from tests.conftest import base_settings, running, wait_for
from tests.integration.test_quarantine import MARKER, PAYLOAD, conversation

ADMIN = "ops-admin-key"


def fak(*args: str, stdin: str | None = None, timeout: float = 60, **env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("FAK_")}
    return subprocess.run([sys.executable, "-m", "fakcore.cli", *args], input=stdin, capture_output=True, text=True,
                          timeout=timeout, env={**clean, **env})


@pytest.fixture(scope="module")
def topo(nats_server, tmp_path_factory):
    settings = base_settings(nats_server.url, admin_keys=(ADMIN,))
    with running(Topology(settings, log_dir=tmp_path_factory.mktemp("ops-logs"))) as t:
        yield t


def test_status_names_the_models_services_and_workers(topo):
    done = fak("status", "--url", topo.gateway_url)
    assert done.returncode == 0, done.stderr
    assert f"fak at {topo.gateway_url}: ready" in done.stdout
    assert "models:   synthetic" in done.stdout and "worker:" in done.stdout and "0 active" in done.stdout
    assert "adjudicator" in done.stdout and "kvmmu" in done.stdout
    # nothing configured and the synthetic model recommends nothing: llama.cpp's conservative sampling
    assert "sampling unless a request says: temperature=0.8, top_k=40, top_p=0.95" in done.stdout


def test_status_without_a_gateway_is_one_line_and_exit_1():
    done = fak("status", "--url", "http://127.0.0.1:9")
    assert done.returncode == 1 and done.stderr.count("\n") == 1 and "is `fak up` running?" in done.stderr


def test_audit_tail_shows_a_quarantine_and_its_eviction(topo):
    client = openai.OpenAI(base_url=topo.gateway_url + "/v1", api_key="-", max_retries=0, timeout=120)
    r = client.chat.completions.create(model="synthetic", messages=conversation("Weather?", PAYLOAD + " ops"), max_tokens=4,
                                       temperature=0)

    def tail() -> str | None:
        done = fak("audit", "tail", "--no-follow", "-n", "50", "--url", topo.gateway_url, "--key", ADMIN)
        assert done.returncode == 0, done.stderr
        ok = "result quarantine" in done.stdout and f"req={r.id}" in done.stdout and " eviction r" in done.stdout
        return done.stdout if ok else None

    out = wait_for(tail, timeout=30)
    assert MARKER not in out  # the log names what was decided, never the payload
    refused = fak("audit", "tail", "--no-follow", "--url", topo.gateway_url, "--key", "not-a-key")
    assert refused.returncode == 1 and "HTTP 40" in refused.stderr


def chats_served(url: str) -> float:
    """fak_gateway_requests_total{route="chat",status="200"} from the gateway's /metrics."""
    with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
        text = r.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("fak_gateway_requests_total{") and 'route="chat"' in line and 'status="200"' in line)


def test_chat_streams_each_turn(topo):
    before = chats_served(topo.gateway_url)
    done = fak("chat", "synthetic", "--url", topo.gateway_url, stdin="hello\n\nand again\n/exit\n", timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip()  # the synthetic model's replies (random text), streamed
    assert chats_served(topo.gateway_url) - before == 2  # a turn a non-empty line; /exit ends it
    unknown = fak("chat", "no-such-model", "--url", topo.gateway_url, stdin="hi\n")
    assert unknown.returncode == 1 and "no-such-model" in unknown.stderr and "synthetic" in unknown.stderr


def test_policy_check(tmp_path):
    good = fak("policy", "check", "deploy/policies/coding-agent.yaml")
    assert good.returncode == 0 and ": ok" in good.stdout, good.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text("tools:\n  rm:\n    action: maybe\n")
    refused = fak("policy", "check", str(bad))
    assert refused.returncode == 1 and str(bad) in refused.stderr and "maybe" in refused.stderr


def test_model_rm(tmp_path):
    name = "smollm2-135m"
    target = tmp_path / "models" / name / PULLABLE[name].filename
    target.parent.mkdir(parents=True)
    target.write_bytes(b"\0" * 1024)
    done = fak("model", "rm", name, "--cache-dir", str(tmp_path))
    assert done.returncode == 0 and "removed" in done.stdout and not target.parent.exists(), done.stderr
    again = fak("model", "rm", name, "--cache-dir", str(tmp_path))
    assert again.returncode == 0 and "not pulled" in again.stdout
    typo = fak("model", "rm", "smolm2", "--cache-dir", str(tmp_path))
    assert typo.returncode == 2 and "did you mean smollm2-135m?" in typo.stderr
