"""The real SmolLM2-135M-Instruct through the whole running system, on both CPU backends."""

from __future__ import annotations

import anthropic
import openai
import pytest

from fakcore.launcher import Topology
from fakcore.models.sources import pulled_path
from tests.conftest import base_settings, running

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", params=["reference", "numba"])
def smol(request, nats_server, tmp_path_factory):
    assert pulled_path("smollm2-135m").exists(), "SmolLM2 weights missing: run `fak model pull smollm2-135m` (make test does)"
    settings = base_settings(nats_server.url, model="smollm2-135m", backend=request.param, adjudicate=False)
    with running(Topology(settings, services=("engine-cpu", "gateway"), log_dir=tmp_path_factory.mktemp(f"smol-{request.param}")), timeout=240) as topo:
        yield topo


def test_capital_of_france_openai(smol):
    client = openai.OpenAI(base_url=smol.gateway_url + "/v1", api_key="-", max_retries=0, timeout=300)
    r = client.chat.completions.create(model="smollm2-135m", messages=[{"role": "user", "content": "What is the capital of France?"}],
                                       max_tokens=16, temperature=0)
    assert "Paris" in r.choices[0].message.content
    assert r.choices[0].finish_reason == "stop"  # <|im_end|> ends the turn


def test_capital_of_france_anthropic_stream(smol):
    client = anthropic.Anthropic(base_url=smol.gateway_url, api_key="-", max_retries=0, timeout=300)
    with client.messages.stream(model="smollm2-135m", max_tokens=16, extra_body={"temperature": 0},
                                messages=[{"role": "user", "content": "What is the capital of France?"}]) as s:
        text = "".join(s.text_stream)
        final = s.get_final_message()
    assert "Paris" in text and final.stop_reason == "end_turn"
