"""The one request pipeline, whatever the wire and the backend:

    wire decode ─▶ route (model id -> in-kernel engine | upstream) ─▶ guard ─▶ backend ─▶ wire encode

Backends speak the engine's reply protocol (`generate(req)` yields Accepted, TokenChunk…, GenerateDone):
the in-kernel engines over NATS (engines.Engines, which can hold a request at the verdict barrier) and
cross-wire upstreams (translate.Translated, which cannot: the guard screens before sending). The guard
does not know which one serves. A same-wire upstream is the one exception to the event protocol: the
client's own bytes go through (proxy.SameWire), with the same guard deciding what is redacted and which
tool calls come back.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Mapping
from typing import Any

from fak_gateway import proxy
from fak_gateway.engines import Engines
from fak_gateway.errors import WireError
from fak_gateway.guard import Guard, start_backend
from fak_gateway.translate import Translated
from fak_gateway.upstream import Upstream, Upstreams
from fakcore.protocol import Accepted, GenerateRequest
from fakcore.routes import Route, RouteTable

CACHE_SALT_HEADER = "x-fak-cache-salt"


def tenant(key: str, salt: str = "", tenants: Mapping[str, str] | None = None) -> str:
    """The KV-cache partition of a request: its API key's configured tenant (`tenants`: key id -> tenant,
    from the `tenants` setting) or else the key's id, narrowed by a client's salt. The engine reuses cached
    prefixes only within one partition, so `cached_tokens` never tells one tenant what another sent."""
    base = f"tenant:{tenants[key]}" if tenants and key in tenants else key  # key ids are k<hex>: never "tenant:…"
    return f"{base}:{hashlib.sha256(salt.encode()).hexdigest()[:16]}" if salt else base


class Pipeline:
    def __init__(self, routes: RouteTable, upstreams: Upstreams, engines: Engines | None, guard: Guard | None):
        self.routes, self.upstreams, self.engines, self.guard = routes, upstreams, engines, guard
        self.tenants = engines.settings.tenant_of() if engines is not None else {}  # key id -> configured tenant

    def route(self, model: str) -> Route:
        """Where `model` goes; an in-kernel model nobody serves or routes is a 404 in the wire's shape."""
        if not model:
            raise WireError("invalid_request", "`model` is required", param="model")
        route = self.routes.resolve(model)
        if route.inkernel and self.engines is not None:
            self.engines.check_model(route.target)
        return route

    def same_wire(self, route: Route, wire: str) -> Upstream | None:
        """The upstream when it speaks the client's wire (passthrough), else None."""
        if route.inkernel:
            return None
        upstream = self.upstreams[route.upstream]
        return upstream if upstream.wire == wire else None

    def backend(self, route: Route, headers: Mapping[str, str]) -> Any:
        if route.inkernel:
            if self.engines is None:
                raise WireError("unavailable", "the gateway has no bus connection to the engines")
            return self.engines
        return Translated(self.upstreams[route.upstream], route.target, headers)

    async def start(self, req: GenerateRequest, route: Route, headers: Mapping[str, str], key: str,
                    salt: str = "") -> tuple[Accepted, AsyncIterator[Any]]:
        """Through the guard (context filter, verdict barrier, call adjudication) to the route's backend.
        `salt`: a client's cache scope (OpenAI-compatible `cache_salt`; the x-fak-cache-salt header wins)."""
        backend = self.backend(route, headers)
        if route.inkernel:
            req.model = route.target  # an alias names the served model
            req.tenant = tenant(key, headers.get(CACHE_SALT_HEADER, "") or salt, self.tenants)
        if self.guard is None:
            return await start_backend(backend, req)
        return await self.guard.start(backend, req, key)

    def proxied(self, route: Route, upstream: Upstream, req: GenerateRequest, key: str) -> proxy.SameWire:
        return proxy.SameWire(self.guard, upstream, route, req, key)

    def engine_models(self, routed: tuple[str, ...]) -> list[str]:
        """The in-kernel models this gateway promises (the routed ids that resolve in-kernel, and every
        route's `engine`): each needs a live worker before the gateway is ready."""
        names = [r.engine for r in self.routes.spec.routes if r.engine]
        for m in routed:
            route = self.routes.resolve(m)
            if route.inkernel and route.target not in names:
                names.append(route.target)
        return names

    def models(self) -> list[str]:
        names = self.routes.listed()
        names += [m for m in (self.engines.known_models() if self.engines else []) if m not in names]
        return names

    def health(self) -> list[dict[str, Any]]:
        """One entry per route: which engine serves it and, for upstreams, the last status seen."""
        out = []
        for r in self.routes.spec.routes:
            entry: dict[str, Any] = {"model": r.model, "engine": f"upstream:{r.upstream}" if r.upstream else "inkernel"}
            if r.upstream:
                u = self.upstreams[r.upstream]
                entry.update(url=u.spec.url, wire=u.wire, last_status=u.last_status or "not contacted yet")
            out.append(entry)
        return out
