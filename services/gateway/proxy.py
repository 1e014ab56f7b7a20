"""The upstream backends of the request pipeline: same-wire passthrough and cross-wire translation.

    same wire   the guard screens the request's tool results (nothing leaves before every verdict is in),
                passthrough.py redacts the quarantined ones in the client's own bytes / JSON, the upstream's
                answer streams back with its tool calls held for their verdicts
    cross wire  translate.Translated: the upstream behind the engine's reply protocol, so the guard and the
                client's wire encoder run exactly as for the in-kernel engine

Nothing here knows litestar: a same-wire call returns a `Proxied` (status, headers, and either the body or
a stream of bytes) that the app turns into its response.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any

from fak_gateway import gemini_passthrough, passthrough, responses_passthrough
from fak_gateway.guard import Guard, report_headers
from fak_gateway.upstream import Upstream
from fakcore.protocol import GenerateRequest, ToolCall
from fakcore.routes import Route

# upstream response headers the client gets back (request ids and rate-limit state are the client's business)
RETURNED = ("request-id", "x-request-id", "retry-after")
RETURNED_PREFIXES = ("anthropic-ratelimit-", "x-ratelimit-")


@dataclass
class Proxied:
    status: int
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes | None = None
    stream: AsyncIterator[bytes] | None = None
    media_type: str = "application/json"


def returned_headers(upstream_headers: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in upstream_headers.items() if k in RETURNED or k.startswith(RETURNED_PREFIXES)}


class SameWire:
    """One request to a same-wire upstream, through the guard."""

    def __init__(self, guard: Guard | None, upstream: Upstream, route: Route, req: GenerateRequest, key: str):
        self.guard, self.upstream, self.route, self.req, self.key = guard, upstream, route, req, key
        self.ctx: Any = None

    async def screen(self) -> None:
        """Every tool result of the request screened before a byte goes upstream (the gateway barrier)."""
        if self.guard is not None and self.guard.settings.adjudicate:
            self.ctx = await self.guard.prepare(self.req, self.key)
            await self.guard.screen(self.req, self.ctx)
            self.guard.audit.remember(self.req, upstream=self.upstream.name, **self.ctx.record)

    def lookup(self, block: str) -> str | None:
        """What a tool result's block became in this request (placeholder, redacted spans), the key's policy
        applied; None: it passes as it is."""
        return self.guard.replacement(self.ctx, block) if self.ctx is not None and self.guard is not None else None

    async def judge(self, calls: list[ToolCall]) -> list[str | None]:
        if self.ctx is None or self.guard is None:
            return [None] * len(calls)
        return await self.guard.refusals(self.req, self.ctx, calls)

    def _redacted(self, replaced: list[str], withheld: int) -> dict[str, str]:
        if replaced:
            self.upstream.m.redacted.labels(self.upstream.name).inc(withheld)
            self.upstream.m.redacted_blocks.labels(self.upstream.name).inc(len(replaced))
        notes = report_headers(self.guard.report(self.ctx.quarantined)) if self.ctx is not None and self.guard is not None else {}
        return {"x-fak-redacted-blocks": str(len(replaced)), "x-fak-upstream": self.upstream.name, **notes}

    async def anthropic(self, body: bytes, headers: Mapping[str, str], query: str, stream: bool, op: str = "messages") -> Proxied:
        """Anthropic → Anthropic: the client's bytes, the quarantined blocks' content alone replaced."""
        await self.screen()
        out, replaced, withheld = passthrough.redact_anthropic(body, self.lookup, self.route.target
                                                               if self.route.target != self.route.model else None)
        fak_headers = self._redacted(replaced, withheld)
        return await self._send(op, out, self.upstream.headers(headers, same_wire=True), query, stream, fak_headers,
                                passthrough.anthropic_stream, passthrough.anthropic_json)

    async def openai(self, body: bytes, headers: Mapping[str, str], stream: bool) -> Proxied:
        """OpenAI → OpenAI: the client's JSON, model rewritten and quarantined tool messages replaced."""
        return await self._json("chat", body, headers, stream, passthrough.redact_openai, passthrough.openai_stream,
                                passthrough.openai_json)

    async def responses(self, body: bytes, headers: Mapping[str, str], stream: bool) -> Proxied:
        """Responses → Responses: the client's JSON (reasoning items, previous_response_id and all), model
        rewritten and quarantined tool outputs replaced."""
        return await self._json("responses", body, headers, stream, responses_passthrough.redact, responses_passthrough.relay,
                                responses_passthrough.judge_json)

    async def gemini(self, body: bytes, headers: Mapping[str, str], action: str, sse: bool) -> Proxied:
        """Gemini → Gemini: the client's JSON, quarantined function responses replaced; the model is the
        route's, in the path. A stream is asked for as SSE and given back in the client's framing."""
        await self.screen()
        data = json.loads(body)
        replaced, withheld = gemini_passthrough.redact(data, self.lookup)
        out = body if not replaced else json.dumps(data, ensure_ascii=False).encode()
        op = {"generateContent": "generate", "streamGenerateContent": "stream", "countTokens": "count_tokens"}[action]

        async def relay(lines: AsyncIterator[str], judge: Any) -> AsyncIterator[bytes]:
            async for chunk in gemini_passthrough.relay(lines, judge, sse):
                yield chunk

        p = await self._send(op, out, self.upstream.headers(headers, same_wire=True), "alt=sse" if op == "stream" else "",
                             op == "stream", self._redacted(replaced, withheld), relay,
                             gemini_passthrough.judge_json if op == "generate" else _unchanged)
        if p.stream is not None and not sse:
            p.media_type = "application/json"
        return p

    async def _json(self, op: str, body: bytes, headers: Mapping[str, str], stream: bool, redact: Any, relay: Any,
                    rewrite: Any) -> Proxied:
        """A JSON wire's passthrough: screened first, the client's bytes unless something had to change."""
        await self.screen()
        data = json.loads(body)
        replaced, withheld = redact(data, self.lookup, self.route.target)
        out = body if not replaced and self.route.target == self.route.model else json.dumps(data, ensure_ascii=False).encode()
        return await self._send(op, out, self.upstream.headers(headers, same_wire=True), "", stream,
                                self._redacted(replaced, withheld), relay, rewrite)

    async def _send(self, op: str, body: bytes, headers: dict[str, str], query: str, stream: bool,
                    fak_headers: dict[str, str], relay: Any, rewrite: Any) -> Proxied:
        stack = AsyncExitStack()
        response = await stack.enter_async_context(self.upstream.open(op, body, headers, query, model=self.route.target))
        back = {**returned_headers(response.headers), **fak_headers}
        if not stream or "text/event-stream" not in response.headers.get("content-type", ""):
            try:
                raw = await self.upstream.read(response)
            finally:
                await stack.aclose()
            return Proxied(response.status_code, back, body=await rewrite(raw, self.judge) if raw else raw)

        async def relayed() -> AsyncIterator[bytes]:
            try:
                async for chunk in relay(self.upstream.lines(response), self.judge):
                    yield chunk
            finally:
                await stack.aclose()  # the client went away or the stream ended: let the upstream go

        return Proxied(response.status_code, back, stream=relayed(), media_type="text/event-stream")


async def _unchanged(body: bytes, judge: Any) -> bytes:
    return body


async def count_tokens(upstream: Upstream, route: Route, body: bytes, headers: Mapping[str, str], query: str,
                       lookup: passthrough.Lookup) -> Proxied:
    """Token counting is the upstream's (Anthropic upstreams only: OpenAI's wire has no such endpoint);
    known-quarantined results are counted as their placeholders, as they would be sent."""
    out, _, _ = passthrough.redact_anthropic(body, lookup, route.target if route.target != route.model else None)
    async with upstream.open("count_tokens", out, upstream.headers(headers, same_wire=True), query) as response:
        return Proxied(response.status_code, returned_headers(response.headers), body=await upstream.read(response))
