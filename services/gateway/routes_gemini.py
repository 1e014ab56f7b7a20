"""The Gemini routes: POST /v1beta/models/{model}:generateContent, :streamGenerateContent and :countTokens
(also under /v1/, the google-genai Python SDK's default version), GET /v1beta/models and
/v1beta/models/{model}. Each decodes the wire, routes the model, and runs the one pipeline; a Gemini
upstream gets the client's own request through the boundary (proxy.SameWire.gemini).

The model and the method share one path segment (`gemini-2.5-flash:generateContent`), so the handlers take
the rest of the path and split it at its last colon."""

from __future__ import annotations

import json
from collections.abc import Mapping

from litestar import Request, Response, get, post
from litestar.response import Stream

from fak_gateway import gemini_passthrough, gemini_wire
from fak_gateway.errors import WireError
from fak_gateway.handling import (
    State,
    key_id_of,
    pipeline_of,
    proxied,
    receipt_headers,
    respond,
    served_models,
    session_of,
    sse,
    state_of,
)
from fak_gateway.proxy import Proxied, returned_headers
from fak_gateway.upstream import Upstream
from fakcore.protocol import CountTokensRequest
from fakcore.routes import Route

ROUTE_NAMES = {"generateContent": "gemini_generate", "streamGenerateContent": "gemini_stream",
               "countTokens": "gemini_count_tokens"}  # the request counter's `route` label


def client_headers(request: Request) -> dict[str, str]:
    """The request's headers, with a `key=` query parameter as the x-goog-api-key an upstream is sent."""
    headers = dict(request.headers)
    key = request.query_params.get("key")
    if key and "x-goog-api-key" not in headers:
        headers["x-goog-api-key"] = key
    return headers


@post(["/v1beta/models/{name:path}", "/v1/models/{name:path}"], status_code=200)
async def gemini_models_action(request: Request, name: str) -> Response | Stream:
    model, action = gemini_wire.split_action(name)
    if action == "countTokens":
        return await count_tokens(request, model)
    if action not in gemini_wire.ACTIONS:
        raise WireError("not_implemented" if action else "not_found",
                        f"method {action!r} of models/{model} is not served here (generateContent, streamGenerateContent, "
                        "countTokens)" if action else f"no route POST {request.url.path}")
    state, body = state_of(request), await request.body()
    r = gemini_wire.decode_request(body)
    streamed, alt_sse = action == "streamGenerateContent", request.query_params.get("alt") == "sse"
    pipeline = pipeline_of(state)
    route = pipeline.route(model)
    key, headers = key_id_of(request), client_headers(request)
    label = ROUTE_NAMES[action]
    upstream = pipeline.same_wire(route, "gemini")
    if upstream is not None:  # Gemini -> Gemini: the client's JSON goes through
        req = gemini_wire.to_bus(r, model, session_of(request), strict=False)
        return await proxied(state, request, "gemini", label,
                             pipeline.proxied(route, upstream, req, key).gemini(body, headers, action, alt_sse))
    req = gemini_wire.to_bus(r, model, session_of(request))
    turn = gemini_wire.Turn(req, model)
    first, replies = await pipeline.start(req, route, headers, key)
    out = receipt_headers(first, state)
    if ignored := gemini_wire.ignored(r):
        out["x-fak-ignored"] = ",".join(ignored)  # accepted, but not acted on
    if streamed:
        return sse(state, label, "gemini", gemini_wire.stream(turn, first, replies, alt_sse), out,
                   "text/event-stream" if alt_sse else "application/json")
    return await respond(request, gemini_wire.response(turn, replies), out, first)


async def count_tokens(request: Request, model: str) -> Response:
    state, body = state_of(request), await request.body()
    r = gemini_wire.decode_count(body)
    pipeline = pipeline_of(state)
    route = pipeline.route(model)
    if not route.inkernel:
        upstream = pipeline.same_wire(route, "gemini")
        if upstream is None:
            raise WireError("not_implemented", f"model {model!r} is served by an upstream of another wire, which has no "
                                               "token counting for Gemini requests; count locally")
        p = await count_upstream(state, upstream, route, body, client_headers(request))
        return Response(p.body, status_code=p.status, headers=p.headers, media_type=p.media_type)
    assert state.engines is not None
    counted = CountTokensRequest(model=route.target, messages=gemini_wire.to_messages(r), tools=gemini_wire.to_tools(r.tools))
    if state.guard is not None:  # count what a request would send: quarantined results as placeholders
        state.filter.apply(counted.messages)
    n = await state.engines.count_tokens(counted)
    return Response({"totalTokens": n, "promptTokensDetails": [{"modality": "TEXT", "tokenCount": n}]})


async def count_upstream(state: State, upstream: Upstream, route: Route, body: bytes, headers: Mapping[str, str]) -> Proxied:
    """Token counting is the Gemini upstream's; known-quarantined results are counted as their placeholders,
    as they would be sent."""
    data = json.loads(body)
    inner = data.get("generateContentRequest")
    lookup = state.guard.placeholder_of if state.guard is not None else (lambda b: None)
    replaced, _ = gemini_passthrough.redact(inner if isinstance(inner, dict) else data, lookup)
    if isinstance(inner, dict) and "model" in inner:
        inner["model"] = f"models/{route.target}"
        replaced.append("model")
    out = json.dumps(data, ensure_ascii=False).encode() if replaced else body
    async with upstream.open("count_tokens", out, upstream.headers(headers, same_wire=True), model=route.target) as response:
        return Proxied(response.status_code, returned_headers(response.headers), body=await upstream.read(response))


@get("/v1beta/models", sync_to_thread=False)
def gemini_list_models(request: Request) -> Response:
    return gemini_models_page(request)


def gemini_models_page(request: Request) -> Response:
    """Every model this gateway names, in pages (`pageSize`, default 50; `pageToken`: where the next begins)."""
    state = state_of(request)
    names = served_models(state)
    try:
        size = max(1, min(1000, int(request.query_params.get("pageSize") or 50)))
        start = max(0, int(request.query_params.get("pageToken") or 0))
    except ValueError:
        raise WireError("invalid_request", "pageSize and pageToken must be integers") from None
    page = names[start:start + size]
    body: dict[str, object] = {"models": [gemini_wire.model_object(n, _context(state, n)) for n in page]}
    if start + size < len(names):
        body["nextPageToken"] = str(start + size)
    return Response(body)


@get("/v1beta/models/{name:path}", sync_to_thread=False)
def gemini_get_model(request: Request, name: str) -> Response:
    return gemini_model(request, name)


def gemini_model(request: Request, name: str) -> Response:
    model, action = gemini_wire.split_action(name)
    if action:
        raise WireError("not_found", f"no route GET {request.url.path}")
    state = state_of(request)
    pipeline_of(state).route(model)  # an unknown in-kernel model is a 404
    return Response(gemini_wire.model_object(model, _context(state, model)))


def _context(state: State, model: str) -> int:
    """The context length of a model's live workers (0: not known here, e.g. an upstream's)."""
    if state.engines is None or state.pipeline is None:
        return 0
    route = state.pipeline.routes.resolve(model)
    if not route.inkernel:
        return 0
    return max((a.context_length for a in state.engines.live_workers(route.target)), default=0)
