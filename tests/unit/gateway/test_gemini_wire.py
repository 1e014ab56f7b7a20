"""The Gemini wire without NATS: the decoder and translation (Gemini's Schema, contents, tool pairing, tool
config, generation config), the response and both stream framings through the real app (support.gateway),
Google's error shape, x-goog-api-key / key= auth, countTokens and the model list — and every request the
pinned Gemini CLI sends (tests/data/gemini) served in-kernel with no 4xx."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from fak_gateway import gemini_passthrough, gemini_schema, gemini_wire, translate
from fak_gateway.errors import WireError, wire_of
from fakcore.protocol import Accepted, ChatMessage, GenerateRequest, TokenChunk, ToolCall, ToolSpec, block_id
from tests.unit.gateway.support import PROMPT_TOKENS, RECEIPT, TOKENS, FakeEngines, gateway, settings

DATA = Path(__file__).parents[2] / "data" / "gemini"
TEXT = "".join(TOKENS)
CALL = ToolCall(id="call_7", name="get_weather", arguments='{"city": "Paris"}')
WEATHER = {"functionDeclarations": [{"name": "get_weather", "description": "Weather of a city", "parameters": {
    "type": "OBJECT", "properties": {"city": {"type": "STRING", "enum": ["Paris", "Rome"]}}, "required": ["city"]}}]}
GEN = "/v1beta/models/synthetic:generateContent"
STREAM = "/v1beta/models/synthetic:streamGenerateContent"


def body(*contents: dict, **extra: Any) -> dict:
    return {"contents": list(contents) or [user("Weather?")], **extra}


def user(text: str) -> dict:
    return {"role": "user", "parts": [{"text": text}]}


def fixture(name: str) -> dict:
    return json.loads((DATA / name).read_bytes())


def sse_chunks(text: str) -> list[dict]:
    return [json.loads(line[len("data: "):]) for line in text.split("\r\n") if line.startswith("data: ")]


# -- translation ----------------------------------------------------------------------------------------------


def test_geminis_schema_becomes_json_schema():
    schema = {"type": "OBJECT", "propertyOrdering": ["n", "tags"], "nullable": False, "properties": {
        "n": {"type": "INTEGER", "format": "int32", "nullable": True, "example": 3},
        "tags": {"type": "ARRAY", "minItems": "1", "items": {"type": "STRING", "format": "enum", "enum": ["a", "b"]}},
        "when": {"type": "STRING", "format": "date-time"}, "any": {"anyOf": [{"type": "NUMBER"}, {"type": "NULL"}]}}}
    assert gemini_schema.json_schema(schema) == {"type": "object", "properties": {
        "n": {"type": ["integer", "null"]}, "tags": {"type": "array", "minItems": 1, "items": {"type": "string", "enum": ["a", "b"]}},
        "when": {"type": "string", "format": "date-time"}, "any": {"anyOf": [{"type": "number"}, {"type": "null"}]}}}
    plain = {"type": "object", "properties": {"x": {"type": "string"}}, "required": ["x"], "additionalProperties": False}
    assert gemini_schema.json_schema(plain) == plain  # JSON Schema as it is


def test_contents_become_the_conversation_with_calls_paired_by_id_or_by_name():
    r = gemini_wire.decode_request(json.dumps({
        "systemInstruction": {"parts": [{"text": "Be brief."}]},
        "contents": [user("Weather in Paris and Rome?"),
                     {"role": "model", "parts": [{"text": "Let me", "thought": True}, {"text": "Checking"},
                                                 {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}},
                                                 {"functionCall": {"name": "get_weather", "args": {"city": "Rome"}, "id": "r1"},
                                                  "thoughtSignature": "c2ln"}]},
                     {"role": "user", "parts": [{"functionResponse": {"name": "get_weather", "id": "r1", "response": {"output": "Rain"}}},
                                                {"functionResponse": {"name": "get_weather", "response": {"temp": 24, "sky": "sun"}}},
                                                {"text": "Thanks."}]}]}).encode())
    req = gemini_wire.to_bus(r, "synthetic", "")
    roles = [(m.role, m.content) for m in req.messages]
    assert roles == [("system", "Be brief."), ("user", "Weather in Paris and Rome?"), ("assistant", "Checking"),
                     ("tool", "Rain"), ("tool", '{"temp":24,"sky":"sun"}'), ("user", "Thanks.")]
    paris, rome = req.messages[2].tool_calls
    assert rome.id == "r1" and json.loads(paris.arguments) == {"city": "Paris"} and paris.id
    assert [m.tool_call_id for m in req.messages if m.role == "tool"] == ["r1", paris.id]
    assert all(m.block == block_id(m.content) and m.name == "get_weather" for m in req.messages if m.role == "tool")
    assert gemini_wire.ignored(r) == ["part:thought", "part:thoughtSignature"]


def test_fields_by_their_proto_names_are_read_and_free_form_keys_kept():
    """Google's parser takes `parameters_json_schema` as well as `parametersJsonSchema` (google-genai 3.6 sends
    the former); the keys inside args, responses and schemas are the client's and stay as sent."""
    r = gemini_wire.decode_request(json.dumps({
        "system_instruction": {"parts": [{"text": "Be brief."}]},
        "contents": [{"role": "model", "parts": [{"function_call": {"name": "f", "args": {"max_items": 1}}}]},
                     {"role": "user", "parts": [{"function_response": {"name": "f", "response": {"top_k": 3}}}]}],
        "tools": [{"function_declarations": [{"name": "f", "parameters_json_schema": {"type": "object", "properties": {
            "max_items": {"type": "integer"}}}}]}, {"google_search": {}}],
        "tool_config": {"function_calling_config": {"mode": "ANY", "allowed_function_names": ["f"]}},
        "generation_config": {"max_output_tokens": 9, "top_k": 3, "response_mime_type": "application/json",
                              "response_schema": {"type": "ARRAY", "max_items": "2", "items": {"any_of": [{"type": "STRING"}]}}}}).encode())
    req = gemini_wire.to_bus(r, "synthetic", "")
    assert req.messages[0].content == "Be brief." and json.loads(req.messages[1].tool_calls[0].arguments) == {"max_items": 1}
    assert req.messages[2].content == '{"top_k":3}'
    assert req.tools[0].parameters["properties"] == {"max_items": {"type": "integer"}} and req.tool_choice_name == "f"
    assert (req.sampling.max_tokens, req.sampling.top_k) == (9, 3)
    assert req.response_schema == {"type": "array", "maxItems": 2, "items": {"anyOf": [{"type": "string"}]}}
    assert gemini_wire.ignored(r) == ["tool:googleSearch"]


@pytest.mark.parametrize("config,expected", [
    (None, ("auto", "", 2)), ({"mode": "NONE"}, ("none", "", 2)), ({"mode": "ANY"}, ("required", "", 2)),
    ({"mode": "ANY", "allowedFunctionNames": ["get_weather"]}, ("function", "get_weather", 2)),
    ({"mode": "ANY", "allowedFunctionNames": ["get_weather", "get_time"]}, ("required", "", 2)),
    ({"mode": "VALIDATED"}, ("auto", "", 2)),
])
def test_tool_config_modes(config, expected):
    tools = [WEATHER, {"functionDeclarations": [{"name": "get_time", "parametersJsonSchema": {"type": "object"}}]},
             {"googleSearch": {}}]
    r = gemini_wire.decode_request(json.dumps(body(tools=tools, **({"toolConfig": {"functionCallingConfig": config}}
                                                                    if config else {}))).encode())
    req = gemini_wire.to_bus(r, "synthetic", "")
    assert (req.tool_choice, req.tool_choice_name, len(req.tools)) == expected
    assert req.tools[0].parameters["properties"]["city"] == {"type": "string", "enum": ["Paris", "Rome"]}
    assert "tool:googleSearch" in gemini_wire.ignored(r)


def test_generation_config_and_json_output():
    r = gemini_wire.decode_request(json.dumps(body(generationConfig={
        "temperature": 0.2, "topP": 0.9, "topK": 40, "maxOutputTokens": 77, "stopSequences": ["END"], "seed": 5,
        "candidateCount": 1, "responseMimeType": "application/json", "responseSchema": {"type": "OBJECT", "properties": {
            "answer": {"type": "INTEGER"}}}, "thinkingConfig": {"thinkingBudget": 0}},
        safetySettings=[{"category": "HARM_CATEGORY_HARASSMENT", "threshold": "BLOCK_NONE"}], cachedContent="cachedContents/x",
        labels={"team": "a"})).encode())
    req = gemini_wire.to_bus(r, "synthetic", "")
    s = req.sampling
    assert (s.temperature, s.top_p, s.top_k, s.max_tokens, s.stop, s.seed) == (0.2, 0.9, 40, 77, ["END"], 5)
    assert req.response_schema == {"type": "object", "properties": {"answer": {"type": "integer"}}}
    assert gemini_wire.ignored(r) == ["safetySettings", "cachedContent", "labels", "generationConfig.thinkingConfig"]
    plain_json = gemini_wire.decode_request(json.dumps(body(generationConfig={"responseMimeType": "application/json"})).encode())
    assert gemini_wire.to_bus(plain_json, "synthetic", "").response_schema == {}


@pytest.mark.parametrize("bad,where", [
    ({"generationConfig": {"candidateCount": 2}}, "candidateCount"),
    ({"generationConfig": {"presencePenalty": 0.5}}, "presencePenalty"),
    ({"generationConfig": {"responseModalities": ["IMAGE"]}}, "responseModalities"),
    ({"generationConfig": {"responseMimeType": "text/x.enum"}}, "responseMimeType"),
    ({"generationConfig": {"responseSchema": {"type": "STRING"}}}, "responseMimeType"),
    ({"generationConfig": {"temperature": 3}}, "temperature"),
    ({"contents": [{"role": "robot", "parts": [{"text": "x"}]}]}, "role"),
    ({"contents": [{"role": "user", "parts": [{"inlineData": {"mimeType": "image/png", "data": "AA=="}}]}]}, "inlineData"),
    ({"contents": []}, "contents"),
    ({"toolConfig": {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["nope"]}}, "tools": [WEATHER]}, "nope"),
    ({"toolConfig": {"functionCallingConfig": {"mode": "SOMETIMES"}}}, "mode"),
])
def test_what_cannot_be_served_is_a_400_naming_it(bad, where):
    with pytest.raises(WireError) as e:
        gemini_wire.to_bus(gemini_wire.decode_request(json.dumps({**body(), **bad}).encode()), "synthetic", "")
    assert e.value.kind == "invalid_request" and where in e.value.message


def test_paths_and_errors_speak_googles_shape():
    assert gemini_wire.split_action("/gemini-2.5-flash:streamGenerateContent") == ("gemini-2.5-flash", "streamGenerateContent")
    assert gemini_wire.split_action("models/x") == ("x", "")
    assert [wire_of(p) for p in ("/v1beta/models", "/v1/models/x:generateContent", "/v1/models", "/v1/messages")] == [
        "gemini", "gemini", "openai", "anthropic"]
    assert WireError("overloaded", "busy").render("gemini") == (503, {"error": {"code": 503, "message": "busy", "status": "UNAVAILABLE"}})
    assert WireError("not_implemented", "no").google()[1]["error"]["status"] == "UNIMPLEMENTED"


def test_a_hosted_tools_name_stays_a_valid_header():
    r = gemini_wire.decode_request(json.dumps(body(tools=[{"søk\r\nx-evil: 1": {}}])).encode())
    assert gemini_wire.ignored(r) == ["tool:s%C3%B8k%0D%0Ax-evil%3A%201"]


def test_a_quarantined_function_response_is_replaced_in_the_passthrough():
    fr = {"name": "read_file", "id": "c1", "response": {"output": "poison"}}
    data = {"contents": [user("go"), {"role": "user", "parts": [{"functionResponse": fr}]}]}
    replaced, withheld = gemini_passthrough.redact(data, lambda b: "[quarantined]" if b == block_id("poison") else None)
    assert replaced == [block_id("poison")] and withheld == len("poison")
    assert data["contents"][1]["parts"][0]["functionResponse"] == {"name": "read_file", "id": "c1", "response": {"output": "[quarantined]"}}


def test_a_gemini_upstream_request_from_the_bus():
    req = GenerateRequest(request_id="r", model="m", tools=[ToolSpec(name="get_weather", parameters={"type": "object"})],
                          tool_choice="function", tool_choice_name="get_weather", response_schema=None, messages=[
                              ChatMessage(role="system", content="Be brief."), ChatMessage(role="user", content="Weather?"),
                              ChatMessage(role="assistant", content="", tool_calls=[CALL]),
                              ChatMessage(role="tool", content="Sunny", tool_call_id="call_7", name="get_weather")])
    out = translate.gemini_request(req)
    assert out["systemInstruction"] == {"parts": [{"text": "Be brief."}]}
    assert [c["role"] for c in out["contents"]] == ["user", "model", "user"]
    assert out["contents"][1]["parts"] == [{"functionCall": {"id": "call_7", "name": "get_weather", "args": {"city": "Paris"}},
                                            "thoughtSignature": translate.SKIP_THOUGHT_SIGNATURE}]
    assert out["contents"][2]["parts"] == [{"functionResponse": {"id": "call_7", "name": "get_weather", "response": {"output": "Sunny"}}}]
    assert out["toolConfig"] == {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["get_weather"]}}
    assert out["tools"][0]["functionDeclarations"][0]["parametersJsonSchema"] == {"type": "object"}


# -- through the app -----------------------------------------------------------------------------------------


async def test_generate_content_shape_and_the_request_the_engine_got():
    engines = FakeEngines(settings())
    async with gateway(engines) as client:
        r = await client.post(GEN, json=body(systemInstruction={"parts": [{"text": "Be brief."}]},
                                             generationConfig={"temperature": 0, "maxOutputTokens": 5}))
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["candidates"] == [{"content": {"parts": [{"text": TEXT}], "role": "model"}, "index": 0, "finishReason": "STOP"}]
    u = out["usageMetadata"]
    assert (u["promptTokenCount"], u["candidatesTokenCount"], u["totalTokenCount"], u["cachedContentTokenCount"]) == (
        PROMPT_TOKENS, 3, PROMPT_TOKENS + 3, 4)
    assert out["modelVersion"] == "synthetic" and out["responseId"] == engines.sent[0].request_id
    [sent] = engines.sent
    assert [(m.role, m.content) for m in sent.messages] == [("system", "Be brief."), ("user", "Weather?")]
    assert (sent.sampling.max_tokens, sent.sampling.temperature) == (5, 0)
    assert r.headers["x-fak-worker"] == "w1" and "x-fak-ignored" not in r.headers


@pytest.mark.parametrize("sse", [True, False])
async def test_the_stream_in_both_framings_carries_the_finish_on_the_last_text(sse):
    async with gateway(FakeEngines(settings())) as client:
        r = await client.post(STREAM + ("?alt=sse" if sse else ""), json=body())
    assert r.status_code == 200
    if sse:
        assert r.headers["content-type"].startswith("text/event-stream")
        chunks = sse_chunks(r.text)
    else:
        assert r.headers["content-type"].startswith("application/json") and r.text.startswith("[{")
        chunks = json.loads(r.text)
    assert [c["candidates"][0]["content"]["parts"][0]["text"] for c in chunks] == list(TOKENS)
    assert [c["candidates"][0].get("finishReason") for c in chunks] == [None, None, "STOP"]
    assert "usageMetadata" in chunks[-1] and "usageMetadata" not in chunks[0]


@pytest.mark.parametrize("stream", [False, True])
async def test_a_function_call_in_both_modes(stream):
    async with gateway(FakeEngines(settings(), tokens=(), calls=[CALL])) as client:
        r = await client.post(STREAM + "?alt=sse" if stream else GEN, json=body(tools=[WEATHER]))
    out = sse_chunks(r.text)[-1] if stream else r.json()
    [candidate] = out["candidates"]
    assert candidate["content"]["parts"] == [{"functionCall": {"id": "call_7", "name": "get_weather", "args": {"city": "Paris"}}}]
    assert candidate["finishReason"] == "STOP"


async def test_logprobs_are_googles_logprobs_result():
    from fakcore.protocol import TokenLogprob

    class Logprobs(FakeEngines):
        async def generate(self, req: GenerateRequest) -> AsyncIterator[Any]:
            async for r in super().generate(req):
                if isinstance(r, TokenChunk):
                    r.logprobs = [TokenLogprob(id=7, text=r.text, logprob=-0.5, top=[TokenLogprob(id=8, text="x", logprob=-1.0)])]
                yield r

    async with gateway(Logprobs(settings())) as client:
        r = await client.post(GEN, json=body(generationConfig={"responseLogprobs": True, "logprobs": 1}))
    [candidate] = r.json()["candidates"]
    assert candidate["logprobsResult"]["chosenCandidates"][0] == {"token": "Hel", "tokenId": 7, "logProbability": -0.5}
    assert candidate["logprobsResult"]["topCandidates"][0] == {"candidates": [{"token": "x", "tokenId": 8, "logProbability": -1.0}]}
    assert candidate["avgLogprobs"] == -0.5


@pytest.mark.parametrize("sse", [True, False])
async def test_an_engine_failure_mid_stream_is_an_error_chunk(sse):
    class Failing(FakeEngines):
        async def generate(self, req: GenerateRequest) -> AsyncIterator[Any]:
            yield Accepted(request_id=req.request_id, receipt=RECEIPT)
            yield TokenChunk(request_id=req.request_id, seq=0, text="Hel")
            raise WireError("timeout", "the worker went silent")

    async with gateway(Failing(settings())) as client:
        r = await client.post(STREAM + ("?alt=sse" if sse else ""), json=body())
    chunks = sse_chunks(r.text) if sse else json.loads(r.text)
    assert chunks[-1] == {"error": {"code": 504, "message": "the worker went silent", "status": "DEADLINE_EXCEEDED"}}


async def test_errors_and_auth_in_googles_shape():
    async with gateway(FakeEngines(settings(api_keys=("gk-a",)))) as client:
        missing = await client.post(GEN, json=body())
        by_header = await client.post(GEN, json=body(), headers={"x-goog-api-key": "gk-a"})
        by_query = await client.post(GEN + "?key=gk-a", json=body())
        unknown = await client.post("/v1beta/models/nope:generateContent?key=gk-a", json=body())
        bad = await client.post(GEN + "?key=gk-a", json=body(generationConfig={"candidateCount": 2}))
        broken = await client.post(GEN + "?key=gk-a", content=b"{not json")
        no_route = await client.get("/v1beta/nothing?key=gk-a")
    assert missing.status_code == 401 and missing.json()["error"]["status"] == "UNAUTHENTICATED"
    assert by_header.status_code == 200 and by_query.status_code == 200
    assert unknown.status_code == 404 and unknown.json()["error"] == {"code": 404, "status": "NOT_FOUND",
                                                                      "message": unknown.json()["error"]["message"]}
    assert bad.status_code == 400 and bad.json()["error"]["status"] == "INVALID_ARGUMENT"
    assert "candidateCount" in bad.json()["error"]["message"]
    assert broken.status_code == 400 and broken.json()["error"]["status"] == "INVALID_ARGUMENT"
    assert no_route.status_code == 404 and no_route.json()["error"]["status"] == "NOT_FOUND"


async def test_count_tokens_and_the_model_list():
    async with gateway(FakeEngines(settings())) as client:
        plain = await client.post("/v1beta/models/synthetic:countTokens", json={"contents": [user("hi")]})
        wrapped = await client.post("/v1/models/synthetic:countTokens", json={"generateContentRequest": {
            "model": "models/synthetic", "contents": [user("hi")], "tools": [WEATHER]}})
        listed = await client.get("/v1beta/models?pageSize=10")
        one = await client.get("/v1beta/models/synthetic")
        none = await client.get("/v1beta/models/nope")
    assert plain.json() == wrapped.json() == {"totalTokens": PROMPT_TOKENS,
                                              "promptTokensDetails": [{"modality": "TEXT", "tokenCount": PROMPT_TOKENS}]}
    assert [m["name"] for m in listed.json()["models"]] == ["models/synthetic"]
    assert one.json()["name"] == "models/synthetic" and "generateContent" in one.json()["supportedGenerationMethods"]
    assert none.status_code == 404 and none.json()["error"]["status"] == "NOT_FOUND"


@pytest.mark.parametrize("name", ["stream_1.json", "stream_2.json", "yolo_2.json", "router_1.json"])
async def test_everything_gemini_cli_sends_is_served_in_kernel(name):
    """The captured requests (python -m tests.support.capture_gemini_cli), aimed at the in-kernel model: 200,
    with what only Google acts on named in x-fak-ignored."""
    sent = fixture(name)
    engines = FakeEngines(settings())
    async with gateway(engines) as client:
        r = await client.post(STREAM + "?alt=sse", json=sent, headers={"x-goog-api-key": "gk-dummy"})
    assert r.status_code == 200, r.text[:500]
    assert sse_chunks(r.text)[-1]["candidates"][0]["finishReason"] == "STOP"
    [req] = engines.sent
    assert req.messages[0].role == "system" and req.messages[-1].role in ("user", "tool")
    if name == "router_1.json":
        assert req.response_schema["type"] == "object" and req.response_schema["properties"]["complexity_score"] == {
            "type": "integer", "description": "Complexity score from 1-100."}
    else:
        assert {"read_file", "list_directory", "glob"} <= {t.name for t in req.tools}
        assert "generationConfig.thinkingConfig" in r.headers["x-fak-ignored"]
    if name.endswith("_2.json"):
        [tool] = [m for m in req.messages if m.role == "tool"]
        [call] = [c for m in req.messages for c in m.tool_calls]
        assert tool.tool_call_id == call.id and tool.name == call.name and tool.content
