"""What the gateway's HTTP handlers share: the state the lifespan builds, who is calling (API keys, the
operator views' viewer, the session), and how a response leaves (SSE with the wire's error event, a
non-stream answer unless the client left first, a same-wire upstream's answer as it came)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Coroutine
from dataclasses import dataclass
from typing import Any

from litestar import Request, Response
from litestar.response import Stream

from fak_gateway import anthropic_wire, gemini_wire, openai_wire, responses_wire
from fak_gateway.audit_view import AuditView
from fak_gateway.context_filter import ContextFilter
from fak_gateway.engines import Engines
from fak_gateway.errors import WireError
from fak_gateway.guard import Guard, report_headers
from fak_gateway.mcp_gateway import McpGateway
from fak_gateway.pipeline import Pipeline
from fak_gateway.proxy import Proxied
from fak_gateway.responses_store import ResponseStore
from fakcore.metrics import Metrics
from fakcore.policy import key_id
from fakcore.protocol import Accepted
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


def state_of(request: Request) -> State:
    return request.app.state.fak


PUBLIC = ("/healthz", "/metrics", "/openapi.json")  # and /v1/fak/*, which take an admin key or a tenant's API key (_viewer)


def authenticate(request: Request) -> None:
    """Before any handler (litestar's before_request): the gateway's own API keys on every model route, so
    nothing is read, decoded or routed for a caller without one. `x-fak-api-key` carries a gateway key
    beside a client key that is meant for an upstream."""
    settings = state_of(request).settings
    path = request.url.path
    if not settings.api_keys or path in PUBLIC or path.startswith("/v1/fak/"):
        return
    key = request.headers.get("x-fak-api-key") or api_key(request)
    if key not in settings.api_keys:
        raise WireError("authentication", "invalid or missing API key")


def api_key(request: Request) -> str:
    """The caller's key: a Bearer token, x-api-key, or Google's x-goog-api-key header or `key=` query parameter."""
    auth = request.headers.get("authorization", "")
    if auth.lower().startswith("bearer "):
        return auth[7:].strip()
    return (request.headers.get("x-api-key") or request.headers.get("x-goog-api-key")
            or request.query_params.get("key") or "")


@dataclass(frozen=True)
class Viewer:
    """A tenant reading an operator view: its name (the configured tenant, else its key's id) and the key
    ids whose records it sees (every key of a `tenants` entry, else its own)."""

    tenant: str
    key_ids: frozenset[str]

    def sees(self, record: dict[str, Any]) -> bool:
        return record.get("key_id") in self.key_ids


def sees(viewer: Viewer | None, record: dict[str, Any]) -> bool:
    """Whether `viewer` (None: an operator) may read `record` (an audit or request record)."""
    return viewer is None or viewer.sees(record)


def viewer(request: Request, settings: Settings) -> Viewer | None:
    """Who reads an operator view: None for an admin key (everything), else the tenant of a gateway API key
    (its tenant's records only: those of every key of that tenant). Without either the view is refused."""
    key = request.headers.get("x-fak-admin-key") or api_key(request)
    if settings.admin_keys and key in settings.admin_keys:
        return None
    if settings.api_keys and key in settings.api_keys:
        tenants = settings.tenant_of()
        mine = key_id(key)
        if mine not in tenants:
            return Viewer(mine, frozenset((mine,)))
        return Viewer(tenants[mine], frozenset(k for k, t in tenants.items() if t == tenants[mine]))
    if not settings.admin_keys and not settings.api_keys:
        raise WireError("permission", "operator endpoints are disabled: set FAK_ADMIN_KEYS (or FAK_API_KEYS for "
                                      "per-tenant views)")
    raise WireError("authentication", "invalid or missing admin or API key")


def session_of(request: Request) -> str:
    return request.headers.get("x-fak-session", "")


def key_id_of(request: Request) -> str:
    return key_id(api_key(request))


def served_models(state: State) -> list[str]:
    """Every model id this gateway answers for, in the order its routes name them."""
    return state.pipeline.models() if state.pipeline else list(state.settings.routed_models)


def pipeline_of(state: State) -> Pipeline:
    if state.pipeline is None:
        raise WireError("unavailable", "the gateway is starting: its routes are not loaded yet")
    return state.pipeline


async def proxied(state: State, request: Request, wire: str, route: str, call: Coroutine[Any, Any, Proxied]) -> Response | Stream:
    """A same-wire upstream's answer: its status and body (or stream), the boundary applied on the way."""
    try:
        p: Proxied = await while_connected(request, call)
    except ClientGone:
        return Response(None, status_code=CLIENT_GONE)
    if p.stream is not None:
        return sse(state, route, wire, p.stream, p.headers, p.media_type)
    return Response(p.body, status_code=p.status, headers=p.headers, media_type=p.media_type)


def receipt_headers(first: Accepted, state: State) -> dict[str, str]:
    """Who served the request, and what the boundary did to its tool results (guard.report_headers)."""
    r = first.receipt
    out = {"x-fak-engine": r.engine, "x-fak-worker": r.worker, "x-fak-backend": r.backend,
           "x-fak-weights-digest": r.weights_digest}
    return {**out, **report_headers(quarantine_report(first, state))}


def quarantine_report(first: Accepted, state: State) -> list[dict[str, Any]]:
    guard = state.pipeline.guard if state.pipeline is not None else None
    return guard.quarantine_report(first.request_id) if guard is not None else []


def sse(state: State, route: str, wire: str, body: AsyncIterator[bytes], headers: dict[str, str],
        media_type: str = "text/event-stream") -> Stream:
    """A stream (SSE, or a JSON array written piece by piece: Gemini's stream without alt=sse)."""
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

    return Stream(guarded(), media_type=media_type,
                  headers={"cache-control": "no-cache", "x-accel-buffering": "no", **headers})


STREAM_ERRORS = {"anthropic": anthropic_wire.stream_error, "openai": openai_wire.stream_error,
                 "responses": responses_wire.stream_error, "gemini": gemini_wire.stream_error}
CLIENT_GONE = 499  # the status (nginx's) counted for a request whose client left before its response


class ClientGone(Exception):
    pass


async def while_connected(request: Request, work: Coroutine[Any, Any, Any]) -> Any:
    """Run `work` unless the client disconnects first (then ClientGone, and `work` is cancelled).

    The body is read by now, so the next ASGI message is `http.disconnect`: waiting for it costs nothing
    while the client stays. Cancelling the work closes its reply stream, whose finally tells the worker to
    drop the sequence (Engines.generate) or lets the upstream request go (proxy). Streams need none of this:
    the streaming response listens for the disconnect itself and cancels the body's iteration."""
    working = asyncio.ensure_future(work)
    gone = asyncio.ensure_future(disconnected(request))
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


async def respond(request: Request, collect: Coroutine[Any, Any, dict[str, Any]], headers: dict[str, str],
                  first: Accepted | None = None) -> Response:
    """A non-stream response, collected from the reply stream unless the client disconnects first. With
    `first`, a request whose tool results were quarantined says so in the body too, beside the wire's own
    fields (`fak.quarantined`, Guard.report), and its headers name the eviction receipts seen by the end."""
    try:
        body = await while_connected(request, collect)
    except ClientGone:
        return Response(None, status_code=CLIENT_GONE)
    if first is not None and (report := quarantine_report(first, state_of(request))):
        body["fak"] = {"quarantined": report}
        headers = {**headers, **report_headers(report)}
    return Response(body, headers=headers)


async def disconnected(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass
