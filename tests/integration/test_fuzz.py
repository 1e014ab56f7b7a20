"""Bad input on every route: never a 5xx, every error in the shape of the wire it came in on.

First a bounded, deterministic schemathesis run against the OpenAPI document the gateway publishes (its
request bodies are the wires' own msgspec Structs): schema-valid and schema-breaking requests on every
operation, each body also aimed at the served model so that it gets past routing into the wire's
translation, the guard and the engine. Then hand-written cases a schema-driven generator does not send:
broken bytes, wrong top-level types, boundary numbers, nesting, size, content types, broken JSON-RPC on
/mcp. The published document itself is checked against the app's own route table.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error

from fakcore.launcher import Topology
from tests.conftest import base_settings, running
from tests.support.mcp_servers import PythonMcpServer

SERVED = "synthetic"  # the topology's one model
MAX_TOKENS = 4  # what a fuzzed body aimed at the served model asks for at most: the run stays bounded
EXAMPLES = 30  # per operation and mode; derandomized: the same cases every run, so a failure is a bug, not luck

OPENAI = ("/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/responses/input_tokens")
ANTHROPIC = ("/v1/messages", "/v1/messages/count_tokens")
GEMINI = tuple(f"{prefix}/models/{{model}}:{action}" for prefix in ("/v1beta", "/v1")
               for action in ("generateContent", "streamGenerateContent", "countTokens"))
MCP = "/mcp"
# (method, path, whether it has a body or parameters that negative mode can break)
OPERATIONS = [*(("POST", p, True) for p in (*OPENAI, *ANTHROPIC, *GEMINI, MCP)), ("GET", "/v1/models", False),
              ("GET", "/v1/models/{model}", False), ("GET", "/v1/responses/{response_id}", False),
              ("DELETE", "/v1/responses/{response_id}", False),
              ("GET", "/healthz", False), ("GET", "/metrics", False), ("GET", "/v1/fak/audit", True),
              ("GET", "/v1/fak/requests/{request_id}", True), ("GET", "/v1/fak/console/state", False),
              ("GET", "/v1/fak/console/events", False), ("GET", "/v1/fak/console/stats", False),
              ("GET", "/v1/fak/console/policy", False), ("GET", "/v1beta/models", True),
              ("GET", "/v1beta/models/{model}", False)]
FUZZED = [pytest.param(method, path, mode, id=f"{method} {path} {mode}") for method, path, breakable in OPERATIONS
          for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE) if breakable or mode is GenerationMode.POSITIVE]


def gemini(path: str) -> bool:
    return path.startswith("/v1beta/") or (path.startswith("/v1/models/") and ":" in path)


def assert_wire_error(path: str, status: int, body: bytes) -> None:
    """Not a 5xx; a 4xx body is the wire's own error: OpenAI {"error": {"message", "type", …}}, Anthropic
    {"type": "error", "error": {"type", "message"}}, Google {"error": {"code", "message", "status"}}, MCP a
    JSON-RPC error {"jsonrpc": "2.0", "error": {"code", "message"}} (or OpenAI's, for the gateway's own)."""
    assert status < 500, f"{path}: {status} {body[:300]!r}"
    if status < 400:
        return
    try:
        err = json.loads(body)
    except ValueError:
        raise AssertionError(f"{path}: a {status} that is not JSON: {body[:300]!r}") from None
    if path == MCP and isinstance(err, dict) and err.get("jsonrpc") == "2.0":
        inner = err.get("error")
        assert isinstance(inner, dict) and isinstance(inner.get("code"), int) and isinstance(inner.get("message"), str), err
    elif gemini(path):
        inner = err.get("error") if isinstance(err, dict) else None
        assert isinstance(inner, dict) and inner.get("code") == status and isinstance(inner.get("message"), str) \
            and isinstance(inner.get("status"), str), err
    elif path.startswith("/v1/messages"):
        assert isinstance(err, dict) and err.get("type") == "error", f"{path}: {status} {err!r}"
        inner = err.get("error")
        assert isinstance(inner, dict) and isinstance(inner.get("type"), str) and isinstance(inner.get("message"), str), err
    else:
        inner = err.get("error") if isinstance(err, dict) else None
        assert isinstance(inner, dict) and isinstance(inner.get("message"), str) and isinstance(inner.get("type"), str), err


@schemathesis.check
def in_the_wires_error_shape(ctx: Any, response: schemathesis.Response, case: schemathesis.Case) -> None:
    assert_wire_error(case.path, response.status_code, response.content)


ROLES = {"openai": ("system", "developer", "user", "assistant"), "anthropic": ("user", "assistant")}


def _aimed(path: str, body: Any) -> Any:
    """The body aimed at the served model, as a conversation its wire can serve (known roles, at least one
    message) and with a small token budget (a valid max_tokens is capped, an invalid one kept: refusing it is
    the point). Everything else stays as generated."""
    if not isinstance(body, dict) or path == MCP:
        return body
    if gemini(path):  # the model is in the path (flatmap_path_parameters)
        config = body.get("generationConfig")
        config = dict(config) if isinstance(config, dict) else {}
        value = config.get("maxOutputTokens")
        if value is None or (isinstance(value, int) and not isinstance(value, bool) and 1 <= value < 2**31):
            config["maxOutputTokens"] = min(value or MAX_TOKENS, MAX_TOKENS)
        return {**body, "generationConfig": config}
    body = {**body, "model": SERVED}
    budget = "max_output_tokens" if path.startswith("/v1/responses") else "max_tokens"
    for field in (budget, "max_completion_tokens"):
        value = body.get(field)
        if field == budget or value is not None:
            if value is None or (isinstance(value, int) and not isinstance(value, bool) and 1 <= value < 2**31):
                body[field] = min(value or MAX_TOKENS, MAX_TOKENS)
    if path.startswith("/v1/responses"):  # a servable turn: text input, no references to stored responses
        if not isinstance(body.get("input"), str):
            body["input"] = "hi"
        for field in ("previous_response_id", "tools", "tool_choice", "text", "instructions"):
            body.pop(field, None)
    roles = ROLES["anthropic" if path.startswith("/v1/messages") else "openai"]
    messages = body.get("messages")
    if isinstance(messages, list):
        messages = [{**m, "role": m["role"] if m.get("role") in roles else "user"} if isinstance(m, dict) else m
                    for m in messages]
        body["messages"] = messages or [{"role": "user", "content": "hi"}]
    return body


# Fields whose values the wires check after decoding (ranges, features the engine lacks): a servable body
# goes without them, so that whatever the generator (and its version) produces, some requests are served.
CHECKED_AFTER_DECODING = ("n", "echo", "presence_penalty", "frequency_penalty", "logprobs", "top_logprobs", "stop",
                          "stop_sequences", "tools", "tool_choice", "response_format", "text", "thinking", "temperature",
                          "top_p", "top_k", "seed", "system", "stream_options", "include", "reasoning", "metadata")


def _servable(path: str, body: Any) -> Any:
    """The aimed body with only what every serving path accepts: text content, one prompt, no checked field."""
    body = _aimed(path, body)
    if path == MCP:
        return {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    if not isinstance(body, dict):
        return body
    if gemini(path):
        return {"contents": [{"role": "user", "parts": [{"text": "hi"}]}], "generationConfig": {"maxOutputTokens": MAX_TOKENS}}
    body = {k: v for k, v in body.items() if k not in CHECKED_AFTER_DECODING}
    if "prompt" in body or path == "/v1/completions":
        body["prompt"] = body["prompt"] if isinstance(body.get("prompt"), str) else "hi"
    if isinstance(body.get("messages"), list):
        body["messages"] = [{"role": m["role"], "content": m["content"] if isinstance(m.get("content"), str) else "hi"}
                            for m in body["messages"] if isinstance(m, dict)] or [{"role": "user", "content": "hi"}]
    return body


def flatmap_body(context: Any, body: Any) -> st.SearchStrategy:
    """Each body three ways: as generated (a random model: mostly a 404), aimed past routing, or servable."""
    path = context.operation.path
    return st.sampled_from([_aimed(path, body), body, _servable(path, body)])


def flatmap_path_parameters(context: Any, parameters: Any) -> st.SearchStrategy:
    """A Gemini path's model as generated (mostly a 404) or the served one."""
    if isinstance(parameters, dict) and "model" in parameters:
        return st.sampled_from([parameters, {**parameters, "model": SERVED}])
    return st.just(parameters)


@pytest.fixture(scope="module")
def topology(nats_server, tmp_path_factory):
    """adjudicator, kvmmu, one synthetic worker and the gateway, which also fronts one MCP server (a
    Python one over streamable HTTP): /mcp is fuzzed past "no MCP servers are configured"."""
    d = tmp_path_factory.mktemp("fuzz")
    with PythonMcpServer() as py:
        (d / "mcp.yaml").write_text(json.dumps({"servers": {"py": {"url": py.url}}}))  # JSON is YAML
        with running(Topology(base_settings(nats_server.url, mcp=str(d / "mcp.yaml")), log_dir=d / "logs")) as topo:
            yield topo


@pytest.fixture(scope="module")
def gateway_schema(topology):
    schema = schemathesis.openapi.from_url(topology.gateway_url + "/openapi.json", config=schemathesis.Config())
    schema.hook(flatmap_body)
    schema.hook(flatmap_path_parameters)
    return schema


@pytest.mark.parametrize("method,path,mode", FUZZED)
def test_fuzz_the_published_schema(gateway_schema, method, path, mode):
    """Bodies, queries, path parameters and headers as the schema has them (positive) and breaking it
    (negative): never a 5xx, every error in the wire's shape."""
    statuses: list[int] = []

    @settings(max_examples=EXAMPLES, derandomize=True, database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(case=gateway_schema[path][method].as_strategy(generation_mode=mode))
    def fuzz(case: schemathesis.Case) -> None:
        response = case.call(timeout=30)
        statuses.append(response.status_code)
        case.validate_response(response, checks=[not_a_server_error, in_the_wires_error_shape])

    fuzz()
    if method == "POST" and mode is GenerationMode.POSITIVE:
        assert 200 in statuses, f"no fuzzed request got past routing: {sorted(set(statuses))}"


def app_routes() -> set[tuple[str, str]]:
    """(method, path pattern) of every API route of the gateway app itself (litestar's route table; the
    handlers kept out of the schema, /openapi.json and the console's page, left out): a path parameter
    `{x:path}` takes the rest of the path (a Gemini model and its `:action`), any other one a segment. /mcp
    is an ASGI mount answering any method: POST is its API (GET opens the MCP server's event stream)."""
    import re

    from fak_gateway.app import create_app
    from fakcore.settings import Settings

    app = create_app(Settings.load(env={}), connect=False)
    routes = set()
    for route in app.routes:
        pattern = re.sub(r"\{\w+:path\}", ".+", re.sub(r"\{\w+(:(str|int))?\}", "[^/]+", route.path))
        handlers = getattr(route, "route_handlers", [getattr(route, "route_handler", None)])
        for h in handlers:
            methods = set(getattr(h, "http_methods", None) or {"POST"}) - {"OPTIONS", "HEAD"}
            if getattr(h, "include_in_schema", True) is not False:
                routes |= {(m, pattern) for m in methods}
    return routes


def test_the_schema_describes_every_route(topology):
    """Every route of the app is in /openapi.json, and every operation there is one the app serves, and the
    fuzz runs every one of them."""
    import re

    from fak_gateway import gemini_wire

    doc = httpx.get(topology.gateway_url + "/openapi.json").json()
    assert doc["openapi"].startswith("3.1")
    documented = {(m.upper(), path) for path, ops in doc["paths"].items() for m in ops}

    def concrete(path: str) -> str:
        return re.sub(r"\{\w+\}", "x", path)

    routes = app_routes()
    for method, pattern in routes:
        assert any(m == method and re.fullmatch(pattern, concrete(p)) for m, p in documented), (method, pattern)
    for method, path in documented:
        assert any(m == method and re.fullmatch(pattern, concrete(path)) for m, pattern in routes), (method, path)
    actions = {f"{prefix}/models/{{model}}:{a}" for a in gemini_wire.ACTIONS for prefix in ("/v1beta", "/v1")}
    assert actions <= set(doc["paths"]), "every Gemini action under both prefixes"
    assert documented == {(m, p) for m, p, _ in OPERATIONS}
    chat = doc["paths"]["/v1/chat/completions"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert chat == {"$ref": "#/components/schemas/ChatRequest"}
    props = doc["components"]["schemas"]["ChatRequest"]["properties"]
    assert {"messages", "max_tokens", "tools", "stream"} <= set(props)
    assert httpx.get(topology.gateway_url + "/schema").status_code == 404  # litestar's own is off


# ---------------------------------------------------------------------------------------------------------
# Hand-written cases
# ---------------------------------------------------------------------------------------------------------

HI = [{"role": "user", "content": "hi"}]
VALID = {
    "/v1/chat/completions": {"model": SERVED, "max_tokens": 2, "messages": HI},
    "/v1/completions": {"model": SERVED, "max_tokens": 2, "prompt": "hi"},
    "/v1/messages": {"model": SERVED, "max_tokens": 2, "messages": HI},
    "/v1/messages/count_tokens": {"model": SERVED, "messages": HI},
    "/v1/responses": {"model": SERVED, "max_output_tokens": 2, "input": "hi"},
    "/v1/responses/input_tokens": {"model": SERVED, "input": "hi"},
    "/v1beta/models/synthetic:generateContent": {"contents": [{"role": "user", "parts": [{"text": "hi"}]}],
                                                 "generationConfig": {"maxOutputTokens": 2}},
    "/v1beta/models/synthetic:streamGenerateContent?alt=sse": {"contents": [{"role": "user", "parts": [{"text": "hi"}]}],
                                                              "generationConfig": {"maxOutputTokens": 2}},
    "/v1beta/models/synthetic:countTokens": {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]},
    "/v1/models/synthetic:generateContent": {"contents": [{"role": "user", "parts": [{"text": "hi"}]}],
                                             "generationConfig": {"maxOutputTokens": 2}},
}


def nested(depth: int) -> Any:
    value: Any = {}
    for _ in range(depth):
        value = {"a": value}
    return value


def deep_json(depth: int) -> str:
    return '{"a":' * depth + "{}" + "}" * depth


# Raw bodies no route takes: each is a 400 on every route.
RAW = {
    "empty": b"",
    "truncated": b'{"model": "synthetic", "messages": [',
    "not json": b"{not json}",
    "trailing garbage": b'{"model": "synthetic"} and more',
    "array": b"[]",
    "array of a valid body": json.dumps([VALID["/v1/chat/completions"]]).encode(),
    "string": b'"hello"',
    "null": b"null",
    "number": b"42",
    "true": b"true",
    "invalid utf-8": b'{"model": "synthetic", "max_tokens": 2, "prompt": "\xff\xfe", "messages": [{"role": "user", "content": "\xc3\x28"}]}',
    "bare invalid bytes": b"\xff\xfe\x00\x01",
    "lone surrogate": b'{"model": "\\ud800", "max_tokens": 2, "prompt": "\\udfff", "messages": [{"role": "user", "content": "\\udc00"}]}',
    "NaN literal": b'{"model": "synthetic", "max_tokens": 2, "temperature": NaN, "prompt": "x", "messages": []}',
    "Infinity literal": b'{"model": "synthetic", "max_tokens": Infinity, "prompt": "x", "messages": []}',
    "number out of range": b'{"model": "synthetic", "max_tokens": 1e400, "top_p": -1e400, "prompt": "x", "messages": [{"role": "user", "content": 1e400}]}',
    "nested past the interpreter's stack": ('{"model": "synthetic", "messages": [], "unknown": ' + deep_json(100_000) + "}").encode(),
    "deep array past the stack": ('{"model": "synthetic", "messages": [], "prompt": ' + "[" * 100_000 + "]" * 100_000 + "}").encode(),
}

# Fields set to junk, on top of each route's valid body: each is a 4xx.
CHAT_LIKE = {
    "messages as a string": {"messages": "hi"},
    "messages as an object": {"messages": {"role": "user", "content": "hi"}},
    "messages of numbers": {"messages": [1, 2]},
    "empty messages": {"messages": []},
    "unknown role": {"messages": [{"role": "wizard", "content": "hi"}]},
    "role missing": {"messages": [{"content": "hi"}]},
    "role a number": {"messages": [{"role": 7, "content": "hi"}]},
    "content a number": {"messages": [{"role": "user", "content": 7}]},
    "content part of a wrong type": {"messages": [{"role": "user", "content": [{"type": 5, "text": "x"}]}]},
    "content part text an object": {"messages": [{"role": "user", "content": [{"type": "text", "text": nested(3)}]}]},
    "model a number": {"model": 5},
    "model empty": {"model": ""},
    "model unknown and huge": {"model": "m" * 1_000_000},
    "content above one bus message": {"messages": [{"role": "user", "content": "y" * (1536 * 1024)}]},
    "max_tokens negative": {"max_tokens": -1},
    "max_tokens zero": {"max_tokens": 0},
    "max_tokens huge": {"max_tokens": 10**30},
    "max_tokens above 64 bits": {"max_tokens": 2**64},
    "max_tokens a float": {"max_tokens": 1.5},
    "max_tokens a string": {"max_tokens": "ten"},
    "max_tokens a bool": {"max_tokens": True},
    "temperature 'NaN'": {"temperature": "NaN"},
    "temperature 'inf'": {"temperature": "inf"},
    "temperature '-Infinity'": {"temperature": "-Infinity"},
    "temperature out of range": {"temperature": 1e300},
    "top_k huge": {"top_k": 10**25},
    "top_k negative huge": {"top_k": -(10**25)},
}
OPENAI_ONLY = {
    "stop a number": {"stop": 5},
    "stop a list of numbers": {"stop": [1, 2]},
    "too many stops": {"stop": ["a", "b", "c", "d", "e"]},
    "seed above 64 bits": {"seed": 2**70},
    "n huge": {"n": 10**30},
    "tools a string": {"tools": "x"},
    "tool without function": {"tools": [{"type": "function"}]},
    "tool schema nested deep": {"tools": [{"type": "function", "function": {"name": "f", "parameters": nested(100)}}]},
    "tool schema with a 100-bit integer": {"tools": [{"function": {"name": "f", "parameters": {"maximum": 2**100}}}]},
    "tool_choice name a list": {"tools": [{"function": {"name": "f"}}],
                                "tool_choice": {"type": "function", "function": {"name": ["f"]}}},
    "tool_choice an unknown string": {"tool_choice": "sometimes"},
    "response_format json_schema a string": {"response_format": {"type": "json_schema", "json_schema": "x"}},
    "response_format of an unknown type": {"response_format": {"type": "yaml"}},
    "response_format nested deep": {"response_format": {"type": "json_schema", "json_schema": {"schema": nested(100)}}},
    "tool call arguments an object": {"messages": [{"role": "assistant", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": {"a": 1}}}]}]},
    "logprobs a string": {"logprobs": "yes"},
    "max_completion_tokens zero": {"max_completion_tokens": 0},
    "junk in a stream": {"stream": True, "response_format": {"type": "json_schema", "json_schema": "x"}},
}
ANTHROPIC_ONLY = {
    "stop_sequences a number": {"stop_sequences": 5},
    "system a number": {"system": 5},
    "system blocks of a wrong type": {"system": [{"type": "image"}]},
    "tool_use input nested deep": {"messages": [{"role": "assistant", "content": [
        {"type": "tool_use", "id": "t1", "name": "f", "input": nested(200)}]}]},
    "tool_result without id": {"messages": [{"role": "user", "content": [{"type": "tool_result", "content": "x"}]}]},
    "block without type": {"messages": [{"role": "user", "content": [{"text": "x"}]}]},
    "tool schema a string": {"tools": [{"name": "f", "input_schema": "x"}]},
    "tool schema nested deep": {"tools": [{"name": "f", "input_schema": nested(100)}]},
    "tool schema with a 100-bit integer": {"tools": [{"name": "f", "input_schema": {"maximum": 2**100}}]},
    "tool_choice name a list": {"tools": [{"name": "f"}], "tool_choice": {"type": "tool", "name": ["f"]}},
    "tool_choice name an object": {"tools": [{"name": "f"}], "tool_choice": {"type": "tool", "name": {}}},
    "tool_choice an unknown type": {"tool_choice": {"type": "sometimes"}},
    "tool_choice a string": {"tool_choice": "auto"},
    "junk in a stream": {"stream": True, "tool_choice": {"type": "tool", "name": ["f"]}},
}
COMPLETIONS = {
    "prompt missing": {"prompt": None},
    "prompt a number": {"prompt": 5},
    "prompt a list of numbers": {"prompt": [1, 2]},
    "two prompts": {"prompt": ["a", "b"]},
    "no prompt in the list": {"prompt": []},
    "prompt above one bus message": {"prompt": "y" * (1536 * 1024)},
    "echo": {"echo": True},
    "logprobs out of range": {"logprobs": 99},
    "model a number": {"model": 5},
    "model unknown": {"model": "no-such-model"},
    "max_tokens huge": {"max_tokens": 10**30},
    "max_tokens a float": {"max_tokens": 1.5},
    "stop a number": {"stop": 5},
    "seed above 64 bits": {"seed": 2**70},
    "temperature 'NaN'": {"temperature": "NaN"},
}
RESPONSES = {
    "input a number": {"input": 5},
    "input of numbers": {"input": [1, 2]},
    "empty input": {"input": []},
    "unknown role": {"input": [{"role": "wizard", "content": "hi"}]},
    "item of an unknown type": {"input": [{"type": "teleport"}]},
    "function_call without call_id": {"input": [{"type": "function_call", "name": "f", "arguments": "{}"}]},
    "function_call_output output a number": {"input": [{"type": "function_call_output", "call_id": "c", "output": 5}]},
    "content part text an object": {"input": [{"role": "user", "content": [{"type": "input_text", "text": nested(3)}]}]},
    "input nested deep": {"input": [{"role": "user", "content": "x", "extra": nested(100)}]},
    "model a number": {"model": 5},
    "model unknown": {"model": "no-such-model"},
    "max_output_tokens zero": {"max_output_tokens": 0},
    "max_output_tokens huge": {"max_output_tokens": 10**30},
    "max_output_tokens a string": {"max_output_tokens": "ten"},
    "temperature out of range": {"temperature": 9},
    "top_p zero": {"top_p": 0},
    "tools a string": {"tools": "x"},
    "tool a string": {"tools": ["x"]},
    "function tool without name": {"tools": [{"type": "function"}]},
    "custom tool with a bad grammar": {"tools": [{"type": "custom", "name": "t", "format": {"type": "grammar", "syntax": "ebnf"}}]},
    "tool_choice an unknown string": {"tool_choice": "sometimes"},
    "tool_choice naming no tool": {"tool_choice": {"type": "function", "name": "nope"}},
    "text.format of an unknown type": {"text": {"format": {"type": "yaml"}}},
    "json_schema without schema": {"text": {"format": {"type": "json_schema", "name": "x"}}},
    "previous_response_id unknown": {"previous_response_id": "resp_0000"},
    "previous_response_id junk": {"previous_response_id": "../../etc"},
    "metadata not strings": {"metadata": {"a": 1}},
    "junk in a stream": {"stream": True, "tool_choice": "sometimes"},
}
GEMINI_JUNK = {
    "contents a string": {"contents": "hi"},
    "contents of numbers": {"contents": [1, 2]},
    "empty contents": {"contents": []},
    "unknown role": {"contents": [{"role": "wizard", "parts": [{"text": "hi"}]}]},
    "parts a string": {"contents": [{"role": "user", "parts": "hi"}]},
    "part text a number": {"contents": [{"role": "user", "parts": [{"text": 5}]}]},
    "an image part": {"contents": [{"role": "user", "parts": [{"inlineData": {"mimeType": "image/png", "data": "AA=="}}]}]},
    "functionCall args a string": {"contents": [{"role": "model", "parts": [{"functionCall": {"name": "f", "args": "x"}}]}]},
    "functionCall args nested deep": {"contents": [{"role": "model", "parts": [{"functionCall": {"name": "f", "args": nested(100)}}]}]},
    "functionResponse response a list": {"contents": [{"role": "user", "parts": [{"functionResponse": {"name": "f", "response": []}}]}]},
    "systemInstruction a string": {"systemInstruction": "be brief"},
    "tools a string": {"tools": "x"},
    "declaration without name": {"tools": [{"functionDeclarations": [{"description": "x"}]}]},
    "parameters a string": {"tools": [{"functionDeclarations": [{"name": "f", "parameters": "x"}]}]},
    "parameters with a 100-bit integer": {"tools": [{"functionDeclarations": [{"name": "f", "parameters": {"maximum": 2**100}}]}]},
    "calling mode unknown": {"toolConfig": {"functionCallingConfig": {"mode": "SOMETIMES"}}},
    "allowed name not declared": {"tools": [{"functionDeclarations": [{"name": "f"}]}],
                                  "toolConfig": {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["g"]}}},
    "generationConfig a list": {"generationConfig": [1]},
    "maxOutputTokens zero": {"generationConfig": {"maxOutputTokens": 0}},
    "maxOutputTokens huge": {"generationConfig": {"maxOutputTokens": 10**30}},
    "maxOutputTokens a string": {"generationConfig": {"maxOutputTokens": "ten"}},
    "temperature out of range": {"generationConfig": {"temperature": 9}},
    "topP zero": {"generationConfig": {"topP": 0}},
    "two candidates": {"generationConfig": {"candidateCount": 2}},
    "too many stops": {"generationConfig": {"stopSequences": ["a", "b", "c", "d", "e", "f"]}},
    "seed above 64 bits": {"generationConfig": {"seed": 2**70}},
    "an unknown mime type": {"generationConfig": {"responseMimeType": "application/yaml"}},
    "a schema without the json mime type": {"generationConfig": {"responseSchema": {"type": "STRING"}}},
    "responseJsonSchema a string": {"generationConfig": {"responseMimeType": "application/json", "responseJsonSchema": "x"}},
    "responseSchema nested deep": {"generationConfig": {"responseMimeType": "application/json", "responseSchema": nested(100)}},
    "image output": {"generationConfig": {"responseModalities": ["IMAGE"]}},
}
GEMINI_COUNT_READS = ("contents",)  # countTokens with `contents` reads nothing else
COUNT_ONLY = ("max_tokens", "temperature", "top_k", "stop_sequences")  # fields count_tokens does not read: junk there is ignored


def _junk_cases() -> list[Any]:
    cases = []
    for path, valid in VALID.items():
        table = COMPLETIONS if path == "/v1/completions" else RESPONSES if path.startswith("/v1/responses") else \
            GEMINI_JUNK if gemini(path) else {**CHAT_LIKE, **(OPENAI_ONLY if path in OPENAI else ANTHROPIC_ONLY)}
        for name, change in table.items():
            if path.endswith(":countTokens") and not set(change) <= set(GEMINI_COUNT_READS):
                continue
            if path.endswith("count_tokens") and set(change) <= set(COUNT_ONLY):
                continue
            if path.endswith("input_tokens") and not set(change) <= {"input", "model", "tools", "previous_response_id"}:
                continue  # fields input_tokens does not read
            body = {k: v for k, v in {**valid, **change}.items() if v is not None}
            cases.append(pytest.param(path, json.dumps(body).encode(), id=f"{path}:{name}"))
    return cases


@pytest.fixture(scope="module")
def http(topology):
    with httpx.Client(base_url=topology.gateway_url, timeout=30) as c:
        yield c


def _refused(http: httpx.Client, path: str, body: bytes, content_type: str = "application/json") -> httpx.Response:
    r = http.post(path, content=body, headers={"content-type": content_type})
    assert_wire_error(path, r.status_code, r.content)
    assert 400 <= r.status_code < 500, f"{path}: junk accepted with {r.status_code}: {r.text[:300]}"
    return r


@pytest.mark.parametrize("path", VALID)
@pytest.mark.parametrize("name", RAW)
def test_raw_junk_is_a_4xx_in_the_wires_shape(http, path, name):
    r = _refused(http, path, RAW[name])
    assert r.status_code == 400


@pytest.mark.parametrize("path,body", _junk_cases())
def test_junk_fields_are_a_4xx_in_the_wires_shape(http, path, body):
    _refused(http, path, body)


@pytest.mark.parametrize("path", VALID)
def test_the_valid_bodies_are_served(http, path):
    """The hand-written cases differ from these by the one field they break."""
    r = http.post(path, json=VALID[path])
    assert r.status_code == 200, r.text[:300]


@pytest.mark.parametrize("path", VALID)
@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", "application/xml",
                                          "multipart/form-data", "application/json; charset=latin-1", ""])
def test_content_types(http, path, content_type):
    """The body is read as JSON whatever its content-type claims (as curl -d sends it): JSON is served,
    anything else is a 400 in the wire's shape."""
    ok = http.post(path, content=json.dumps(VALID[path]).encode(), headers={"content-type": content_type})
    assert ok.status_code == 200, ok.text[:300]
    _refused(http, path, b"model=synthetic&prompt=hi", content_type)
    _refused(http, path, b"<request><model>synthetic</model></request>", content_type)


@pytest.mark.parametrize("method,path", [
    ("GET", "/v1/chat/completions"), ("PUT", "/v1/messages"), ("DELETE", "/v1/messages/count_tokens"),
    ("POST", "/v1/models"), ("POST", "/healthz"), ("GET", "/v1/nothing"), ("GET", "/v1/messages/nothing"),
    ("GET", "/v1/fak/audit?limit=abc"), ("GET", "/v1/fak/audit?limit=1e400"), ("GET", "/v1/fak/audit?limit=" + "9" * 400),
    ("GET", "/v1/fak/audit?limit=" + "9" * 5000), ("GET", "/v1/fak/requests/%00%ff"),
    ("GET", "/v1/fak/requests/" + "r" * 10_000),
])
def test_wrong_methods_routes_and_queries_are_4xx_in_the_wires_shape(http, method, path):
    r = http.request(method, path)
    assert_wire_error(path, r.status_code, r.content)
    assert 400 <= r.status_code < 500


def test_a_server_tools_name_stays_a_valid_header(http):
    """x-fak-ignored names the server tools a local model does not run; a name is the client's text."""
    body = {**VALID["/v1/messages"], "tools": [{"type": "web_search_20250305", "name": "søk\r\nx-evil: 1,𝕏"}]}
    r = http.post("/v1/messages", json=body)
    assert r.status_code == 200, r.text[:300]
    assert r.headers["x-fak-ignored"] == "tool:s%C3%B8k%0D%0Ax-evil%3A%201%2C%F0%9D%95%8F" and "x-evil" not in r.headers


@pytest.mark.parametrize("path", VALID)
def test_odd_request_headers_are_served(http, path):
    odd = {"x-fak-session": b"\xff\xfe session \x01", "x-fak-cache-salt": "s" * 8000, "anthropic-version": "\x7f",
           "anthropic-beta": ",,,", "x-fak-api-key": ""}
    r = http.post(path, json=VALID[path], headers=odd)
    assert r.status_code == 200, r.text[:300]


# /mcp: broken JSON-RPC, each answered with a JSON-RPC error (400; 200 for a well-formed request that fails)
MCP_JUNK = {
    "empty": b"",
    "not json": b"{not json}",
    "a batch": b"[]",
    "a number": b"42",
    "no method": b'{"jsonrpc": "2.0", "id": 1}',
    "params a string": b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": "x"}',
    "an unknown method": b'{"jsonrpc": "2.0", "id": 1, "method": "teleport/now"}',
    "arguments a number": b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "py__add", "arguments": 5}}',
    "initialize with a number for a version": b'{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 5}}',
    "nested past the interpreter's stack": ('{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": '
                                            + deep_json(100_000) + "}").encode(),
}


@pytest.mark.parametrize("name", MCP_JUNK)
def test_mcp_junk_is_a_json_rpc_error(http, name):
    r = http.post(MCP, content=MCP_JUNK[name], headers={"content-type": "application/json",
                                                         "accept": "application/json, text/event-stream"})
    assert r.status_code in (200, 400), f"{name}: {r.status_code} {r.text[:300]}"
    err = r.json()
    assert err["jsonrpc"] == "2.0" and isinstance(err["error"]["code"], int) and isinstance(err["error"]["message"], str), err
