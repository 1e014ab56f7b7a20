"""The gateway's three chat wires over HTTP, without NATS (support.gateway: the real app, a scripted engine):
each answers in its own response and stream shape, hands the engine the request it was sent, and refuses
bad input in its own error shape before any engine sees it."""

from __future__ import annotations

import json

import pytest

from fak_gateway.errors import WireError
from fakcore.protocol import ToolCall
from tests.unit.gateway.support import (
    MODEL,
    PROMPT_TOKENS,
    TOKENS,
    FakeEngines,
    gateway,
    settings,
    sse_data,
    sse_events,
)

TEXT = "".join(TOKENS)
CALL = ToolCall(id="call_7", name="get_weather", arguments='{"city": "Paris"}')
USER = [{"role": "user", "content": "Weather?"}]


def chat(**extra) -> dict:
    return {"model": MODEL, "messages": USER, "max_tokens": 5, **extra}


def messages(**extra) -> dict:
    return {"model": MODEL, "max_tokens": 5, "system": "Be brief.", "messages": USER, **extra}


def responses(**extra) -> dict:
    return {"model": MODEL, "input": "Weather?", "max_output_tokens": 5, **extra}


# -- OpenAI chat completions --------------------------------------------------------------------------------


async def test_chat_completion_shape_and_the_request_the_engine_got():
    engines = FakeEngines(settings())
    async with gateway(engines) as client:
        r = await client.post("/v1/chat/completions", json=chat(temperature=0, stop=["\n\n"]))
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["object"] == "chat.completion" and body["model"] == MODEL and body["id"] == engines.sent[0].request_id
    assert body["choices"] == [{"index": 0, "message": {"role": "assistant", "content": TEXT}, "finish_reason": "stop",
                                "logprobs": None}]
    assert body["usage"] == {"prompt_tokens": PROMPT_TOKENS, "completion_tokens": 3, "total_tokens": PROMPT_TOKENS + 3,
                             "prompt_tokens_details": {"cached_tokens": 4}}
    assert r.headers["x-fak-worker"] == "w1" and r.headers["x-fak-backend"] == "reference"
    [sent] = engines.sent
    assert [(m.role, m.content) for m in sent.messages] == [("user", "Weather?")]
    assert (sent.sampling.max_tokens, sent.sampling.temperature, sent.sampling.stop) == (5, 0, ["\n\n"])


async def test_chat_stream_sends_role_deltas_finish_usage_and_done():
    async with gateway(FakeEngines(settings())) as client:
        r = await client.post("/v1/chat/completions", json=chat(stream=True, stream_options={"include_usage": True}))
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    *chunks, done = sse_data(r.text)
    assert done == "[DONE]" and {c["object"] for c in chunks} == {"chat.completion.chunk"}
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    deltas = [c["choices"][0]["delta"].get("content", "") for c in chunks[1:-2]]
    assert deltas == list(TOKENS)
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop" and chunks[-2]["choices"][0]["delta"] == {}
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 3


async def test_chat_tool_call_in_both_modes():
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
    async with gateway(FakeEngines(settings(), tokens=(), calls=[CALL])) as client:
        whole = (await client.post("/v1/chat/completions", json=chat(tools=tools))).json()
        streamed = sse_data((await client.post("/v1/chat/completions", json=chat(tools=tools, stream=True))).text)
    call = {"id": "call_7", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
    choice = whole["choices"][0]
    assert choice["finish_reason"] == "tool_calls" and choice["message"] == {"role": "assistant", "content": None,
                                                                             "tool_calls": [call]}
    deltas = [c["choices"][0]["delta"] for c in streamed[:-1] if c["choices"]]
    assert [d["tool_calls"] for d in deltas if "tool_calls" in d] == [[{"index": 0, **call}]]
    assert streamed[-2]["choices"][0]["finish_reason"] == "tool_calls"


# -- Anthropic messages -------------------------------------------------------------------------------------


async def test_message_shape_and_the_request_the_engine_got():
    engines = FakeEngines(settings())
    async with gateway(engines) as client:
        r = await client.post("/v1/messages", json=messages())
    assert r.status_code == 200, r.text
    body = r.json()
    assert (body["type"], body["role"], body["model"]) == ("message", "assistant", MODEL)
    assert body["content"] == [{"type": "text", "text": TEXT}]
    assert (body["stop_reason"], body["stop_sequence"]) == ("end_turn", None)
    # Anthropic counts cached prompt tokens apart from the rest
    assert body["usage"] == {"input_tokens": PROMPT_TOKENS - 4, "output_tokens": 3, "cache_read_input_tokens": 4,
                             "cache_creation_input_tokens": 0}
    [sent] = engines.sent
    assert [(m.role, m.content) for m in sent.messages] == [("system", "Be brief."), ("user", "Weather?")]
    assert sent.sampling.max_tokens == 5


async def test_message_stream_follows_anthropics_event_order():
    async with gateway(FakeEngines(settings())) as client:
        r = await client.post("/v1/messages", json=messages(stream=True))
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    assert sse_events(r.text) == ["message_start", "content_block_start", "ping", *["content_block_delta"] * 3,
                                  "content_block_stop", "message_delta", "message_stop"]
    data = sse_data(r.text)
    assert [d["type"] for d in data] == sse_events(r.text)  # every event's data names it
    assert data[0]["message"]["usage"]["input_tokens"] == PROMPT_TOKENS and data[0]["message"]["content"] == []
    assert "".join(d["delta"]["text"] for d in data if d["type"] == "content_block_delta") == TEXT
    assert data[-2]["delta"] == {"stop_reason": "end_turn", "stop_sequence": None} and data[-2]["usage"]["output_tokens"] == 3


async def test_message_tool_use_in_both_modes():
    tools = [{"name": "get_weather", "input_schema": {"type": "object"}}]
    async with gateway(FakeEngines(settings(), tokens=(), calls=[CALL])) as client:
        whole = (await client.post("/v1/messages", json=messages(tools=tools))).json()
        streamed = sse_data((await client.post("/v1/messages", json=messages(tools=tools, stream=True))).text)
    use = {"type": "tool_use", "id": "toolu_7", "name": "get_weather", "input": {"city": "Paris"}}
    assert whole["content"] == [use] and whole["stop_reason"] == "tool_use"
    [start] = [d for d in streamed if d["type"] == "content_block_start"]
    assert start["content_block"] == {**use, "input": {}}
    [delta] = [d for d in streamed if d["type"] == "content_block_delta"]
    assert json.loads(delta["delta"]["partial_json"]) == use["input"]
    assert streamed[-2]["delta"]["stop_reason"] == "tool_use"


# -- OpenAI Responses ---------------------------------------------------------------------------------------


async def test_response_shape_stored_chained_and_deleted():
    engines = FakeEngines(settings())
    async with gateway(engines) as client:
        r = await client.post("/v1/responses", json=responses(instructions="Be brief.", metadata={"k": "v"}, truncation="auto",
                                                              temperature=0.3, top_p=0.5))
        assert r.status_code == 200, r.text
        first = r.json()
        assert (first["object"], first["status"], first["model"], first["store"]) == ("response", "completed", MODEL, True)
        [item] = first["output"]
        assert (item["type"], item["role"], item["status"]) == ("message", "assistant", "completed")
        assert [(c["type"], c["text"]) for c in item["content"]] == [("output_text", TEXT)]
        assert first["usage"] == {"input_tokens": PROMPT_TOKENS, "input_tokens_details": {"cached_tokens": 4}, "output_tokens": 3,
                                  "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": PROMPT_TOKENS + 3}
        assert (first["metadata"], first["truncation"], first["max_output_tokens"], first["temperature"], first["top_p"]) == (
            {"k": "v"}, "auto", 5, 0.3, 0.5)
        assert "truncation" in r.headers["x-fak-ignored"].split(",")  # accepted, not acted on: the engine never truncates
        sampling = engines.sent[0].sampling
        assert (sampling.max_tokens, sampling.temperature, sampling.top_p) == (5, 0.3, 0.5)
        assert (await client.get(f"/v1/responses/{first['id']}")).json() == first

        second = await client.post("/v1/responses", json=responses(input="And tomorrow?", previous_response_id=first["id"]))
        assert second.status_code == 200 and second.json()["previous_response_id"] == first["id"]
        assert [(m.role, m.content) for m in engines.sent[1].messages] == [
            ("user", "Weather?"), ("assistant", TEXT), ("user", "And tomorrow?")]

        gone = await client.delete(f"/v1/responses/{first['id']}")
        assert gone.json() == {"id": first["id"], "object": "response", "deleted": True}
        missing = await client.get(f"/v1/responses/{first['id']}")
    assert missing.status_code == 404 and missing.json()["error"]["type"] == "invalid_request_error"
    assert [(m.role, m.content) for m in engines.sent[0].messages] == [("system", "Be brief."), ("user", "Weather?")]


async def test_response_stream_follows_openais_event_order_with_consecutive_numbers():
    async with gateway(FakeEngines(settings())) as client:
        r = await client.post("/v1/responses", json=responses(stream=True))
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    assert sse_events(r.text) == [
        "response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
        *["response.output_text.delta"] * 3, "response.output_text.done", "response.content_part.done",
        "response.output_item.done", "response.completed"]
    data = sse_data(r.text)
    assert [d["sequence_number"] for d in data] == list(range(len(data)))
    assert "".join(d["delta"] for d in data if d["type"] == "response.output_text.delta") == TEXT
    final = data[-1]["response"]
    assert final["status"] == "completed" and final["output"][0]["content"][0]["text"] == TEXT


async def test_response_function_call_in_both_modes():
    tools = [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}]
    async with gateway(FakeEngines(settings(), tokens=(), calls=[CALL])) as client:
        whole = (await client.post("/v1/responses", json=responses(tools=tools))).json()
        streamed = sse_data((await client.post("/v1/responses", json=responses(tools=tools, stream=True))).text)
    [item] = whole["output"]
    assert {k: item[k] for k in ("type", "call_id", "name", "arguments", "status")} == {
        "type": "function_call", "call_id": "call_7", "name": "get_weather", "arguments": '{"city": "Paris"}',
        "status": "completed"}
    assert [d["type"] for d in streamed] == [
        "response.created", "response.in_progress", "response.output_item.added", "response.function_call_arguments.delta",
        "response.function_call_arguments.done", "response.output_item.done", "response.completed"]
    added, delta, done, item_done = streamed[2:6]
    assert added["item"]["status"] == "in_progress" and added["item"]["arguments"] == ""
    assert delta["delta"] == done["arguments"] == item_done["item"]["arguments"] == '{"city": "Paris"}'
    assert delta["item_id"] == done["item_id"] == item_done["item"]["id"] == added["item"]["id"]
    assert done["name"] == "get_weather" and item_done["item"]["call_id"] == "call_7"
    assert [d["sequence_number"] for d in streamed] == list(range(len(streamed)))
    assert streamed[-1]["response"]["output"][0]["call_id"] == "call_7"


async def test_response_custom_tool_call_in_both_modes():
    """A call to a custom tool (one string argument on the bus) comes back as a custom_tool_call with raw input."""
    tools = [{"type": "custom", "name": "apply_patch", "format": {"type": "grammar", "syntax": "regex", "definition": "[a-z]+"}}]
    call = ToolCall(id="call_9", name="apply_patch", arguments=json.dumps({"input": "abc"}))
    engines = FakeEngines(settings(), tokens=(), calls=[call])
    async with gateway(engines) as client:
        whole = (await client.post("/v1/responses", json=responses(tools=tools))).json()
        streamed = sse_data((await client.post("/v1/responses", json=responses(tools=tools, stream=True))).text)
    [item] = whole["output"]
    assert {k: item[k] for k in ("type", "call_id", "name", "input")} == {"type": "custom_tool_call", "call_id": "call_9",
                                                                           "name": "apply_patch", "input": "abc"}
    assert [d["type"] for d in streamed[2:-1]] == ["response.output_item.added", "response.custom_tool_call_input.delta",
                                                   "response.custom_tool_call_input.done", "response.output_item.done"]
    assert streamed[3]["delta"] == streamed[4]["input"] == "abc"
    assert [d["sequence_number"] for d in streamed] == list(range(len(streamed)))
    [spec] = engines.sent[0].tools  # on the bus: a function of one string, its grammar alongside
    assert (spec.kind, spec.parameters["required"], spec.format["definition"]) == ("custom", ["input"], "[a-z]+")


async def test_parallel_tool_calls_false_hands_out_the_first_call_only():
    tools = [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}]
    second = ToolCall(id="call_8", name="get_weather", arguments='{"city": "Rome"}')
    async with gateway(FakeEngines(settings(), tokens=(), calls=[CALL, second])) as client:
        both = (await client.post("/v1/responses", json=responses(tools=tools))).json()
        whole = (await client.post("/v1/responses", json=responses(tools=tools, parallel_tool_calls=False))).json()
        streamed = sse_data((await client.post("/v1/responses", json=responses(tools=tools, parallel_tool_calls=False,
                                                                               stream=True))).text)
    assert [o["call_id"] for o in both["output"]] == ["call_7", "call_8"] and both["parallel_tool_calls"] is True
    assert [o["call_id"] for o in whole["output"]] == ["call_7"] and whole["parallel_tool_calls"] is False
    assert [d["item"]["call_id"] for d in streamed if d["type"] == "response.output_item.done"] == ["call_7"]
    final = streamed[-1]["response"]
    assert [o["call_id"] for o in final["output"]] == ["call_7"] and final["parallel_tool_calls"] is False


async def test_a_response_cut_at_max_output_tokens_is_incomplete():
    async with gateway(FakeEngines(settings(), finish="length")) as client:
        whole = (await client.post("/v1/responses", json=responses())).json()
        streamed = sse_data((await client.post("/v1/responses", json=responses(stream=True))).text)
    assert (whole["status"], whole["incomplete_details"]) == ("incomplete", {"reason": "max_output_tokens"})
    assert streamed[-1]["type"] == "response.incomplete"
    assert streamed[-1]["response"]["incomplete_details"] == {"reason": "max_output_tokens"}


async def test_an_engine_failing_mid_stream_ends_it_with_error_and_response_failed():
    failure = WireError("timeout", "engine for synthetic went silent for 30s")
    async with gateway(FakeEngines(settings(), tokens=TOKENS[:1], error=failure)) as client:
        r = await client.post("/v1/responses", json=responses(stream=True))
        whole = await client.post("/v1/responses", json=responses())
    assert r.status_code == 200  # the stream had begun: the failure is told in it
    data = sse_data(r.text)
    assert [d["type"] for d in data] == ["response.created", "response.in_progress", "response.output_item.added",
                                         "response.content_part.added", "response.output_text.delta", "error", "response.failed"]
    assert [d["sequence_number"] for d in data] == list(range(len(data)))
    error, failed = data[-2], data[-1]["response"]
    assert (error["code"], error["message"]) == ("timeout", "engine for synthetic went silent for 30s")
    assert failed["status"] == "failed" and failed["error"] == {"code": "timeout", "message": error["message"]}
    assert failed["id"] == data[0]["response"]["id"] and failed["usage"] is None
    # not streamed, the same failure is the HTTP error, in OpenAI's shape
    assert whole.status_code == 504 and whole.json()["error"]["type"] == "timeout"


# -- errors: each wire's own shape, before any engine is asked ----------------------------------------------

WIRES = {  # wire -> (path, a good request for a model)
    "chat": ("/v1/chat/completions", lambda model: chat(model=model)),
    "messages": ("/v1/messages", lambda model: messages(model=model)),
    "responses": ("/v1/responses", lambda model: responses(model=model)),
}


def error_of(wire: str, body: dict) -> tuple[str, str]:
    """(error type, message), checking the envelope is the wire's: Anthropic's, or OpenAI's for the others."""
    if wire == "messages":
        assert body["type"] == "error" and set(body["error"]) == {"type", "message"}, body
    else:
        assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}, body
    return body["error"]["type"], body["error"]["message"]


@pytest.mark.parametrize("wire", WIRES)
@pytest.mark.parametrize("body", [b'{"model": "synthetic", "messages": [', b"", b"[1, 2]"], ids=["truncated", "empty", "array"])
async def test_bad_json_is_a_400_in_the_wires_shape(wire, body):
    engines = FakeEngines(settings())
    async with gateway(engines) as client:
        r = await client.post(WIRES[wire][0], content=body, headers={"content-type": "application/json"})
    assert r.status_code == 400, r.text
    assert error_of(wire, r.json())[0] == "invalid_request_error"
    assert engines.sent == []


@pytest.mark.parametrize("wire", WIRES)
@pytest.mark.parametrize("stream", [False, True])
async def test_unknown_model_is_a_404_in_the_wires_shape(wire, stream):
    engines = FakeEngines(settings())
    path, request = WIRES[wire]
    async with gateway(engines) as client:
        r = await client.post(path, json={**request("no-such-model"), "stream": stream})
    assert r.status_code == 404 and not r.headers["content-type"].startswith("text/event-stream")
    kind, message = error_of(wire, r.json())
    assert kind == ("not_found_error" if wire == "messages" else "invalid_request_error")
    assert "no-such-model" in message and MODEL in message  # names what is served instead
    if wire != "messages":
        assert r.json()["error"]["code"] == "model_not_found" and r.json()["error"]["param"] == "model"
    assert engines.sent == []


async def test_a_wrong_field_type_names_the_field_and_anthropic_needs_max_tokens():
    async with gateway(FakeEngines(settings())) as client:
        wrong = await client.post("/v1/chat/completions", json=chat(max_tokens="five"))
        unbounded = await client.post("/v1/messages", json={"model": MODEL, "messages": USER})
    assert wrong.status_code == 400 and "max_tokens" in error_of("chat", wrong.json())[1]
    assert unbounded.status_code == 400
    assert error_of("messages", unbounded.json())[0] == "invalid_request_error"
    assert "max_tokens" in unbounded.json()["error"]["message"]


@pytest.mark.parametrize("build", ["openai_request", "anthropic_request", "responses_request", "gemini_request"])
def test_an_upstream_is_sent_only_the_sampling_the_client_set(build):
    from fak_gateway import translate
    from fakcore.protocol import ChatMessage, GenerateRequest, Sampling

    def body(sampling: Sampling) -> dict:
        req = GenerateRequest(request_id="r", model=MODEL, messages=[ChatMessage(role="user", content="hi")], sampling=sampling)
        out = getattr(translate, build)(req) if build == "gemini_request" else getattr(translate, build)(req, MODEL)
        return out.get("generationConfig", out)

    unset, chosen = body(Sampling(max_tokens=5)), body(Sampling(max_tokens=5, temperature=0.3, top_p=0.5))
    assert not {"temperature", "top_p", "topP", "top_k", "topK"} & set(unset)  # the upstream's own defaults apply
    assert chosen["temperature"] == 0.3 and chosen.get("top_p", chosen.get("topP")) == 0.5
