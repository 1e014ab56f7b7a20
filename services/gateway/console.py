"""The operator console: a web page at /console over a few JSON views and one server-sent event stream.

    GET /console                  the page (console/index.html, console.js, console.css: no build step);
    GET /console/{file}           public, as they hold nothing: the page asks for a key and sends it as a Bearer
    GET /v1/fak/console/state     recent requests, verdicts, eviction receipts, workers and their load
    GET /v1/fak/console/events    SSE: that snapshot first, then what the audit view gains (polled every POLL_S)
    GET /v1/fak/console/stats     per-model tokens/s and latency, bucketed, for the page's SVG plots
    GET /v1/fak/console/policy    the policy in force (admin key only)

Who reads is `viewer()`'s, as for /v1/fak/audit: an admin key sees every tenant, a tenant's API key its own
records and requests. The stream reads the audit view (audit_view.py) with a cursor per client: the view only
appends, so a client's cursor is the last record (and request) it was sent.

Per-model latency and tokens/s come from the engines' completions (`Engines.on_done`, chained at start-up):
the time from a request leaving the gateway for the engines (the audit view's `ts`) to its GenerateDone.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import AsyncIterator, Iterable
from pathlib import Path
from typing import Any

import msgspec
from litestar import Litestar, Request, Response, get
from litestar.config.app import AppConfig
from litestar.plugins import InitPluginProtocol
from litestar.response import Stream

from fak_gateway.audit_view import AuditView
from fak_gateway.errors import WireError
from fak_gateway.handling import State, Viewer, sees, state_of, viewer
from fakcore.policy.store import load_set
from fakcore.protocol import WINDOW_CHARS, GenerateDone

STATIC = Path(__file__).with_name("console")  # shipped as package data (setup.py)
FILES = {"index.html": "text/html; charset=utf-8", "console.js": "text/javascript; charset=utf-8",
         "console.css": "text/css; charset=utf-8"}
POLL_S = 0.5  # how often a stream looks at the audit view
KEEPALIVE_S = 15.0  # an SSE comment this often, so that proxies keep an idle stream open
SNAPSHOT_RECORDS, SNAPSHOT_REQUESTS = 200, 100  # what a page starts with
BURST = 500  # the most records one poll sends (more came than a client can read: the newest)
BUCKET_S, WINDOW_S = 5, 300  # the plots: one point per BUCKET_S over the last WINDOW_S


# ---------------------------------------------------------------------------------------------------------
# What the page is shown
# ---------------------------------------------------------------------------------------------------------

def excerpt(record: dict[str, Any]) -> list[tuple[str, bool]]:
    """A result record's `window` cut into (text, offending) pieces, by its spans.

    Spans are offsets into the whole tool result (code points); the window is screening.window()'s cut around
    the first span, so its start is recomputed here the same way. Cut server-side because the page's strings
    count UTF-16 units, not code points."""
    text, spans = record.get("window") or "", record.get("spans") or []
    if not text or not spans:
        return [(text, False)] if text else []
    a, b = spans[0]["start"], spans[0]["end"]
    lo = max(0, a - max(0, (WINDOW_CHARS - (b - a)) // 2)) if b - a < WINDOW_CHARS else a
    pieces, at = [], 0
    for sp in sorted(spans, key=lambda sp: sp["start"]):
        s, e = max(sp["start"] - lo, at), min(sp["end"] - lo, len(text))
        if s >= e:
            continue
        if s > at:
            pieces.append((text[at:s], False))
        pieces.append((text[s:e], True))
        at = e
    if at < len(text):
        pieces.append((text[at:], False))
    return pieces


def shown_record(r: dict[str, Any]) -> dict[str, Any]:
    return {**r, "excerpt": excerpt(r)} if r.get("kind") == "result" else r


def shown_request(r: dict[str, Any]) -> dict[str, Any]:
    """A request as the list shows it: what happened to it, not its messages (GET /v1/fak/requests/{id})."""
    out = {k: v for k, v in r.items() if k not in ("messages", "verdicts")}
    out["tool_results"] = sum(1 for m in r.get("messages", []) if m.get("role") == "tool")
    return out


def workers(state: State) -> list[dict[str, Any]]:
    engines = state.engines
    return [{"worker": w.worker, "model": w.model, "backend": w.backend, "device": w.device, "active": w.active,
             "queued": w.queued, "capacity": w.capacity, "queue_limit": w.queue_limit}
            for w in (engines.live_workers() if engines else [])]


def snapshot(state: State, tenant: Viewer | None) -> dict[str, Any]:
    records = state.audit.query(limit=SNAPSHOT_RECORDS, tenant=tenant)
    requests = [r for r in reversed(state.audit.requests.values()) if sees(tenant, r)]
    body = {"records": [shown_record(r) for r in records], "requests": [shown_request(r) for r in requests[:SNAPSHOT_REQUESTS]],
            "done": [d for d in reversed(throughput(state).done) if sees(tenant, d)][:SNAPSHOT_REQUESTS],
            "workers": workers(state), "tenant": None if tenant is None else tenant.tenant}
    if tenant is None:  # how much is quarantined overall is the operator's to know
        body["quarantined_blocks"] = len(state.filter.quarantined)
    return body


# ---------------------------------------------------------------------------------------------------------
# Completions per model, for the plots
# ---------------------------------------------------------------------------------------------------------

class Throughput:
    """The engines' recent completions: when, which model, whose, how many tokens, how long in the engines."""

    def __init__(self, audit: AuditView, keep: int = 20_000):
        self.audit = audit
        self.done: deque[dict[str, Any]] = deque(maxlen=keep)

    def on_done(self, model: str, done: GenerateDone) -> None:
        now = time.time()
        sent = self.audit.requests.get(done.request_id, {})  # a request the guard remembered as it left
        latency = now - sent["ts"] if "ts" in sent else None
        self.done.append({"request_id": done.request_id, "model": model, "key_id": sent.get("key_id", ""), "ts": now,
                          "latency_ms": round(latency * 1000, 1) if latency is not None else None,
                          "prompt_tokens": done.usage.prompt_tokens, "completion_tokens": done.usage.completion_tokens,
                          "finish_reason": done.finish_reason, "worker": done.receipt.worker})

    def summary(self, tenant: Viewer | None, now: float | None = None) -> dict[str, Any]:
        """Per model, one point per bucket of the last WINDOW_S: completion tokens/s and mean latency."""
        now = time.time() if now is None else now
        first = int((now - WINDOW_S) // BUCKET_S)
        n = WINDOW_S // BUCKET_S + 1
        models: dict[str, dict[str, Any]] = {}
        for d in self.done:
            i = int(d["ts"] // BUCKET_S) - first
            if not 0 <= i < n or not sees(tenant, d):
                continue
            m = models.setdefault(d["model"], {"tokens": [0] * n, "latency": [[] for _ in range(n)], "requests": 0})
            m["tokens"][i] += d["completion_tokens"]
            m["requests"] += 1
            if d["latency_ms"] is not None:
                m["latency"][i].append(d["latency_ms"])
        out = []
        for model, m in sorted(models.items()):
            points = [{"t": (first + i) * BUCKET_S, "tokens_per_s": round(m["tokens"][i] / BUCKET_S, 2),
                       "latency_ms": round(sum(m["latency"][i]) / len(m["latency"][i]), 1) if m["latency"][i] else None}
                      for i in range(n)]
            out.append({"model": model, "requests": m["requests"], "completion_tokens": sum(m["tokens"]), "points": points})
        return {"bucket_s": BUCKET_S, "window_s": WINDOW_S, "now": now, "models": out}


def throughput(state: State) -> Throughput:
    t = getattr(state, "console_throughput", None)
    if t is None:  # an app whose engines came after start-up (unit tests) counts from its first look
        t = state.console_throughput = Throughput(state.audit)  # type: ignore[attr-defined]
    return t


def count_completions(app: Litestar) -> None:
    """on_startup (after the lifespan built the state): chain the console's count to the engines' on_done."""
    state: State = app.state.fak
    t = throughput(state)
    if state.engines is not None:
        counted = state.engines.on_done
        state.engines.on_done = lambda model, done: (counted(model, done), t.on_done(model, done))


# ---------------------------------------------------------------------------------------------------------
# The stream
# ---------------------------------------------------------------------------------------------------------

def newer(items: Iterable[Any], last: Any) -> list[Any]:
    """What follows `last` in an append-only sequence, given newest first (at most BURST), oldest first."""
    out = []
    for x in items:
        if x is last or len(out) >= BURST:
            break
        out.append(x)
    return out[::-1]


class Cursor:
    """Where one client's stream is: the last record, request and completion it was sent, and the workers'
    load and quarantine count it last saw."""

    def __init__(self, state: State):
        self.state = state
        self.record = state.audit.records[-1] if state.audit.records else None
        self.request = next(reversed(state.audit.requests), None)
        done = throughput(state).done
        self.done = done[-1] if done else None
        self.workers: list[dict[str, Any]] = workers(state)
        self.quarantined = len(state.filter.quarantined)

    def poll(self, tenant: Viewer | None) -> list[tuple[str, Any]]:
        audit, events = self.state.audit, []
        records = newer(reversed(audit.records), self.record)
        if records:
            self.record = records[-1]
        events += [("record", shown_record(r)) for r in records if sees(tenant, r)]
        ids = newer(reversed(audit.requests), self.request)
        if ids:
            self.request = ids[-1]
        found = (audit.requests.get(i) for i in ids)
        events += [("request", shown_request(r)) for r in found if r and sees(tenant, r)]
        done = newer(reversed(throughput(self.state).done), self.done)
        if done:
            self.done = done[-1]
        events += [("done", d) for d in done if sees(tenant, d)]
        now = workers(self.state)
        if now != self.workers:
            self.workers = now
            events.append(("workers", now))
        quarantined = len(self.state.filter.quarantined)
        if tenant is None and quarantined != self.quarantined:  # the operator's to know, as in the snapshot
            self.quarantined = quarantined
            events.append(("quarantined", quarantined))
        return events


def sse(event: str, data: Any) -> bytes:
    return b"event: " + event.encode() + b"\ndata: " + msgspec.json.encode(data) + b"\n\n"


async def stream_events(state: State, tenant: Viewer | None) -> AsyncIterator[bytes]:
    cursor = Cursor(state)  # before the snapshot: nothing falls between the two
    yield sse("snapshot", snapshot(state, tenant))
    quiet = time.monotonic()
    while True:
        await asyncio.sleep(POLL_S)
        events = cursor.poll(tenant)
        for event, data in events:
            yield sse(event, data)
        if events:
            quiet = time.monotonic()
        elif time.monotonic() - quiet >= KEEPALIVE_S:
            quiet = time.monotonic()
            yield b": keepalive\n\n"


# ---------------------------------------------------------------------------------------------------------
# Routes
# ---------------------------------------------------------------------------------------------------------

def no_key(request: Request) -> None:
    """The page's files are public (they hold no data); the app's `authenticate` would ask for an API key."""


@get(["/console", "/console/"], before_request=no_key, sync_to_thread=False, include_in_schema=False)
def console_page() -> Response:
    return static("index.html")


@get("/console/{name:str}", before_request=no_key, sync_to_thread=False, include_in_schema=False)
def console_file(name: str) -> Response:
    return static(name)


def static(name: str) -> Response:
    if name not in FILES:
        raise WireError("not_found", f"no console file {name!r}")
    return Response((STATIC / name).read_bytes(), media_type=FILES[name], headers={"cache-control": "no-cache"})


@get("/v1/fak/console/state", sync_to_thread=False)
def console_state(request: Request) -> Response:
    state = state_of(request)
    return Response(snapshot(state, viewer(request, state.settings)))


@get("/v1/fak/console/events", sync_to_thread=False)
def console_events(request: Request) -> Stream:
    state = state_of(request)
    tenant = viewer(request, state.settings)  # refused here, before the stream starts: a plain 401/403
    return Stream(stream_events(state, tenant), media_type="text/event-stream",
                  headers={"cache-control": "no-cache", "x-accel-buffering": "no"})


@get("/v1/fak/console/stats", sync_to_thread=False)
def console_stats(request: Request) -> Response:
    state = state_of(request)
    return Response(throughput(state).summary(viewer(request, state.settings)))


@get("/v1/fak/console/policy", sync_to_thread=False)
def console_policy(request: Request) -> Response:
    state = state_of(request)
    if viewer(request, state.settings) is not None:
        raise WireError("permission", "the policy in force is the operator's to read: use an admin key")
    store = state.guard.policies if state.guard is not None else None
    current = store.current if store is not None else load_set(state.settings.policy)
    return Response({"path": state.settings.policy, "source": current.source, "reloads": store.reloads if store else 0,
                     "error": store.error if store else "",
                     "default": msgspec.to_builtins(current.default, enc_hook=repr),
                     "keys": {k: msgspec.to_builtins(p, enc_hook=repr) for k, p in current.keys.items()}})


ROUTES = [console_page, console_file, console_state, console_events, console_stats, console_policy]


class Console(InitPluginProtocol):
    """The console's routes and its completion count, added to the app by one line in app.py."""

    def on_app_init(self, app_config: AppConfig) -> AppConfig:
        app_config.route_handlers.extend(ROUTES)
        app_config.on_startup.append(count_completions)
        return app_config
