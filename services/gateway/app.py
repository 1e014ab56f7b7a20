"""The gateway's HTTP app (litestar): small typed handlers over shared state on `app.state`.

    GET  /healthz                      ready (200) when every routed model has a worker and every service reported
    GET  /metrics                      Prometheus
    GET  /v1/models                    OpenAI or Anthropic list shape (by the anthropic-version header)
    POST /v1/chat/completions          OpenAI chat (+SSE)
    POST /v1/completions               OpenAI raw-prompt completions (+SSE)
    POST /v1/messages                  Anthropic messages (+SSE)
    POST /v1/messages/count_tokens     Anthropic token counting
    POST /v1/responses                 OpenAI Responses (+SSE); GET/DELETE /v1/responses/{id}; .../input_tokens
    POST /v1beta/models/{m}:generateContent   Gemini (:streamGenerateContent SSE or JSON array, :countTokens; also
                                       under /v1/); GET /v1beta/models, /v1beta/models/{m}
    GET  /v1/fak/audit                 verdicts and eviction receipts, filterable (admin key: all; API key: its own)
    GET  /v1/fak/requests/{id}         a request's context as it left for the engines (admin, or its own tenant)
    GET  /openapi.json                 the published schema (openapi.py)
    POST /mcp                          MCP (streamable HTTP, stateless): the MCP servers of FAK_MCP (mcp_gateway.py)

The handlers live by audience: routes_models.py (OpenAI and Anthropic), routes_responses.py,
routes_gemini.py, routes_operator.py; what they share (the state, the caller, how a response leaves) in
handling.py. This module holds /mcp, the error handlers, the request counter and the lifespan that builds
the state.

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
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from litestar import Litestar, Request, Response, asgi
from litestar.exceptions import HTTPException
from litestar.middleware import ASGIMiddleware

from fak_gateway.console import Console
from fak_gateway.engines import Engines
from fak_gateway.errors import WireError, wire_of
from fak_gateway.guard import Guard
from fak_gateway.handling import (
    State,
    authenticate,
    key_id_of,
    session_of,
    state_of,
)
from fak_gateway.mcp_gateway import Caller, McpGateway
from fak_gateway.openapi import openapi_json
from fak_gateway.pipeline import Pipeline
from fak_gateway.responses_store import ResponseStore
from fak_gateway.routes_gemini import ROUTE_NAMES as GEMINI_ROUTES
from fak_gateway.routes_gemini import gemini_get_model, gemini_list_models, gemini_models_action
from fak_gateway.routes_models import (
    chat_completions,
    completions,
    count_tokens,
    get_model,
    list_models,
    messages,
)
from fak_gateway.routes_operator import audit_log, healthz, metrics_endpoint, request_context
from fak_gateway.routes_responses import delete_response, get_response, response_input_tokens, responses
from fak_gateway.upstream import Upstreams
from fakcore import bus
from fakcore.audit import ensure_audit_stream
from fakcore.mcp_config import load as load_mcp
from fakcore.metrics import Metrics
from fakcore.protocol import Heartbeat, encode, subjects
from fakcore.routes import RouteTable
from fakcore.service import instance_name
from fakcore.settings import Settings

log = logging.getLogger("fak.gateway")


@asgi("/mcp", copy_scope=True)
async def mcp_endpoint(scope: Any, receive: Any, send: Any) -> None:
    """fak's MCP server (streamable HTTP), with the gateway's API keys like every model route."""
    request: Request = Request(scope, receive)
    authenticate(request)
    state = state_of(request)
    if state.mcp is None:
        raise WireError("not_found", "no MCP servers are configured here (FAK_MCP)")
    await state.mcp.handle(scope, receive, send, Caller(key=key_id_of(request), session=session_of(request)))


# ---------------------------------------------------------------------------------------------------------
# Errors, metrics, the app
# ---------------------------------------------------------------------------------------------------------

ROUTES = {"/v1/chat/completions": "chat", "/v1/completions": "completions", "/v1/messages": "messages",
          "/v1/messages/count_tokens": "count_tokens", "/v1/models": "models", "/healthz": "healthz", "/metrics": "metrics",
          "/v1/fak/audit": "audit", "/v1/responses": "responses", "/v1/responses/input_tokens": "responses_input_tokens",
          "/mcp": "mcp", "/v1beta/models": "gemini_models"}


def route_label(path: str) -> str:
    """The `route` label of a request: its path's name, the method's for Gemini's /models/{m}:{method}."""
    if path in ROUTES:
        return ROUTES[path]
    if path.startswith("/v1beta/models/") or (path.startswith("/v1/models/") and ":" in path):
        return GEMINI_ROUTES.get(path.rpartition(":")[2], "gemini_models")
    if path.startswith("/v1/models/"):
        return "models"
    return "other"


def _error_response(request: Request, err: WireError) -> Response:
    status, body = err.render(wire_of(request.url.path, request.headers, request.query_params))
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
    message = exc.detail if exc.status_code != 413 else f"request body exceeds the limit of {state_of(request).settings.max_body_bytes} bytes"
    if exc.status_code == 404:
        message = f"no route {request.method} {request.url.path}"
    elif exc.status_code == 405:
        message = f"method {request.method} is not allowed on {request.url.path}"
    status, body = WireError(kind, str(message)).render(wire_of(request.url.path, request.headers, request.query_params))
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
        route = route_label(scope.get("path", ""))

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
        route_handlers=[healthz, metrics_endpoint, list_models, get_model, chat_completions, completions, messages,
                        count_tokens, responses, get_response, delete_response, response_input_tokens, gemini_models_action,
                        gemini_list_models, gemini_get_model, audit_log, request_context, openapi_json, mcp_endpoint],
        lifespan=[lifespan],
        before_request=authenticate,
        exception_handlers={WireError: on_wire_error, bus.TooLarge: on_too_large, HTTPException: on_http_error,
                            Exception: on_unexpected},
        request_max_body_size=settings.max_body_bytes,
        middleware=[CountRequests()],
        plugins=[Console()],  # /console and its views (console.py)
        openapi_config=None,  # the published schema is openapi.py's, built from the wires' Structs
        debug=False,
    )
