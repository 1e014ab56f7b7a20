"""Prometheus helpers: one registry per service, `fak_` names, and a tiny /metrics + /healthz server.

The gateway serves /metrics on its own HTTP port; the other services (no HTTP of their own) serve both
endpoints from `MetricsServer`, an ASGI app run by uvicorn inside the service's event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from collections.abc import Callable
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

# Latency buckets from 1 ms to 2 min: screening is milliseconds, a long generation is a minute.
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)


class Metrics:
    """A service's registry with `fak_`-prefixed constructors."""

    def __init__(self, service: str):
        self.service = service
        self.registry = CollectorRegistry(auto_describe=True)

    def counter(self, name: str, doc: str, labels: tuple[str, ...] = ()) -> Counter:
        return Counter(f"fak_{name}", doc, labels, registry=self.registry)

    def gauge(self, name: str, doc: str, labels: tuple[str, ...] = ()) -> Gauge:
        return Gauge(f"fak_{name}", doc, labels, registry=self.registry)

    def histogram(self, name: str, doc: str, labels: tuple[str, ...] = (), buckets: tuple[float, ...] = LATENCY_BUCKETS) -> Histogram:
        return Histogram(f"fak_{name}", doc, labels, buckets=buckets, registry=self.registry)

    def render(self) -> bytes:
        return generate_latest(self.registry)


class MetricsServer:
    """ASGI app: GET /metrics (Prometheus text) and GET /healthz (JSON from `health()`)."""

    def __init__(self, metrics: Metrics, health: Callable[[], dict[str, Any]]):
        self.metrics = metrics
        self.health = health
        self.url = ""
        self._server: Any = None
        self._task: asyncio.Task | None = None

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        path = scope["path"]
        if path == "/metrics":
            status, ctype, body = 200, CONTENT_TYPE_LATEST, self.metrics.render()
        elif path == "/healthz":
            state = self.health()
            status, ctype, body = (200 if state.get("ok") else 503), "application/json", json.dumps(state).encode()
        else:
            status, ctype, body = 404, "application/json", b'{"error":"not found"}'
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", ctype.encode()), (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})

    async def start(self, host: str, port: int) -> str:
        self._server = await AsgiServer.start(self, host, port, lifespan="off")
        self.url = self._server.url
        return self.url

    async def stop(self) -> None:
        if self._server is not None:
            await self._server.stop()


class AsgiServer:
    """uvicorn serving an ASGI app inside the caller's event loop; the caller owns the signals."""

    def __init__(self, server: Any, task: asyncio.Task, url: str, port: int):
        self._server, self._task, self.url, self.port = server, task, url, port

    @classmethod
    async def start(cls, app: Any, host: str, port: int, **config: Any) -> AsgiServer:
        import uvicorn

        class _Server(uvicorn.Server):
            @contextlib.contextmanager
            def capture_signals(self):  # type: ignore[override]
                yield

        sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        bound = sock.getsockname()[1]
        server = _Server(uvicorn.Config(app, log_level="warning", access_log=False, **config))
        task = asyncio.create_task(server.serve(sockets=[sock]))
        while not server.started:
            if task.done():
                task.result()
                raise RuntimeError(f"HTTP server on {host}:{port} did not start")
            await asyncio.sleep(0.01)
        return cls(server, task, f"http://{host}:{bound}", bound)

    async def stop(self) -> None:
        self._server.should_exit = True
        await self._task
