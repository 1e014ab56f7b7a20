"""Real Codex CLI (`codex exec`, npm) on fak's own engine with real SmolLM2 weights: everything Codex sends is
served (no 4xx), and the turn completes.

Codex's default prompt (about 21 KB of base instructions, permission and environment blocks, its tools) is
~10k SmolLM2 tokens, beyond the model's 8k context: that is a 400 (context_length_exceeded) that no server
could avoid. So the run uses Codex's own options for a shorter prompt (`model_instructions_file`, no
permission or environment blocks); every item type, tool and field Codex sends is still in it."""

from __future__ import annotations

import re

import httpx
import pytest

from tests.conftest import smollm2
from tests.support.clients import codex_events, codex_exec

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def smol(nats_server, tmp_path_factory):
    # Codex sends no temperature, so the engine's default applies; greedy makes the turn one fixed text (sampled,
    # SmolLM2 sometimes rambles past the output limit and Codex fails the turn on `incomplete`).
    with smollm2(nats_server, tmp_path_factory.mktemp("codex-smol"), sampling="temperature=0") as topo:
        yield topo


def test_real_codex_on_the_in_kernel_engine(smol, tmp_path):
    instructions = tmp_path / "instructions.md"
    instructions.write_text("You are a coding agent in a terminal. Answer in one short sentence.\n")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    run = codex_exec(smol.gateway_url, workspace, "Say hello.", model="smollm2-135m", timeout=600, extra=(
        "-c", f"model_instructions_file={instructions}", "-c", "include_permissions_instructions=false",
        "-c", "include_environment_context=false"))
    events = codex_events(run.stdout)
    metrics = httpx.get(smol.gateway_url + "/metrics").text
    refused = re.findall(r'fak_gateway_requests_total\{route="responses",status="(4\d\d)"\} ([0-9.]+)', metrics)
    assert not [s for s, n in refused if float(n) > 0], refused
    assert run.returncode == 0 and events[-1]["type"] == "turn.completed", (events[-3:], run.stderr[-2000:])
    assert re.search(r'fak_gateway_requests_total\{route="responses",status="200"\} [1-9]', metrics)
