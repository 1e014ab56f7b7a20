"""Tool calls and structured output through both wires (synthetic model; the grammar makes even random
weights emit a schema-valid call)."""

from __future__ import annotations

import json

import anthropic
import jsonschema
import openai
import pytest

WEATHER = {"type": "object", "properties": {"city": {"type": "string", "enum": ["Paris", "Rome", "Oslo"]},
                                            "days": {"type": "integer", "minimum": 1, "maximum": 7}},
           "required": ["city", "days"]}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Forecast", "parameters": WEATHER}},
         {"type": "function", "function": {"name": "send_email", "parameters": {"type": "object", "properties": {"to": {"type": "string"}}}}}]
GREEDY = {"temperature": 0}


@pytest.fixture(scope="module")
def oai(topology):
    return openai.OpenAI(base_url=topology.gateway_url + "/v1", api_key="-", max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def claude(topology):
    return anthropic.Anthropic(base_url=topology.gateway_url, api_key="-", max_retries=0, timeout=120)


def test_openai_named_tool_choice_yields_a_valid_call(oai):
    r = oai.chat.completions.create(model="synthetic", messages=[{"role": "user", "content": "Weather in Rome?"}], tools=TOOLS,
                                    tool_choice={"type": "function", "function": {"name": "get_weather"}}, max_tokens=200, temperature=0)
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls"
    [call] = choice.message.tool_calls
    assert call.type == "function" and call.function.name == "get_weather" and call.id.startswith("call_")
    jsonschema.validate(json.loads(call.function.arguments), WEATHER)
    assert not choice.message.content


def test_openai_tool_call_streams_as_tool_call_deltas(oai):
    kw = dict(model="synthetic", messages=[{"role": "user", "content": "Weather?"}], tools=TOOLS, tool_choice="required",
              max_tokens=200, temperature=0)
    full = oai.chat.completions.create(**kw).choices[0].message.tool_calls[0]
    chunks = list(oai.chat.completions.create(stream=True, **kw))
    deltas = [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
    assert deltas and deltas[0].function.name == full.function.name
    assert "".join(d.function.arguments or "" for d in deltas) == full.function.arguments
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["tool_calls"]
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == ""


def test_openai_tool_result_round_trip(oai):
    first = oai.chat.completions.create(model="synthetic", messages=[{"role": "user", "content": "Weather?"}], tools=TOOLS,
                                        tool_choice={"type": "function", "function": {"name": "get_weather"}}, max_tokens=200,
                                        temperature=0).choices[0].message
    r = oai.chat.completions.create(model="synthetic", tools=TOOLS, max_tokens=8, temperature=0, messages=[
        {"role": "user", "content": "Weather?"}, first.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": first.tool_calls[0].id, "content": "sunny, 21C"}])
    assert r.choices[0].finish_reason in ("length", "stop", "tool_calls")


def test_openai_json_schema_response_format(oai):
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}, "n": {"type": "integer", "minimum": 0, "maximum": 99}},
              "required": ["ok", "n"]}
    r = oai.chat.completions.create(model="synthetic", messages=[{"role": "user", "content": "json"}], max_tokens=100, temperature=0,
                                    response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": schema}})
    jsonschema.validate(json.loads(r.choices[0].message.content), schema)
    assert r.choices[0].finish_reason == "stop"


def test_anthropic_forced_tool_use(claude):
    tools = [{"name": "get_weather", "description": "Forecast", "input_schema": WEATHER}]
    r = claude.messages.create(model="synthetic", max_tokens=200, tools=tools, tool_choice={"type": "tool", "name": "get_weather"},
                               messages=[{"role": "user", "content": "Weather in Oslo?"}], extra_body=GREEDY)
    assert r.stop_reason == "tool_use"
    [block] = [b for b in r.content if b.type == "tool_use"]
    assert block.name == "get_weather" and block.id.startswith("toolu_")
    jsonschema.validate(block.input, WEATHER)


def test_anthropic_forced_tool_use_streaming(claude):
    tools = [{"name": "get_weather", "input_schema": WEATHER}]
    kw = dict(model="synthetic", max_tokens=200, tools=tools, tool_choice={"type": "any"},
              messages=[{"role": "user", "content": "Weather?"}], extra_body=GREEDY)
    with claude.messages.stream(**kw) as stream:
        types = [e.type for e in stream]
        final = stream.get_final_message()
    assert final.stop_reason == "tool_use"
    [block] = [b for b in final.content if b.type == "tool_use"]
    jsonschema.validate(block.input, WEATHER)
    assert "content_block_start" in types and types[-1] == "message_stop"


def test_anthropic_tool_result_round_trip(claude):
    tools = [{"name": "get_weather", "input_schema": WEATHER}]
    first = claude.messages.create(model="synthetic", max_tokens=200, tools=tools, tool_choice={"type": "any"},
                                   messages=[{"role": "user", "content": "Weather?"}], extra_body=GREEDY)
    use = next(b for b in first.content if b.type == "tool_use")
    r = claude.messages.create(model="synthetic", max_tokens=8, tools=tools, extra_body=GREEDY, messages=[
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": [b.model_dump() for b in first.content]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "sunny"}]}])
    assert r.usage.input_tokens > first.usage.input_tokens


def test_tool_choice_naming_an_unknown_tool_is_400(oai):
    with pytest.raises(openai.BadRequestError):
        oai.chat.completions.create(model="synthetic", messages=[{"role": "user", "content": "x"}], tools=TOOLS,
                                    tool_choice={"type": "function", "function": {"name": "nope"}}, max_tokens=5)
