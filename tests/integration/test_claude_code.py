"""Real Claude Code (npm @anthropic-ai/claude-code, pinned in clients/) driven headless through the gateway:
`claude -p` with ANTHROPIC_BASE_URL at fak, once routed to a scripted Anthropic upstream that asks for a Bash
tool call and then answers, and once against fak's in-kernel engine (the synthetic model)."""

from __future__ import annotations

import json
import re
import subprocess

import httpx
import pytest

from fakcore.launcher import Topology
from fakcore.protocol import block_id
from tests.conftest import base_settings, routed, running
from tests.integration.test_quarantine import audit
from tests.support.clients import claude_args, claude_env
from tests.support.upstreams import AnthropicUpstream, text, tool_use

pytestmark = pytest.mark.slow
ADMIN = "ops-key"


def run_claude(base_url: str, home, prompt: str, timeout: float = 240, extra: tuple[str, ...] = (), ok: bool = True,
               **env: str) -> dict:
    """One headless run; its JSON result. ok: the run must succeed (else only produce a result)."""
    proc = subprocess.run(claude_args(prompt, extra=extra), env=claude_env(base_url, "sk-claude-test", home, **env),
                          capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL, cwd=home)
    why = f"claude exited {proc.returncode}\nstdout: {proc.stdout[-2000:]}\nstderr: {proc.stderr[-2000:]}"
    assert proc.returncode == 0 or not ok, why
    assert proc.stdout.strip().startswith("{"), why
    return json.loads(proc.stdout)


def statuses(url: str, route: str) -> dict[str, float]:
    """fak_gateway_requests_total{route=...} by status, from the gateway's Prometheus text."""
    text_ = httpx.get(url + "/metrics").text
    found = re.findall(r'fak_gateway_requests_total\{route="' + route + r'",status="(\d+)"\} ([0-9.e+]+)', text_)
    return {s: float(n) for s, n in found}


def test_claude_code_through_fak_to_an_anthropic_upstream(nats_server, tmp_path):
    with AnthropicUpstream([tool_use("Bash", {"command": "echo hi", "description": "say hi"}), text("The command printed: hi")]) as up:
        with routed(nats_server, tmp_path, {"claude": {"url": up.url, "wire": "anthropic"}}, [{"model": "*", "upstream": "claude"}],
                    services=("adjudicator", "kvmmu", "gateway"), admin_keys=(ADMIN,)) as topo:
            home = tmp_path / "home"
            home.mkdir()
            result = run_claude(topo.gateway_url, home, "Run the shell command `echo hi` and tell me what it printed.")
            assert not result["is_error"] and "hi" in result["result"]
            calls = up.requests_to("/v1/messages")
            assert len(calls) == 2 and all(c.header("x-api-key") == "sk-claude-test" for c in calls)
            # the tool really ran: its output came back as the tool_result of the second turn
            [res] = [b for m in calls[1].json()["messages"] if isinstance(m["content"], list) for b in m["content"]
                     if b.get("type") == "tool_result"]
            content = res["content"] if isinstance(res["content"], str) else "".join(p.get("text", "") for p in res["content"])
            assert content.strip() == "hi"
            # and went through screening before it reached the upstream
            screened = [r for r in audit(topo.gateway_url, kind="result") if r.get("block") == block_id(content)]
            assert screened and screened[0]["outcome"] == "clean"
            assert set(statuses(topo.gateway_url, "messages")) == {"200"}


def test_claude_code_on_the_in_kernel_engine_gets_no_4xx(nats_server, tmp_path):
    """Everything Claude Code sends (thinking, system-role messages, metadata, context management) is accepted
    by the in-kernel path. The synthetic model's answer is sampled noise: it may end its turn, or keep writing
    until Claude Code's own output limit stops the run (its error, api_error_status null) — either way no
    request of Claude Code's is refused by fak."""
    settings = base_settings(nats_server.url)
    with running(Topology(settings, log_dir=tmp_path / "logs")) as topo:
        home = tmp_path / "home"
        home.mkdir()
        # a 4k-token toy model: its answers are kept short, as a user of a small local model would set it
        result = run_claude(topo.gateway_url, home, "Say hello.", ANTHROPIC_MODEL="synthetic", CLAUDE_CODE_MAX_OUTPUT_TOKENS="256",
                            extra=("--system-prompt", "Answer in one line.", "--tools", ""), ok=False)
        assert result["num_turns"] >= 1 and result.get("api_error_status") is None, result
        assert not result["is_error"] or result.get("api_error") == "max_output_tokens", result
        seen = statuses(topo.gateway_url, "messages")
        assert seen and set(seen) == {"200"}, f"the gateway answered Claude Code with {seen}"
