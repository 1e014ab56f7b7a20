"""Real Gemini CLI (`gemini -p`, npm) on fak's own engine with real SmolLM2 weights: everything the CLI sends
is served (no 4xx) and the turn completes with the model's answer (sampled at the CLI's own settings).

The CLI's default prompt (about 31 KB of system instructions plus its tools' declarations) is beyond
SmolLM2's 8k context: a 400 (context_length_exceeded) that no server could avoid. So the run uses the CLI's
own options for a shorter prompt: GEMINI_SYSTEM_MD (a system prompt file of the user's) and `tools.core`
(one core tool); the request is still the CLI's own stream request, with its tool declaration,
thinkingConfig and every field it sends."""

from __future__ import annotations

import pytest

from tests.conftest import smollm2
from tests.integration.test_gemini import statuses
from tests.support.clients import gemini_run

pytestmark = pytest.mark.slow


# The CLI sends no maxOutputTokens (the wire's default is Gemini's 8192), and at its temperature 1 SmolLM2 now
# and then rambles that long: minutes on 2 cores. Its own settings bound the reply (modelConfigs overrides, for
# the model and for the chat alias it resolves through).
BOUNDED = [{"match": {"model": m}, "modelConfig": {"generateContentConfig": {"maxOutputTokens": 256}}}
           for m in ("smollm2-135m", "chat-base")]


@pytest.fixture(scope="module")
def smol(nats_server, tmp_path_factory):
    with smollm2(nats_server, tmp_path_factory.mktemp("gemini-smol")) as topo:
        yield topo


def test_real_gemini_cli_on_the_in_kernel_engine(smol, tmp_path):
    system = tmp_path / "system.md"
    system.write_text("You are a helpful assistant. Answer briefly.\n")
    run, result = gemini_run(smol.gateway_url, tmp_path, "What is the capital of France?", model="smollm2-135m", timeout=600,
                             settings={"tools": {"core": ["read_file"]}, "modelConfigs": {"customOverrides": BOUNDED}},
                             GEMINI_SYSTEM_MD=str(system))
    # the CLI samples at its own settings (temperature 1, topP 0.95, topK 64): the text is the model's, not fixed
    assert run.returncode == 0 and result.get("response", "").strip(), (run.stdout[-2000:], run.stderr[-2000:])
    used = result["stats"]["models"]["smollm2-135m"]
    assert used["api"]["totalErrors"] == 0 and used["tokens"]["prompt"] > 0
    assert not [s for s in statuses(smol, "gemini_stream") if not s.startswith("2")], statuses(smol, "gemini_stream")
    assert statuses(smol, "gemini_stream").get("200", 0) >= 1
