"""The OpenAPI 3.1 document the gateway publishes at GET /openapi.json.

The request bodies are the wires' own msgspec Structs, turned into JSON Schema by msgspec (the decoders
and the document are one source, so they cannot drift): what the schema allows, the decoder accepts;
what it does not, the decoder refuses with a 400. The rules a type cannot say (known roles, temperature
in range, supported features…) are checked after decoding, also as 400s. Every error response is
in the shape of its route's wire (errors.py). Litestar's own generated schema is off: the handlers take a
raw Request, so it could not describe their bodies.
"""

from __future__ import annotations

import functools
from typing import Any

import msgspec
from litestar import Response, get

from fak_gateway import anthropic_wire, gemini_wire, openai_wire, responses_wire

REF = "#/components/schemas/{name}"

# The bodies of the POST routes: (path, Struct, wire, summary)
BODIES = (
    ("/v1/chat/completions", openai_wire.ChatRequest, "openai", "OpenAI chat completions (stream: SSE)"),
    ("/v1/completions", openai_wire.CompletionRequest, "openai", "OpenAI raw-prompt completions (stream: SSE)"),
    ("/v1/messages", anthropic_wire.MessagesRequest, "anthropic", "Anthropic messages (stream: SSE)"),
    ("/v1/messages/count_tokens", anthropic_wire.CountRequest, "anthropic", "Anthropic token counting"),
    ("/v1/responses", responses_wire.ResponsesRequest, "openai", "OpenAI Responses (stream: SSE; stored for previous_response_id)"),
    ("/v1/responses/input_tokens", responses_wire.InputTokensRequest, "openai", "OpenAI Responses input token count"),
    *((f"{prefix}/models/{{model}}:{action}", struct, "gemini", f"{summary} ({prefix})") for prefix in ("/v1beta", "/v1")
      for action, struct, summary in (
          ("generateContent", gemini_wire.GenerateContentRequest, "Gemini generateContent"),
          ("streamGenerateContent", gemini_wire.GenerateContentRequest,
           "Gemini streamed generateContent: SSE with alt=sse, else one JSON array"),
          ("countTokens", gemini_wire.CountRequest, "Gemini token counting"))),
)

# POST /mcp: one JSON-RPC message of the Model Context Protocol (streamable HTTP; mcp_gateway.py)
MCP_MESSAGE = {
    "type": "object", "required": ["jsonrpc", "method"],
    "properties": {"jsonrpc": {"const": "2.0"}, "id": {"type": ["string", "integer"]}, "method": {"type": "string"},
                   "params": {"type": "object"}},
}

# The error bodies, as errors.WireError renders them
ERRORS = {
    "OpenAIError": {
        "type": "object", "required": ["error"],
        "properties": {"error": {
            "type": "object", "required": ["message", "type"],
            "properties": {"message": {"type": "string"}, "type": {"type": "string"},
                           "param": {"type": ["string", "null"]}, "code": {"type": ["string", "null"]}}}},
    },
    "AnthropicError": {
        "type": "object", "required": ["type", "error"],
        "properties": {"type": {"const": "error"}, "error": {
            "type": "object", "required": ["type", "message"],
            "properties": {"type": {"type": "string"}, "message": {"type": "string"}}}},
    },
    "GoogleError": {
        "type": "object", "required": ["error"],
        "properties": {"error": {
            "type": "object", "required": ["code", "message", "status"],
            "properties": {"code": {"type": "integer"}, "message": {"type": "string"}, "status": {"type": "string"}}}},
    },
}
ERRORS["McpError"] = {  # what the MCP server answers; the gateway's own refusals (a key, no MCP servers) are OpenAI's
    "type": "object", "required": ["jsonrpc", "error"],
    "properties": {"jsonrpc": {"const": "2.0"}, "id": {"type": ["string", "integer", "null"]}, "error": {
        "type": "object", "required": ["code", "message"],
        "properties": {"code": {"type": "integer"}, "message": {"type": "string"}}}},
}
ERROR_OF = {"openai": "OpenAIError", "anthropic": "AnthropicError", "gemini": "GoogleError"}

SECURITY_SCHEMES = {
    "bearer": {"type": "http", "scheme": "bearer", "description": "a gateway API key (FAK_API_KEYS)"},
    "x-api-key": {"type": "apiKey", "in": "header", "name": "x-api-key", "description": "a gateway API key"},
    "x-fak-api-key": {"type": "apiKey", "in": "header", "name": "x-fak-api-key",
                      "description": "a gateway API key beside a client key meant for an upstream"},
    "x-fak-admin-key": {"type": "apiKey", "in": "header", "name": "x-fak-admin-key",
                        "description": "an operator key (FAK_ADMIN_KEYS)"},
    "x-goog-api-key": {"type": "apiKey", "in": "header", "name": "x-goog-api-key", "description": "a gateway API key (Gemini)"},
    "key": {"type": "apiKey", "in": "query", "name": "key", "description": "a gateway API key (Gemini)"},
}
API_KEY = [{"bearer": []}, {"x-api-key": []}, {"x-fak-api-key": []}, {}]  # {}: no keys configured, none needed
GOOGLE_KEY = [{"x-goog-api-key": []}, {"key": []}, {"bearer": []}, {"x-fak-api-key": []}, {}]
MODEL = {"name": "model", "in": "path", "required": True, "schema": {"type": "string"}, "description": "a model id"}
ADMIN_KEY = [{"x-fak-admin-key": []}, {"bearer": []}]  # or a tenant's API key, for its own records
PUBLIC: list[dict[str, list[str]]] = [{}]


def _json(schema: dict[str, Any]) -> dict[str, Any]:
    return {"application/json": {"schema": schema}}


def _errors(wire: str) -> dict[str, Any]:
    ref: dict[str, Any] = {"$ref": REF.format(name=ERROR_OF[wire])} if wire != "mcp" else \
        {"oneOf": [{"$ref": REF.format(name="McpError")}, {"$ref": REF.format(name="OpenAIError")}]}
    return {"4XX": {"description": "the request is refused", "content": _json(ref)},
            "5XX": {"description": "the gateway or a backend failed", "content": _json(ref)}}


def _post(struct_ref: dict[str, Any], wire: str, summary: str, path: str) -> dict[str, Any]:
    ok = {"description": "the response (a JSON object; with `stream`, server-sent events)",
          "content": {**_json({"type": "object"}), "text/event-stream": {"schema": {"type": "string"}}}}
    op: dict[str, Any] = {"summary": summary, "security": GOOGLE_KEY if wire == "gemini" else API_KEY,
                          "requestBody": {"required": True, "content": _json(struct_ref)},
                          "responses": {"200": ok, **_errors(wire)}}
    if "{model}" in path:
        op["parameters"] = [MODEL]
        if path.endswith(":streamGenerateContent"):
            op["parameters"].append(_query("alt", {"type": "string", "enum": ["sse"], "description": "absent: a JSON array"}))
    return {"post": op}


def _get(summary: str, security: list[dict[str, list[str]]], content: dict[str, Any] | None = None,
         parameters: list[dict[str, Any]] | None = None, responses: dict[str, Any] | None = None,
         wire: str = "openai", method: str = "get") -> dict[str, Any]:
    op: dict[str, Any] = {"summary": summary, "security": security, "responses": {
        "200": {"description": "ok", "content": content or _json({"type": "object"})}, **_errors(wire), **(responses or {})}}
    if parameters:
        op["parameters"] = parameters
    return {method: op}


def _query(name: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": False, "schema": schema}


@functools.cache
def document() -> dict[str, Any]:
    refs, components = msgspec.json.schema_components([s for _, s, _, _ in BODIES], ref_template=REF)
    paths: dict[str, Any] = {path: _post(ref, wire, summary, path) for (path, _, wire, summary), ref in zip(BODIES, refs, strict=True)}
    version = {"name": "anthropic-version", "in": "header", "required": False, "schema": {"type": "string"},
               "description": "present: the list in Anthropic's shape, else OpenAI's"}
    paths["/v1/models"] = _get("the models this gateway serves", API_KEY, parameters=[version])
    paths["/v1/models/{model}"] = _get("one model (OpenAI's shape; Anthropic's with anthropic-version)", API_KEY,
                                       parameters=[MODEL, version])
    response_id = {"name": "response_id", "in": "path", "required": True, "schema": {"type": "string"}}
    paths["/v1/responses/{response_id}"] = {
        **_get("Responses: a stored response", API_KEY, parameters=[response_id]),
        **_get("Responses: delete a stored response", API_KEY, parameters=[response_id], method="delete")}
    accepted = {"202": {"description": "a notification or a response: accepted, nothing to answer"}}
    mcp = _post(MCP_MESSAGE, "mcp", "MCP (streamable HTTP, stateless): the tools, resources and prompts of the MCP "
                "servers of FAK_MCP, screened and adjudicated", "/mcp")
    mcp["post"]["responses"].update(accepted)
    paths["/mcp"] = mcp
    not_ready = {"503": {"description": "not ready: the same body, naming what is missing", "content": _json({"type": "object"})}}
    paths["/healthz"] = _get("readiness: 200 when every routed model and needed service is live, else 503", PUBLIC,
                             responses=not_ready)
    paths["/metrics"] = _get("Prometheus metrics", PUBLIC, content={"text/plain": {"schema": {"type": "string"}}})
    text = {"type": "string"}
    paths["/v1/fak/audit"] = _get("operators: verdicts and eviction receipts, filterable", ADMIN_KEY, parameters=[
        _query("request_id", text), _query("session", text), _query("kind", text), _query("block", text),
        _query("limit", {"type": "integer", "default": 100, "description": "clamped to 1..5000"})])
    paths["/v1/fak/requests/{request_id}"] = _get(
        "operators: a request's context as it left for the engines", ADMIN_KEY,
        parameters=[{"name": "request_id", "in": "path", "required": True, "schema": text}])
    console = "operators (or a tenant's API key, its own): the console's "
    paths["/v1/fak/console/state"] = _get(console + "snapshot: requests, verdicts, receipts, workers, throughput", ADMIN_KEY)
    paths["/v1/fak/console/events"] = _get(console + "live events (server-sent: snapshot, record, request, done…)", ADMIN_KEY,
                                           content={"text/event-stream": {"schema": {"type": "string"}}})
    paths["/v1/fak/console/stats"] = _get(console + "tokens/s and latency per model", ADMIN_KEY)
    paths["/v1/fak/console/policy"] = _get("operators: the policy in force (admin keys only)", ADMIN_KEY)
    paths["/v1beta/models"] = _get("Gemini: the models this gateway serves, in pages", GOOGLE_KEY, wire="gemini", parameters=[
        _query("pageSize", {"type": "integer", "default": 50, "description": "clamped to 1..1000"}),
        _query("pageToken", {"type": "string", "description": "the previous page's nextPageToken"})])
    paths["/v1beta/models/{model}"] = _get("Gemini: one model", GOOGLE_KEY, wire="gemini", parameters=[MODEL])
    return {
        "openapi": "3.1.0",
        "info": {"title": "fak gateway", "version": "1", "description": "The agent kernel's gateway: OpenAI and "
                 "Anthropic, Responses and Gemini wires and MCP, each error in its own wire's shape."},
        "paths": paths,
        "components": {"schemas": {**components, **ERRORS}, "securitySchemes": SECURITY_SCHEMES},
    }


@get("/openapi.json", sync_to_thread=False, include_in_schema=False)
def openapi_json() -> Response:
    return Response(document())
