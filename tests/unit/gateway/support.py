"""The gateway's HTTP app without NATS: litestar's AsyncTestClient over `create_app(connect=False)`, with
fakes where the lifespan would have connected the bus.

    FakeEngines    the real `Engines` (model checks, live workers) whose `generate` replays a script of
                   Accepted, TokenChunk…, GenerateDone instead of asking a worker
    FakeJetStream  the last message per subject, as the response store reads JetStream (get_last_msg)

`gateway(engines)` builds the app, runs its lifespan, then wires what the connected lifespan would: the
engines, the one pipeline (routes from the settings, no upstreams, no guard: adjudication is the guard's
own tests', tests/unit/screening) and the response store.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from types import SimpleNamespace
from typing import Any

import nats.js.errors
from litestar.testing import AsyncTestClient

from fak_gateway.app import create_app
from fak_gateway.engines import Engines
from fak_gateway.errors import WireError
from fak_gateway.pipeline import Pipeline
from fak_gateway.responses_store import ResponseStore
from fak_gateway.upstream import Upstreams
from fakcore.protocol import (
    Accepted,
    CountTokensRequest,
    GenerateDone,
    GenerateRequest,
    Receipt,
    TokenChunk,
    ToolCall,
    Usage,
)
from fakcore.routes import RouteTable
from fakcore.settings import Settings

MODEL = "synthetic"
RECEIPT = Receipt(engine="fak-cpu", worker="w1", backend="reference", device="cpu", model=MODEL,
                  weights_digest="0123456789abcdef")
TOKENS = ("Hel", "lo", " there")  # what the fake worker says, one chunk each
PROMPT_TOKENS = 11


class FakeJetStream:
    def __init__(self) -> None:
        self.last: dict[str, bytes] = {}

    async def publish(self, subject: str, payload: bytes = b"", **kw: Any) -> None:
        self.last[subject] = payload

    async def get_last_msg(self, stream: str, subject: str) -> Any:
        if subject not in self.last:
            raise nats.js.errors.NotFoundError
        return SimpleNamespace(data=self.last[subject])


class FakeBus:
    """The little of a NATS connection the app touches without a worker behind it."""

    is_connected = True
    max_payload = 1 << 20

    def __init__(self) -> None:
        self.js = FakeJetStream()

    def jetstream(self) -> FakeJetStream:
        return self.js


class FakeEngines(Engines):
    """Serves MODEL (settings.models) with a scripted reply: TOKENS, then `finish` with `calls`; or, given
    `error`, TOKENS and then that error (an engine failing mid-way, as Engines.generate raises it)."""

    def __init__(self, settings: Settings, tokens: tuple[str, ...] = TOKENS, calls: list[ToolCall] | None = None,
                 finish: str = "", error: WireError | None = None):
        super().__init__(FakeBus(), settings)
        self.tokens, self.calls, self.error = tokens, list(calls or []), error
        self.finish = finish or ("tool_calls" if self.calls else "stop")
        self.sent: list[GenerateRequest] = []

    async def generate(self, req: GenerateRequest) -> AsyncIterator[Any]:
        self.sent.append(req)
        yield Accepted(request_id=req.request_id, receipt=RECEIPT, prompt_tokens=PROMPT_TOKENS)
        for i, text in enumerate(self.tokens):
            yield TokenChunk(request_id=req.request_id, seq=i, text=text)
        if self.error is not None:
            raise self.error
        yield GenerateDone(request_id=req.request_id, seq=len(self.tokens), finish_reason=self.finish,
                           usage=Usage(prompt_tokens=PROMPT_TOKENS, completion_tokens=len(self.tokens), cached_tokens=4),
                           receipt=RECEIPT, tool_calls=self.calls)

    async def count_tokens(self, req: CountTokensRequest) -> int:
        return PROMPT_TOKENS


def settings(**overrides: Any) -> Settings:
    return Settings.load(env={}, models=(MODEL,), **overrides)


@asynccontextmanager
async def gateway(engines: FakeEngines) -> AsyncIterator[AsyncTestClient]:
    s = engines.settings
    app = create_app(s, connect=False)
    async with AsyncTestClient(app) as client:
        state = app.state.fak
        state.engines = engines
        state.pipeline = Pipeline(RouteTable.from_settings(s), Upstreams({}, state.metrics), engines, guard=None)
        state.responses = ResponseStore(engines.nc, s)
        yield client


def sse_data(body: str) -> list[Any]:
    """The JSON of every `data:` line of an SSE body ("[DONE]" as it is)."""
    out = []
    for line in body.splitlines():
        if line.startswith("data: "):
            data = line[len("data: "):]
            out.append(data if data == "[DONE]" else json.loads(data))
    return out


def sse_events(body: str) -> list[str]:
    """The `event:` names of an SSE body, in order."""
    return [line[len("event: "):] for line in body.splitlines() if line.startswith("event: ")]
