"""The real SmolLM2-135M-Instruct through the whole running system, on both CPU backends.

The answers asserted are the model's own (the f32 reference's greedy ones), so the numba worker runs its
argmax-exact f32 path here; the default path (activations `auto`: int8 where the CPU has one) is
tests/integration/test_default_activations.py's."""

from __future__ import annotations

import json

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
    settings = base_settings(nats_server.url, model="smollm2-135m", backend=request.param, activations="f32", adjudicate=False)
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


def test_capital_of_france_responses_and_a_second_turn_from_the_store(smol):
    client = openai.OpenAI(base_url=smol.gateway_url + "/v1", api_key="-", max_retries=0, timeout=300)
    first = client.responses.create(model="smollm2-135m", input="What is the capital of France?", max_output_tokens=16,
                                    temperature=0)
    assert "Paris" in first.output_text and first.status == "completed"  # <|im_end|> ends the turn
    with client.responses.stream(model="smollm2-135m", input="And of Italy?", previous_response_id=first.id,
                                 max_output_tokens=16, temperature=0) as s:
        second = s.get_final_response()  # the SDK's helper: response.completed, every event in order
    assert "Rome" in second.output_text
    assert second.usage.input_tokens > first.usage.input_tokens + first.usage.output_tokens  # the first turn came along
    assert second.usage.input_tokens_details.cached_tokens > 0
    replay = client.responses.create(model="smollm2-135m", max_output_tokens=16, temperature=0, input=[
        {"role": "user", "content": "What is the capital of France?"},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": first.output_text}]},
        {"role": "user", "content": "And of Italy?"}])
    assert replay.output_text == second.output_text and replay.usage.input_tokens == second.usage.input_tokens


def test_a_function_tool_call_and_a_json_schema_answer_on_smollm2(smol):
    client = openai.OpenAI(base_url=smol.gateway_url + "/v1", api_key="-", max_retries=0, timeout=300)
    weather = {"type": "function", "name": "get_weather", "description": "The weather of a city",
               "parameters": {"type": "object", "properties": {"city": {"enum": ["Paris", "Rome"]}}, "required": ["city"]}}
    r = client.responses.create(model="smollm2-135m", input="What is the weather in Paris?", tools=[weather], max_output_tokens=40,
                                temperature=0, tool_choice={"type": "function", "name": "get_weather"})
    [call] = [o for o in r.output if o.type == "function_call"]
    assert call.name == "get_weather" and json.loads(call.arguments) == {"city": "Paris"}
    schema = {"type": "object", "properties": {"capital": {"type": "string", "maxLength": 20}}, "required": ["capital"]}
    r = client.responses.create(model="smollm2-135m", input="What is the capital of France? Answer in JSON.", max_output_tokens=40,
                                temperature=0, text={"format": {"type": "json_schema", "name": "capital", "schema": schema}})
    assert r.status == "completed" and "Paris" in json.loads(r.output_text)["capital"]


@pytest.mark.parametrize("tool_choice", [{"type": "custom", "name": "apply_patch"}, "required"], ids=["named", "required"])
def test_a_custom_tool_call_on_smollm2_follows_its_grammar(smol, tool_choice):
    """Forced by name, or by `required` with only custom tools. (Under `auto` SmolLM2 does not choose to call a
    tool; the grammar's hold on a call the model opens itself is tests/unit/engine/test_custom_tool_calls.py's.)"""
    client = openai.OpenAI(base_url=smol.gateway_url + "/v1", api_key="-", max_retries=0, timeout=300)
    grammar = 'start: "*** Begin Patch\\n*** Add File: " NAME ".txt\\n+" LINE "\\n*** End Patch\\n"\nNAME: /[a-z]{1,12}/\nLINE: /[A-Za-z ,.!]{1,40}/\n'
    r = client.responses.create(model="smollm2-135m", input="Create hello.txt saying Hello, world!", max_output_tokens=64,
                                temperature=0, tool_choice=tool_choice,
                                tools=[{"type": "custom", "name": "apply_patch", "description": "Write a patch.",
                                        "format": {"type": "grammar", "syntax": "lark", "definition": grammar}}])
    [call] = [o for o in r.output if o.type == "custom_tool_call"]
    lines = call.input.split("\n")
    assert lines[0] == "*** Begin Patch" and lines[1].startswith("*** Add File: ") and lines[3] == "*** End Patch", call.input

