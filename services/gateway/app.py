"""The gateway's HTTP app (litestar): small typed handlers over shared state on `app.state`.

    GET  /healthz                      ready (200) when every routed model has a worker and every service reported
    GET  /metrics                      Prometheus
    GET  /v1/models                    OpenAI or Anthropic list shape (by the anthropic-version header)
    POST /v1/chat/completions          OpenAI chat (+SSE)
    POST /v1/completions               OpenAI raw-prompt completions (+SSE)
    POST /v1/messages                  Anthropic messages (+SSE)
    POST /v1/messages/count_tokens     Anthropic token counting
    GET  /v1/fak/audit                 verdicts and eviction receipts, filterable (admin key: all; API key: its own)
    GET  /v1/fak/requests/{id}         a request's context as it left for the engines (admin, or its own tenant)
    POST /mcp                          MCP (streamable HTTP, stateless): the MCP servers of FAK_MCP (mcp_gateway.py)

Every chat request runs the one pipeline (pipeline.py): wire decode, route (in-kernel engine or upstream),
the guard (guard.py: context filter, verdict barrier, tool-call adjudication), the backend, wire encode.
A same-wire upstream gets the client's own request (proxy.py); raw completions carry neither tool results
nor tool calls and are served in-kernel.

Every error leaves in the shape of the wire it came in on (errors.py).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
from typing import Any

from litestar import Litestar, Request, Response, asgi, delete, get, post
from litestar.exceptions import HTTPException
from litestar.middleware import ASGIMiddleware
from litestar.response import Stream

from fak_gateway import anthropic_wire, openai_wire, proxy, responses_wire
from fak_gateway.audit_view import AuditView
from fak_gateway.context_filter import ContextFilter
from fak_gateway.engines import Engines
from fak_gateway.errors import WireError, wire_of
from fak_gateway.guard import Guard, start_backend
from fak_gateway.mcp_gateway import Caller, McpGateway
from fak_gateway.openapi import openapi_json
from fak_gateway.pipeline import CACHE_SALT_HEADER, Pipeline, tenant
from fak_gateway.proxy import Proxied
from fak_gateway.responses_store import ResponseStore
from fak_gateway.upstream import Upstreams
from fakcore import bus
from fakcore.audit import ensure_audit_stream
from fakcore.mcp_config import load as load_mcp
from fakcore.metrics import Metrics
from fakcore.policy import key_id
from fakcore.protocol import Accepted, CountTokensRequest, Heartbeat, encode, subjects
from fakcore.routes import RouteTable
from fakcore.service import instance_name
from fakcore.settings import Settings

log = logging.getLogger("fak.gateway")


class GatewayMetrics:
    def __init__(self, metrics: Metrics):
        self.requests = metrics.counter("gateway_requests_total", "HTTP requests by route and status", ("route", "status"))
        self.latency = metrics.histogram("gateway_request_seconds", "Time to the full response (streams: to the last byte)", ("route",))
        self.ttfb = metrics.histogram("gateway_time_to_first_token_seconds", "Request arrival to the first streamed token", ("route",))
        self.tokens = metrics.counter("gateway_tokens_total", "Tokens through the gateway", ("model", "kind"))

    def count_tokens(self, model: str, done: Any) -> None:
        u = done.usage
        self.tokens.labels(model, "prompt").inc(u.prompt_tokens)
        self.tokens.labels(model, "cached").inc(u.cached_tokens)
        self.tokens.labels(model, "completion").inc(u.completion_tokens)


class State:
    """What the handlers share; built by the lifespan."""

    def __init__(self, settings: Settings, metrics: Metrics, engines: Engines | None = None):
        self.settings = settings
        self.metrics = metrics
        self.m = GatewayMetrics(metrics)
        self.engines = engines
        self.started = time.time()
        self.filter = ContextFilter(settings.verdict_cache_size, verdict_key=settings.verdict_key)
        self.audit = AuditView(settings.audit_buffer)
        self.guard: Guard | None = None
        self.pipeline: Pipeline | None = None
        self.responses: ResponseStore | None = None
        self.mcp: McpGateway | None = None


def _state(request: Request) -> State:
    return request.app.state.fak


PUBLIC = ("/healthz", "/metrics", "/openapi.json")  # and /v1/fak/*, which take an admin key or a tenant's API key (_viewer)


def authenticate(request: Request) -> None:
    """Before any handler (litestar's before_request): the gateway's own API keys on every model route, so
    nothing is read, decoded or routed for a caller without one. `x-fak-api-key` carries a gateway key
    beside a client key that is meant for an upstream."""
    settings = _state(request).settings
    path = request.url.path
    if not settings.api_keys or path in PUBLIC or path.startswith("/v1/fak/"):
        return
    key = request.headers.get("x-fak-api-key") or _api_key(request)
    if key not in settings.api_keys:
        raise WireError("authentication", "invalid or missing API key")


def _api_key(request: Request) -> str:
    auth = request.headers.get("authorization", "")
    return auth[7:].strip() if auth.lower().startswith("bearer ") else request.headers.get("x-api-key", "")


def _viewer(request: Request, settings: Settings) -> str | None:
    """Who reads an operator view: None for an admin key (everything), else the key id of a gateway API key
    (its own tenant's records only). Without either the view is refused."""
    key = request.headers.get("x-fak-admin-key") or _api_key(request)
    if settings.admin_keys and key in settings.admin_keys:
        return None
    if settings.api_keys and key in settings.api_keys:
        return key_id(key)
    if not settings.admin_keys and not settings.api_keys:
        raise WireError("permission", "operator endpoints are disabled: set FAK_ADMIN_KEYS (or FAK_API_KEYS for "
                                      "per-tenant views)")
    raise WireError("authentication", "invalid or missing admin or API key")


def _session(request: Request) -> str:
    return request.headers.get("x-fak-session", "")


def _key_id(request: Request) -> str:
    return key_id(_api_key(request))


def _pipeline(state: State) -> Pipeline:
    if state.pipeline is None:
        raise WireError("unavailable", "the gateway is starting: its routes are not loaded yet")
    return state.pipeline


async def _proxied(state: State, request: Request, wire: str, route: str, call: Coroutine[Any, Any, Proxied]) -> Response | Stream:
    """A same-wire upstream's answer: its status and body (or stream), the boundary applied on the way."""
    try:
        p: Proxied = await _while_connected(request, call)
    except ClientGone:
        return Response(None, status_code=CLIENT_GONE)
    if p.stream is not None:
        return _stream(state, route, wire, p.stream, p.headers)
    return Response(p.body, status_code=p.status, headers=p.headers, media_type=p.media_type)


def _receipt_headers(first: Accepted) -> dict[str, str]:
    r = first.receipt
    return {"x-fak-engine": r.engine, "x-fak-worker": r.worker, "x-fak-backend": r.backend,
            "x-fak-weights-digest": r.weights_digest}


def _stream(state: State, route: str, wire: str, body: AsyncIterator[bytes], headers: dict[str, str]) -> Stream:
    t0 = time.monotonic()

    async def guarded() -> AsyncIterator[bytes]:
        first = True
        try:
            async for chunk in body:
                if first:
                    state.m.ttfb.labels(route).observe(time.monotonic() - t0)
                    first = False
                yield chunk
        except WireError as err:  # headers are gone: the error travels as a stream event
            yield STREAM_ERRORS[wire](err)

    return Stream(guarded(), media_type="text/event-stream",
                  headers={"cache-control": "no-cache", "x-accel-buffering": "no", **headers})


STREAM_ERRORS = {"anthropic": anthropic_wire.stream_error, "openai": openai_wire.stream_error,
                 "responses": responses_wire.stream_error}
CLIENT_GONE = 499  # the status (nginx's) counted for a request whose client left before its response


class ClientGone(Exception):
    pass


async def _while_connected(request: Request, work: Coroutine[Any, Any, Any]) -> Any:
    """Run `work` unless the client disconnects first (then ClientGone, and `work` is cancelled).

    The body is read by now, so the next ASGI message is `http.disconnect`: waiting for it costs nothing
    while the client stays. Cancelling the work closes its reply stream, whose finally tells the worker to
    drop the sequence (Engines.generate) or lets the upstream request go (proxy). Streams need none of this:
    the streaming response listens for the disconnect itself and cancels the body's iteration."""
    working = asyncio.ensure_future(work)
    gone = asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait((working, gone), return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
        working.cancel()  # a no-op once it is done
    try:
        return await working
    except asyncio.CancelledError:
        if not gone.done() or gone.cancelled():
            raise  # not the client's leaving: this handler itself is being cancelled
        log.info("client left %s before its response; its request is cancelled", request.url.path)
        raise ClientGone from None


async def _respond(request: Request, collect: Coroutine[Any, Any, dict[str, Any]], headers: dict[str, str]) -> Response:
    """A non-stream response, collected from the reply stream unless the client disconnects first."""
    try:
        return Response(await _while_connected(request, collect), headers=headers)
    except ClientGone:
        return Response(None, status_code=CLIENT_GONE)


async def _disconnected(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass


# ---------------------------------------------------------------------------------------------------------
# Handlers
# ---------------------------------------------------------------------------------------------------------


@get("/healthz", sync_to_thread=False)
def healthz(request: Request) -> Response:
    """Ready (200, ok) only when every in-kernel model routed here has a live worker and every service the
    boundary needs has reported: the adjudicator when screening is on, and the kvmmu too when an engine may
    hold a quarantined span. Otherwise 503, naming what is missing."""
    state = _state(request)
    s = state.settings
    engines = state.engines
    workers = engines.live_workers() if engines else []
    services = engines.live_services() if engines else []
    nats_ok = bool(engines and engines.nc.is_connected)
    served = {w.model for w in workers}
    pipeline = state.pipeline
    wanted = pipeline.engine_models(s.routed_models) if pipeline else list(s.routed_models)
    unserved = [m for m in wanted if m not in served]
    reported = {h.service for h in services if h.ok}
    needed = ({"adjudicator"} | ({"kvmmu"} if wanted else set())) if s.adjudicate else set()
    missing = sorted(needed - reported)
    failing = sorted({f"{h.service}: {h.detail}" for h in services if not h.ok})
    ok = nats_ok and not unserved and not missing and not failing
    body = {
        "ok": ok,
        "model": s.routed_models[0],
        "models": pipeline.models() if pipeline else list(s.routed_models),
        "engine": "inkernel" if wanted else "upstream",
        "routes": pipeline.health() if pipeline else [],
        "nats": nats_ok,
        "uptime_s": round(time.time() - state.started, 1),
        "unserved": unserved,
        "missing_services": missing,
        "failing_services": failing,
        "workers": [{"worker": w.worker, "model": w.model, "engine": w.engine, "backend": w.backend, "device": w.device,
                     "active": w.active, "queued": w.queued, "capacity": w.capacity} for w in workers],
        "services": sorted({h.service for h in services} | ({"engine"} if workers else set())),
        "adjudication": s.adjudicate,
        "quarantined_blocks": len(state.filter.quarantined),
        "mcp": state.mcp.health() if state.mcp else [],
    }
    return Response(body, status_code=200 if ok else 503)


@get("/metrics", sync_to_thread=False)
def metrics_endpoint(request: Request) -> Response:
    from prometheus_client import CONTENT_TYPE_LATEST

    return Response(_state(request).metrics.render(), media_type=CONTENT_TYPE_LATEST)


@get("/v1/models", sync_to_thread=False)
def list_models(request: Request) -> Response:
    state = _state(request)
    names = state.pipeline.models() if state.pipeline else list(state.settings.routed_models)
    created = int(state.started)
    if request.headers.get("anthropic-version"):
        data = [{"type": "model", "id": n, "display_name": n, "created_at": "1970-01-01T00:00:00Z"} for n in names]
        return Response({"data": data, "has_more": False, "first_id": names[0] if names else None,
                         "last_id": names[-1] if names else None})
    return Response({"object": "list", "data": [{"id": n, "object": "model", "created": created, "owned_by": "fak"} for n in names]})


@post("/v1/chat/completions", status_code=200)
async def chat_completions(request: Request) -> Response | Stream:
    state, body = _state(request), await request.body()
    r = openai_wire.decode(body, openai_wire.ChatRequest)
    pipeline = _pipeline(state)
    route = pipeline.route(r.model)
    upstream = pipeline.same_wire(route, "openai")
    if upstream is not None:  # OpenAI -> OpenAI: the client's JSON goes through
        req = openai_wire.chat_to_bus(r, _session(request), strict=False)
        return await _proxied(state, request, "openai", "chat",
                              pipeline.proxied(route, upstream, req, _key_id(request)).openai(body, request.headers, r.stream))
    req = openai_wire.chat_to_bus(r, _session(request))
    first, replies = await pipeline.start(req, route, request.headers, _key_id(request), r.cache_salt or "")
    if r.stream:
        include_usage = bool((r.stream_options or {}).get("include_usage"))
        return _stream(state, "chat", "openai", openai_wire.chat_stream(req, first, replies, include_usage), _receipt_headers(first))
    return await _respond(request, openai_wire.chat_response(req, replies), _receipt_headers(first))


@post("/v1/completions", status_code=200)
async def completions(request: Request) -> Response | Stream:
    state = _state(request)
    r = openai_wire.decode(await request.body(), openai_wire.CompletionRequest)
    pipeline = _pipeline(state)
    route = pipeline.route(r.model)
    if not route.inkernel:
        raise WireError("invalid_request", f"model {r.model!r} is served by an upstream: raw-prompt completions are served "
                                           "in-kernel only; use /v1/chat/completions")
    req = openai_wire.completion_to_bus(r, _session(request))
    req.tenant = tenant(_key_id(request), request.headers.get(CACHE_SALT_HEADER, ""))
    first, replies = await start_backend(pipeline.backend(route, request.headers), req)  # no tool results, no calls
    if r.stream:
        include_usage = bool((r.stream_options or {}).get("include_usage"))
        return _stream(state, "completions", "openai", openai_wire.completion_stream(req, first, replies, include_usage),
                       _receipt_headers(first))
    return await _respond(request, openai_wire.completion_response(req, replies), _receipt_headers(first))


@post("/v1/messages", status_code=200)
async def messages(request: Request) -> Response | Stream:
    state, body = _state(request), await request.body()
    r = anthropic_wire.decode_messages(body)
    pipeline = _pipeline(state)
    route = pipeline.route(r.model)
    upstream = pipeline.same_wire(route, "anthropic")
    if upstream is not None:  # Anthropic -> Anthropic: the client's very bytes go through
        req = anthropic_wire.messages_to_bus(r, _session(request), strict=False)
        return await _proxied(state, request, "anthropic", "messages", pipeline.proxied(route, upstream, req, _key_id(request))
                              .anthropic(body, request.headers, request.url.query, r.stream))
    req = anthropic_wire.messages_to_bus(r, _session(request))
    first, replies = await pipeline.start(req, route, request.headers, _key_id(request))
    headers = _receipt_headers(first)
    if route.inkernel and (ignored := anthropic_wire.ignored(r)):
        headers["x-fak-ignored"] = ",".join(ignored)  # accepted, but not acted on by a local model
    if r.stream:
        return _stream(state, "messages", "anthropic", anthropic_wire.message_stream(req, first, replies, first.prompt_tokens),
                       headers)
    return await _respond(request, anthropic_wire.message_response(req, replies), headers)


@post("/v1/responses", status_code=200)
async def responses(request: Request) -> Response | Stream:
    state, body = _state(request), await request.body()
    r = responses_wire.decode_request(body)
    pipeline = _pipeline(state)
    route = pipeline.route(r.model)
    key = _key_id(request)
    upstream = pipeline.same_wire(route, "responses")
    if upstream is not None:  # Responses -> Responses: the client's JSON goes through (the upstream stores)
        turn = responses_wire.to_bus(r, [], _session(request), strict=False)
        return await _proxied(state, request, "responses", "responses",
                              pipeline.proxied(route, upstream, turn.req, key).responses(body, request.headers, r.stream))
    store = _store(state)
    history = await store.conversation(r.previous_response_id, key) if r.previous_response_id else []
    turn = responses_wire.to_bus(r, history, _session(request))
    first, replies = await pipeline.start(turn.req, route, request.headers, key, r.prompt_cache_key or "")
    headers = _receipt_headers(first)
    if ignored := responses_wire.ignored(r, [*history, *turn.items]):
        headers["x-fak-ignored"] = ",".join(ignored)  # accepted, but not acted on

    async def keep(response: dict[str, Any]) -> None:
        if r.store is not False:
            await store.put(key, r.previous_response_id or "", turn.items, response)

    if r.stream:
        return _stream(state, "responses", "responses", responses_wire.stream(turn, first, replies, keep), headers)

    async def collect() -> dict[str, Any]:
        response = await responses_wire.response(turn, replies)
        await keep(response)
        return response

    return await _respond(request, collect(), headers)


def _store(state: State) -> ResponseStore:
    if state.responses is None:
        raise WireError("unavailable", "the gateway has no bus connection: the response store is unavailable")
    return state.responses


@get("/v1/responses/{response_id:str}")
async def get_response(request: Request, response_id: str) -> Response:
    stored = await _store(_state(request)).get(response_id, _key_id(request))
    if stored is None:
        raise WireError("not_found", f"response {response_id!r} was not found (never stored, expired or deleted)")
    return Response(stored.response)


@delete("/v1/responses/{response_id:str}", status_code=200)
async def delete_response(request: Request, response_id: str) -> Response:
    if not await _store(_state(request)).delete(response_id, _key_id(request)):
        raise WireError("not_found", f"response {response_id!r} was not found (never stored, expired or deleted)")
    return Response({"id": response_id, "object": "response", "deleted": True})


@post("/v1/responses/input_tokens", status_code=200)
async def response_input_tokens(request: Request) -> Response:
    state = _state(request)
    r = openai_wire.decode(await request.body(), responses_wire.InputTokensRequest)
    route = _pipeline(state).route(r.model)
    if not route.inkernel:
        raise WireError("not_implemented", f"model {r.model!r} is served by an upstream; count locally")
    key = _key_id(request)
    history = await _store(state).conversation(r.previous_response_id, key) if r.previous_response_id else []
    messages = responses_wire.to_messages([*history, *responses_wire.input_items(r.input)], r.instructions)
    counted = CountTokensRequest(model=route.target, messages=messages, tools=responses_wire.to_tools(r.tools))
    assert state.engines is not None
    if state.guard is not None:
        state.filter.apply(counted.messages)
    return Response({"object": "response.input_tokens", "input_tokens": await state.engines.count_tokens(counted)})


@post("/v1/messages/count_tokens", status_code=200)
async def count_tokens(request: Request) -> Response | Stream:
    state, body = _state(request), await request.body()
    r = anthropic_wire.decode_count(body)
    pipeline = _pipeline(state)
    route = pipeline.route(r.model)
    if not route.inkernel:
        upstream = pipeline.same_wire(route, "anthropic")
        if upstream is None:
            raise WireError("not_implemented", f"model {r.model!r} is served by an OpenAI-compatible upstream, which has "
                                               "no token counting; count locally")
        lookup = state.guard.placeholder_of if state.guard is not None else (lambda b: None)
        return await _proxied(state, request, "anthropic", "count_tokens",
                              proxy.count_tokens(upstream, route, body, request.headers, request.url.query, lookup))
    assert state.engines is not None
    counted = anthropic_wire.count_to_bus(r)
    counted.model = route.target
    if state.guard is not None:  # count what a request would send: quarantined results as placeholders
        state.filter.apply(counted.messages)
    n = await state.engines.count_tokens(counted)
    return Response({"input_tokens": n})


@get("/v1/fak/audit", sync_to_thread=False)
def audit_log(request: Request, request_id: str = "", session: str = "", kind: str = "", block: str = "",
              limit: int = 100) -> Response:
    state = _state(request)
    tenant = _viewer(request, state.settings)
    records = state.audit.query(request_id=request_id, session=session, kind=kind, block=block, limit=max(1, min(limit, 5000)),
                                tenant=tenant)
    body: dict[str, Any] = {"records": records}
    if tenant is None:  # how much is quarantined overall is the operator's to know
        body["quarantined_blocks"] = len(state.filter.quarantined)
    return Response(body)


@get("/v1/fak/requests/{request_id:str}", sync_to_thread=False)
def request_context(request: Request, request_id: str) -> Response:
    state = _state(request)
    tenant = _viewer(request, state.settings)
    found = state.audit.requests.get(request_id)
    if found is None or (tenant is not None and found.get("key_id") != tenant):  # another tenant's: not there
        raise WireError("not_found", f"request {request_id!r} is not among this gateway's recent requests")
    return Response(found)


@asgi("/mcp", copy_scope=True)
async def mcp_endpoint(scope: Any, receive: Any, send: Any) -> None:
    """fak's MCP server (streamable HTTP), with the gateway's API keys like every model route."""
    request: Request = Request(scope, receive)
    authenticate(request)
    state = _state(request)
    if state.mcp is None:
        raise WireError("not_found", "no MCP servers are configured here (FAK_MCP)")
    await state.mcp.handle(scope, receive, send, Caller(key=_key_id(request), session=_session(request)))


# ---------------------------------------------------------------------------------------------------------
# Errors, metrics, the app
# ---------------------------------------------------------------------------------------------------------

ROUTES = {"/v1/chat/completions": "chat", "/v1/completions": "completions", "/v1/messages": "messages",
          "/v1/messages/count_tokens": "count_tokens", "/v1/models": "models", "/healthz": "healthz", "/metrics": "metrics",
          "/v1/fak/audit": "audit", "/v1/responses": "responses", "/v1/responses/input_tokens": "responses_input_tokens",
          "/mcp": "mcp"}


def _error_response(request: Request, err: WireError) -> Response:
    status, body = err.render(wire_of(request.url.path))
    headers = {"retry-after": str(max(1, math.ceil(err.retry_after)))} if err.retry_after is not None else None
    return Response(body, status_code=status, headers=headers)


def on_wire_error(request: Request, exc: WireError) -> Response:
    return _error_response(request, exc)


def on_too_large(request: Request, exc: bus.TooLarge) -> Response:
    """A request (or one tool result) too big for one bus message: the client's 413, not a 5xx."""
    return _error_response(request, WireError("too_large", f"the request is {exc.size} bytes on the bus, above its "
                                                           f"{exc.limit}-byte message limit; send less context"))


def on_http_error(request: Request, exc: HTTPException) -> Response:
    kinds = {400: "invalid_request", 401: "authentication", 403: "permission", 404: "not_found", 405: "invalid_request",
             413: "too_large", 429: "rate_limit"}
    kind = kinds.get(exc.status_code, "internal")
    message = exc.detail if exc.status_code != 413 else f"request body exceeds the limit of {_state(request).settings.max_body_bytes} bytes"
    if exc.status_code == 404:
        message = f"no route {request.method} {request.url.path}"
    elif exc.status_code == 405:
        message = f"method {request.method} is not allowed on {request.url.path}"
    status, body = WireError(kind, str(message)).render(wire_of(request.url.path))
    return Response(body, status_code=exc.status_code if exc.status_code in kinds else status)


def on_unexpected(request: Request, exc: Exception) -> Response:
    log.exception("unhandled error on %s", request.url.path)
    return _error_response(request, WireError("internal", f"internal error: {type(exc).__name__}"))


async def _heartbeat(nc: Any, settings: Settings) -> None:
    instance = instance_name("gateway")
    url = f"http://{settings.host}:{settings.port}"
    while True:
        try:
            await nc.publish(subjects.health("gateway"), encode(Heartbeat(service="gateway", instance=instance,
                                                                           metrics_url=url + "/metrics", ts=time.time())))
        except Exception:  # reconnecting: the next beat tries again
            pass
        await asyncio.sleep(settings.announce_interval_s)


class CountRequests(ASGIMiddleware):
    """fak_gateway_requests_total{route,status} for every response, errors included."""

    async def handle(self, scope: Any, receive: Any, send: Any, next_app: Any) -> None:
        route = ROUTES.get(scope.get("path", ""), "other")

        m = scope["app"].state.fak.m
        t0 = time.monotonic()

        async def send_counted(message: Any) -> None:
            if message["type"] == "http.response.start":
                m.requests.labels(route, str(message["status"])).inc()
            elif message["type"] == "http.response.body" and not message.get("more_body", False):
                m.latency.labels(route).observe(time.monotonic() - t0)
            await send(message)

        await next_app(scope, receive, send_counted)


def create_app(settings: Settings, metrics: Metrics | None = None, connect: bool = True) -> Litestar:
    """The gateway app. `connect=False` builds it without the bus (unit tests of the wires)."""
    metrics = metrics or Metrics("gateway")

    @asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        state = State(settings, metrics)
        app.state.fak = state
        if not connect:
            yield
            return
        routes = RouteTable.from_settings(settings)  # a bad routes file stops the gateway here, before it serves
        mcp_config = load_mcp(settings.mcp) if settings.mcp else None  # so does a bad MCP servers file
        upstreams = Upstreams(routes.upstreams, metrics)
        nc = await bus.connect(settings, "gateway")
        state.engines = Engines(nc, settings, on_done=state.m.count_tokens)
        await state.engines.start()
        if settings.adjudicate:
            # Serve nothing before the filter has replayed every quarantine verdict ever published.
            await bus.ensure_streams(nc)
            await ensure_audit_stream(nc)
            await state.filter.start(nc)
            await state.audit.start(nc)
            state.guard = Guard(nc, settings, metrics, state.filter, state.audit, instance_name("gateway"))
        state.pipeline = Pipeline(routes, upstreams, state.engines, state.guard)
        state.responses = ResponseStore(nc, settings)
        await state.responses.start()
        if mcp_config is not None:
            state.mcp = McpGateway(mcp_config, settings, metrics, state.guard, state.filter)
            await state.mcp.start()
        beat = asyncio.create_task(_heartbeat(nc, settings))
        try:
            yield
        finally:
            beat.cancel()
            if state.mcp is not None:
                await state.mcp.stop()
            await upstreams.close()
            await state.filter.stop()
            await state.audit.stop()
            try:
                await nc.drain()
            except Exception:  # the server is gone: nothing left to deliver
                pass

    return Litestar(
        route_handlers=[healthz, metrics_endpoint, list_models, chat_completions, completions, messages, count_tokens,
                        responses, get_response, delete_response, response_input_tokens, audit_log, request_context,
                        openapi_json, mcp_endpoint],
        lifespan=[lifespan],
        before_request=authenticate,
        exception_handlers={WireError: on_wire_error, bus.TooLarge: on_too_large, HTTPException: on_http_error,
                            Exception: on_unexpected},
        request_max_body_size=settings.max_body_bytes,
        middleware=[CountRequests()],
        openapi_config=None,  # the published schema is openapi.py's, built from the wires' Structs
        debug=False,
    )
