"""The OpenAI and Anthropic model routes: /v1/models, /v1/chat/completions, /v1/completions, /v1/messages
and /v1/messages/count_tokens. Each decodes its wire, routes the model, and runs the one pipeline (or,
for a same-wire upstream, proxies the client's own request through the boundary)."""

from __future__ import annotations

from litestar import Request, Response, get, post
from litestar.response import Stream

from fak_gateway import anthropic_wire, openai_wire, proxy
from fak_gateway.errors import WireError, google_client
from fak_gateway.guard import start_backend
from fak_gateway.handling import (
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
from fak_gateway.pipeline import CACHE_SALT_HEADER, tenant
from fak_gateway.routes_gemini import gemini_model, gemini_models_page


@get("/v1/models", sync_to_thread=False)
def list_models(request: Request) -> Response:
    """OpenAI's list, Anthropic's for a client that sends anthropic-version, Google's for a Google client (the
    google-genai SDK's default version is v1, so it lists here)."""
    if google_client(request.headers, request.query_params):
        return gemini_models_page(request)
    state = state_of(request)
    names = served_models(state)
    created = int(state.started)
    if request.headers.get("anthropic-version"):
        data = [{"type": "model", "id": n, "display_name": n, "created_at": "1970-01-01T00:00:00Z"} for n in names]
        return Response({"data": data, "has_more": False, "first_id": names[0] if names else None,
                         "last_id": names[-1] if names else None})
    return Response({"object": "list", "data": [{"id": n, "object": "model", "created": created, "owned_by": "fak"} for n in names]})


@get("/v1/models/{name:path}", sync_to_thread=False)
def get_model(request: Request, name: str) -> Response:
    """One model: OpenAI's object, or Google's for a Google client; a model this gateway does not serve is a 404."""
    if google_client(request.headers, request.query_params):
        return gemini_model(request, name)
    state, name = state_of(request), name.lstrip("/")  # a path parameter keeps its leading slash
    if name not in served_models(state):
        raise WireError("not_found", f"The model '{name}' does not exist", param="model")
    return Response({"id": name, "object": "model", "created": int(state.started), "owned_by": "fak"})


@post("/v1/chat/completions", status_code=200)
async def chat_completions(request: Request) -> Response | Stream:
    state, body = state_of(request), await request.body()
    r = openai_wire.decode(body, openai_wire.ChatRequest)
    pipeline = pipeline_of(state)
    route = pipeline.route(r.model)
    upstream = pipeline.same_wire(route, "openai")
    if upstream is not None:  # OpenAI -> OpenAI: the client's JSON goes through
        req = openai_wire.chat_to_bus(r, session_of(request), strict=False)
        return await proxied(state, request, "openai", "chat",
                             pipeline.proxied(route, upstream, req, key_id_of(request)).openai(body, request.headers, r.stream))
    req = openai_wire.chat_to_bus(r, session_of(request))
    first, replies = await pipeline.start(req, route, request.headers, key_id_of(request), r.cache_salt or "")
    if r.stream:
        include_usage = bool((r.stream_options or {}).get("include_usage"))
        return sse(state, "chat", "openai", openai_wire.chat_stream(req, first, replies, include_usage), receipt_headers(first, state))
    return await respond(request, openai_wire.chat_response(req, replies), receipt_headers(first, state), first)


@post("/v1/completions", status_code=200)
async def completions(request: Request) -> Response | Stream:
    state = state_of(request)
    r = openai_wire.decode(await request.body(), openai_wire.CompletionRequest)
    pipeline = pipeline_of(state)
    route = pipeline.route(r.model)
    if not route.inkernel:
        raise WireError("invalid_request", f"model {r.model!r} is served by an upstream: raw-prompt completions are served "
                                           "in-kernel only; use /v1/chat/completions")
    req = openai_wire.completion_to_bus(r, session_of(request))
    req.tenant = tenant(key_id_of(request), request.headers.get(CACHE_SALT_HEADER, ""), pipeline.tenants)
    first, replies = await start_backend(pipeline.backend(route, request.headers), req)  # no tool results, no calls
    if r.stream:
        include_usage = bool((r.stream_options or {}).get("include_usage"))
        return sse(state, "completions", "openai", openai_wire.completion_stream(req, first, replies, include_usage),
                   receipt_headers(first, state))
    return await respond(request, openai_wire.completion_response(req, replies), receipt_headers(first, state))


@post("/v1/messages", status_code=200)
async def messages(request: Request) -> Response | Stream:
    state, body = state_of(request), await request.body()
    r = anthropic_wire.decode_messages(body)
    pipeline = pipeline_of(state)
    route = pipeline.route(r.model)
    upstream = pipeline.same_wire(route, "anthropic")
    if upstream is not None:  # Anthropic -> Anthropic: the client's very bytes go through
        req = anthropic_wire.messages_to_bus(r, session_of(request), strict=False)
        return await proxied(state, request, "anthropic", "messages", pipeline.proxied(route, upstream, req, key_id_of(request))
                             .anthropic(body, request.headers, request.url.query, r.stream))
    req = anthropic_wire.messages_to_bus(r, session_of(request))
    first, replies = await pipeline.start(req, route, request.headers, key_id_of(request))
    headers = receipt_headers(first, state)
    if route.inkernel and (ignored := anthropic_wire.ignored(r)):
        headers["x-fak-ignored"] = ",".join(ignored)  # accepted, but not acted on by a local model
    if r.stream:
        return sse(state, "messages", "anthropic", anthropic_wire.message_stream(req, first, replies, first.prompt_tokens),
                   headers)
    return await respond(request, anthropic_wire.message_response(req, replies), headers, first)


@post("/v1/messages/count_tokens", status_code=200)
async def count_tokens(request: Request) -> Response | Stream:
    state, body = state_of(request), await request.body()
    r = anthropic_wire.decode_count(body)
    pipeline = pipeline_of(state)
    route = pipeline.route(r.model)
    if not route.inkernel:
        upstream = pipeline.same_wire(route, "anthropic")
        if upstream is None:
            raise WireError("not_implemented", f"model {r.model!r} is served by an OpenAI-compatible upstream, which has "
                                               "no token counting; count locally")
        lookup = state.guard.placeholder_of if state.guard is not None else (lambda b: None)
        return await proxied(state, request, "anthropic", "count_tokens",
                             proxy.count_tokens(upstream, route, body, request.headers, request.url.query, lookup))
    assert state.engines is not None
    counted = anthropic_wire.count_to_bus(r)
    counted.model = route.target
    if state.guard is not None:  # count what a request would send: quarantined results as placeholders
        state.filter.apply(counted.messages)
    n = await state.engines.count_tokens(counted)
    return Response({"input_tokens": n})
