"""The operator's routes: /healthz (ready only when every in-kernel model has a worker and every service
the boundary needs reported), /metrics, and the audit views /v1/fak/audit and /v1/fak/requests/{id}
(an admin key sees everything, a tenant's API key its own records)."""

from __future__ import annotations

import time
from typing import Any

from litestar import Request, Response, get

from fak_gateway.errors import WireError
from fak_gateway.handling import (
    sees,
    served_models,
    state_of,
    viewer,
)


@get("/healthz", sync_to_thread=False)
def healthz(request: Request) -> Response:
    """Ready (200, ok) only when every in-kernel model routed here has a live worker and every service the
    boundary needs has reported: the adjudicator when screening is on, and the kvmmu too when an engine may
    hold a quarantined span. Otherwise 503, naming what is missing."""
    state = state_of(request)
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
        "models": served_models(state),
        "engine": "inkernel" if wanted else "upstream",
        "routes": pipeline.health() if pipeline else [],
        "nats": nats_ok,
        "uptime_s": round(time.time() - state.started, 1),
        "unserved": unserved,
        "missing_services": missing,
        "failing_services": failing,
        "workers": [{"worker": w.worker, "model": w.model, "engine": w.engine, "backend": w.backend, "device": w.device,
                     "active": w.active, "queued": w.queued, "capacity": w.capacity, "sampling": w.sampling} for w in workers],
        "services": sorted({h.service for h in services} | ({"engine"} if workers else set())),
        "adjudication": s.adjudicate,
        "quarantined_blocks": len(state.filter.quarantined),
        "mcp": state.mcp.health() if state.mcp else [],
    }
    return Response(body, status_code=200 if ok else 503)


@get("/metrics", sync_to_thread=False)
def metrics_endpoint(request: Request) -> Response:
    from prometheus_client import CONTENT_TYPE_LATEST

    return Response(state_of(request).metrics.render(), media_type=CONTENT_TYPE_LATEST)


@get("/v1/fak/audit", sync_to_thread=False)
def audit_log(request: Request, request_id: str = "", session: str = "", kind: str = "", block: str = "",
              limit: int = 100) -> Response:
    state = state_of(request)
    tenant = viewer(request, state.settings)
    records = state.audit.query(request_id=request_id, session=session, kind=kind, block=block, limit=max(1, min(limit, 5000)),
                                tenant=tenant)
    body: dict[str, Any] = {"records": records}
    if tenant is None:  # how much is quarantined overall is the operator's to know
        body["quarantined_blocks"] = len(state.filter.quarantined)
    return Response(body)


@get("/v1/fak/requests/{request_id:str}", sync_to_thread=False)
def request_context(request: Request, request_id: str) -> Response:
    state = state_of(request)
    tenant = viewer(request, state.settings)
    found = state.audit.requests.get(request_id)
    if found is None or not sees(tenant, found):  # another tenant's: not there
        raise WireError("not_found", f"request {request_id!r} is not among this gateway's recent requests")
    return Response(found)
