"""Upstreams: the HTTP APIs fak proxies (a cloud API, vLLM, llama.cpp, Ollama, another fak).

One pooled httpx client per upstream, opened at start-up and closed on shutdown; a slow upstream holds
only its own requests. Paths are appended to the upstream's URL the way each wire's SDKs do it: an
OpenAI-compatible base URL ends in its version (`http://host:8000/v1` + `/chat/completions`), an Anthropic
one does not (`http://host` + `/v1/messages`); a Gemini one does, and the model is in the path
(`https://generativelanguage.googleapis.com/v1beta` + `/models/{model}:streamGenerateContent`).

Auth: `client` forwards the agent's own key (in the header the upstream's wire expects: `x-api-key` for
Anthropic, `x-goog-api-key` for Gemini, `authorization: Bearer` for OpenAI); `key` sends fak's key from the
environment instead.

Failures reach the client in its own wire's shape: the upstream's 4xx/5xx/429 keep their status, message
and `retry-after`; a refused connection is 502, a timeout 504; a stream cut midway becomes the wire's error
event (the caller's stream encoder turns the raised WireError into one).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from typing import Any
from urllib.parse import quote

import httpx

from fak_gateway.errors import WireError
from fakcore.metrics import Metrics
from fakcore.routes import UpstreamSpec

log = logging.getLogger("fak.gateway.upstream")

PATHS = {  # (upstream wire, operation) -> path under the upstream's URL
    ("openai", "chat"): "/chat/completions",
    ("openai", "models"): "/models",
    ("responses", "responses"): "/responses",
    ("responses", "models"): "/models",
    ("anthropic", "messages"): "/v1/messages",
    ("anthropic", "count_tokens"): "/v1/messages/count_tokens",
    ("anthropic", "models"): "/v1/models",
    ("gemini", "generate"): "/models/{model}:generateContent",
    ("gemini", "stream"): "/models/{model}:streamGenerateContent",
    ("gemini", "count_tokens"): "/models/{model}:countTokens",
    ("gemini", "models"): "/models",
}
# the header each wire's API reads its key from (the rest: authorization: Bearer)
KEY_HEADERS = {"anthropic": "x-api-key", "gemini": "x-goog-api-key"}
# headers of the client's request that travel to a same-wire upstream (everything else is fak's business)
FORWARDED = ("anthropic-version", "anthropic-beta", "openai-organization", "openai-project", "user-agent",
             "x-stainless-arch", "x-stainless-lang", "x-stainless-os", "x-stainless-package-version",
             "x-stainless-runtime", "x-stainless-runtime-version", "x-app", "anthropic-dangerous-direct-browser-access",
             "x-goog-api-client")
ERROR_BODY_LIMIT = 64 * 1024


class UpstreamMetrics:
    def __init__(self, m: Metrics):
        self.requests = m.counter("gateway_upstream_requests_total", "Requests to upstreams by upstream and HTTP status",
                                  ("upstream", "status"))
        self.latency = m.histogram("gateway_upstream_seconds", "Upstream time to response headers", ("upstream",))
        self.errors = m.counter("gateway_upstream_errors_total", "Upstream failures by kind (connect, timeout, status, cut)",
                                ("upstream", "kind"))
        self.redacted = m.counter("gateway_upstream_redacted_bytes_total", "Request bytes withheld from upstreams "
                                  "(quarantined tool results replaced by placeholders)", ("upstream",))
        self.redacted_blocks = m.counter("gateway_upstream_redacted_blocks_total", "Quarantined blocks replaced in "
                                         "requests to upstreams", ("upstream",))


def client_key(headers: Mapping[str, str]) -> str:
    auth = headers.get("authorization", "")
    if auth.lower().startswith("bearer "):
        return auth[7:].strip()
    return headers.get("x-api-key") or headers.get("x-goog-api-key") or ""


class Upstream:
    def __init__(self, name: str, spec: UpstreamSpec, metrics: UpstreamMetrics):
        self.name, self.spec, self.m = name, spec, metrics
        self.wire = spec.wire
        self.client = httpx.AsyncClient(
            base_url=spec.url.rstrip("/"),
            timeout=httpx.Timeout(spec.timeout_s, connect=spec.connect_timeout_s),
            limits=httpx.Limits(max_connections=spec.max_connections, max_keepalive_connections=min(64, spec.max_connections)),
        )
        self.last_status = ""  # for /healthz: the last outcome ("200", "connect error", …)
        self.last_seen = 0.0

    async def close(self) -> None:
        await self.client.aclose()

    def headers(self, incoming: Mapping[str, str], *, same_wire: bool) -> dict[str, str]:
        """Headers for the upstream: the forwarded client headers (same wire only) and the auth."""
        out = {"content-type": "application/json"}
        if same_wire:
            out.update({k: v for k in FORWARDED if (v := incoming.get(k)) is not None})
        key = self.spec.api_key if self.spec.auth == "key" else client_key(incoming)
        if self.spec.auth == "client" and same_wire:  # exactly the client's header, whichever it used
            for h in ("x-api-key", "x-goog-api-key", "authorization"):
                if h in incoming:
                    out[h] = incoming[h]
        elif key:
            header = KEY_HEADERS.get(self.wire)
            out.update({header: key} if header else {"authorization": f"Bearer {key}"})
        if self.wire == "anthropic":
            out.setdefault("anthropic-version", "2023-06-01")
        return out

    @asynccontextmanager
    async def open(self, op: str, body: bytes, headers: dict[str, str], query: str = "",
                   model: str = "") -> AsyncIterator[httpx.Response]:
        """POST `body` to the operation's path and yield the response with its body still streaming; `model`
        fills a path that names it (Gemini's). Raises WireError for a refused connection (502), a timeout
        (504) or an error status (the upstream's)."""
        path = PATHS[(self.wire, op)].format(model=quote(model, safe="")) + (f"?{query}" if query else "")
        t0 = time.perf_counter()
        try:
            request = self.client.build_request("POST", path, content=body, headers=headers)
            response = await self.client.send(request, stream=True)
        except httpx.TimeoutException:
            self._outcome("timeout")
            raise WireError("timeout", f"upstream {self.name!r} did not answer within {self.spec.timeout_s:g}s") from None
        except httpx.HTTPError as exc:
            self._outcome("connect")
            raise WireError("bad_gateway", f"upstream {self.name!r} at {self.spec.url} cannot be reached: "
                                           f"{type(exc).__name__}: {exc}") from None
        self.m.latency.labels(self.name).observe(time.perf_counter() - t0)
        self.m.requests.labels(self.name, str(response.status_code)).inc()
        self.last_status, self.last_seen = str(response.status_code), time.time()
        try:
            if response.status_code >= 400:
                self.m.errors.labels(self.name, "status").inc()
                raise await self._status_error(response)
            yield response
        finally:
            await response.aclose()

    async def lines(self, response: httpx.Response) -> AsyncIterator[str]:
        """The response body line by line; a connection cut midway is the wire's error, not a quiet end."""
        with self._mid_response():
            async for line in response.aiter_lines():
                yield line

    async def read(self, response: httpx.Response) -> bytes:
        with self._mid_response():
            return await response.aread()

    @contextmanager
    def _mid_response(self) -> Iterator[None]:
        try:
            yield
        except httpx.TimeoutException:
            self.m.errors.labels(self.name, "timeout").inc()
            raise WireError("timeout", f"upstream {self.name!r} went silent for {self.spec.timeout_s:g}s mid-response") from None
        except httpx.HTTPError as exc:
            self.m.errors.labels(self.name, "cut").inc()
            raise WireError("bad_gateway", f"upstream {self.name!r} cut the response short: {type(exc).__name__}") from None

    def _outcome(self, kind: str) -> None:
        self.m.errors.labels(self.name, kind).inc()
        self.last_status, self.last_seen = f"{kind} error", time.time()

    async def _status_error(self, response: httpx.Response) -> WireError:
        body = b""
        try:
            async for chunk in response.aiter_bytes():
                body += chunk
                if len(body) > ERROR_BODY_LIMIT:
                    break
        except httpx.HTTPError:
            pass
        retry = response.headers.get("retry-after")
        try:
            retry_after = float(retry) if retry is not None else None
        except ValueError:
            retry_after = None
        return WireError(kind_of_status(response.status_code), f"upstream {self.name!r}: {error_message(body, response.status_code)}",
                         retry_after=retry_after, status=response.status_code)


def kind_of_status(status: int) -> str:
    return {400: "invalid_request", 401: "authentication", 403: "permission", 404: "not_found", 413: "too_large",
            429: "rate_limit", 529: "overloaded", 503: "unavailable", 504: "timeout"}.get(status, "internal" if status >= 500
                                                                                          else "invalid_request")


def error_message(body: bytes, status: int) -> str:
    """The message of an OpenAI-, Anthropic- or Google-shaped error body, else its text."""
    try:
        data: Any = json.loads(body)
    except ValueError:
        return body.decode("utf-8", "replace").strip()[:2000] or f"HTTP {status}"
    err = data.get("error") if isinstance(data, dict) else None
    if isinstance(err, dict) and err.get("message"):
        return str(err["message"])
    if isinstance(err, str):
        return err
    return json.dumps(data)[:2000]


class Upstreams:
    """Every configured upstream, by name."""

    def __init__(self, specs: Mapping[str, UpstreamSpec], metrics: Metrics):
        m = UpstreamMetrics(metrics)
        self.metrics = m
        self.by_name = {name: Upstream(name, spec, m) for name, spec in specs.items()}

    def __getitem__(self, name: str) -> Upstream:
        return self.by_name[name]

    async def close(self) -> None:
        for u in self.by_name.values():
            await u.close()
