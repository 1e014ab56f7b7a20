"""The gateway's view of the engines: who serves what (from heartbeats), and a streamed generate call.

Routing is NATS's: a request goes to the model's queue group and one live worker takes it. What the gateway
adds is bounded waiting: NATS answers "no responders" at once when no worker subscribes, a worker must
accept (Accepted) within `ack_timeout_s`, and the stream may not fall silent for `idle_timeout_s`.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import AsyncIterator
from typing import Any

from nats.aio.client import Client as NATS

from fak_gateway.errors import WireError
from fakcore import bus
from fakcore.protocol import (
    Accepted,
    Announce,
    CancelRequest,
    CountTokensReply,
    CountTokensRequest,
    Decoders,
    GenerateDone,
    GenerateError,
    GenerateRequest,
    Heartbeat,
    encode,
    subjects,
)
from fakcore.settings import Settings

log = logging.getLogger("fak.gateway.engines")


AFFINITY_SESSIONS = 100_000  # sessions whose worker the gateway remembers (least recently used dropped first)


async def _chain(first: Any, rest: AsyncIterator[Any]) -> AsyncIterator[Any]:
    yield first
    if not isinstance(first, GenerateDone | GenerateError):
        async for reply in rest:
            yield reply


class Engines:
    def __init__(self, nc: NATS, settings: Settings, on_done: Any = None):
        self.nc, self.settings = nc, settings
        self.affinity: OrderedDict[str, str] = OrderedDict()  # x-fak-session -> the worker holding its cache
        self.on_done = on_done or (lambda model, done: None)
        self.workers: dict[str, Announce] = {}
        self.services: dict[str, Heartbeat] = {}
        self._seen: dict[str, float] = {}

    async def start(self) -> None:
        await self.nc.subscribe(subjects.ANNOUNCE, cb=self._on_announce)
        await self.nc.subscribe(subjects.HEALTH, cb=self._on_heartbeat)

    async def _on_announce(self, msg: Any) -> None:
        try:
            a = Decoders.announce.decode(msg.data)
        except Exception:
            return
        self.workers[a.worker] = a
        self._seen["w:" + a.worker] = time.monotonic()

    async def _on_heartbeat(self, msg: Any) -> None:
        try:
            h = Decoders.heartbeat.decode(msg.data)
        except Exception:
            return
        self.services[h.instance] = h
        self._seen["s:" + h.instance] = time.monotonic()

    def _fresh(self, key: str) -> bool:
        return time.monotonic() - self._seen.get(key, 0.0) < self.settings.worker_stale_s

    def live_workers(self, model: str | None = None) -> list[Announce]:
        return [a for w, a in self.workers.items() if self._fresh("w:" + w) and (model is None or a.model == model)]

    def live_services(self) -> list[Heartbeat]:
        return [h for i, h in self.services.items() if self._fresh("s:" + i)]

    def known_models(self) -> list[str]:
        names = list(self.settings.routed_models)
        names += [a.model for a in self.live_workers() if a.model not in names]
        return names

    def check_model(self, model: str) -> None:
        if not model:
            raise WireError("invalid_request", "`model` is required", param="model")
        if model not in self.known_models():
            raise WireError("not_found", f"model {model!r} does not exist; this gateway serves: {', '.join(self.known_models())}",
                            param="model")

    def _route(self, req: GenerateRequest) -> tuple[str, str]:
        """(subject, pinned worker): a session's requests go to the worker that holds its cache while it is
        alive (x-fak-session); anything else to the model's queue group, where any worker may take it."""
        worker = self.affinity.get(req.session, "") if req.session else ""
        if worker and any(a.worker == worker for a in self.live_workers(req.model)):
            self.affinity.move_to_end(req.session)
            return subjects.worker(worker, "generate"), worker
        return subjects.generate(req.model), ""

    def _pin(self, session: str, worker: str) -> None:
        if session:
            self.affinity[session] = worker
            self.affinity.move_to_end(session)
            while len(self.affinity) > AFFINITY_SESSIONS:
                self.affinity.popitem(last=False)

    async def generate(self, req: GenerateRequest) -> AsyncIterator[Any]:
        """Yield Accepted, TokenChunk…, then GenerateDone; engine errors become WireError."""
        self.check_model(req.model)
        s = self.settings
        finished = False
        subject, pinned = self._route(req)
        try:
            try:
                first = await self._open(subject, req)
            except bus.NoResponders:
                if not pinned:
                    raise
                log.info("session %s: worker %s is gone; routing by the model's queue group", req.session, pinned)
                self.affinity.pop(req.session, None)
                first = await self._open(subjects.generate(req.model), req)
            stream, head = first
            if isinstance(head, Accepted):
                self._pin(req.session, head.receipt.worker)
            async for reply in _chain(head, stream):
                if isinstance(reply, GenerateError):
                    finished = True
                    raise WireError.from_engine(reply.code, reply.message)
                if isinstance(reply, GenerateDone):
                    finished = True
                    self.on_done(req.model, reply)
                yield reply
        except bus.NoResponders:
            finished = True
            raise WireError("unavailable", f"no engine worker is serving model {req.model!r} right now") from None
        except bus.BusTimeout as exc:
            if exc.first:
                raise WireError("unavailable", f"no engine worker accepted the request for {req.model!r} "
                                               f"within {s.ack_timeout_s:g}s") from None
            raise WireError("timeout", f"engine for {req.model!r} went silent for {s.idle_timeout_s:g}s") from None
        finally:
            if not finished:  # client went away or timed out: free the worker's slot
                try:
                    await self.nc.publish(subjects.CANCEL, encode(CancelRequest(request_id=req.request_id)))
                except Exception:
                    pass

    async def _open(self, subject: str, req: GenerateRequest) -> tuple[AsyncIterator[Any], Any]:
        """Send the request; return the reply stream and its first reply (NoResponders at once if nobody
        subscribes to `subject`)."""
        s = self.settings
        stream = bus.stream_request(self.nc, subject, encode(req), Decoders.engine_reply, first_timeout=s.ack_timeout_s,
                                    idle_timeout=s.idle_timeout_s, is_last=lambda r: isinstance(r, GenerateDone | GenerateError))
        return stream, await stream.__anext__()

    async def count_tokens(self, req: CountTokensRequest) -> int:
        self.check_model(req.model)
        try:
            reply = await bus.request(self.nc, subjects.count_tokens(req.model), encode(req), Decoders.count_reply,
                                      timeout=self.settings.ack_timeout_s)
        except bus.NoResponders:
            raise WireError("unavailable", f"no engine worker is serving model {req.model!r} right now") from None
        except bus.BusTimeout:
            raise WireError("timeout", f"engine for {req.model!r} did not answer in time") from None
        if isinstance(reply, GenerateError):
            raise WireError.from_engine(reply.code, reply.message)
        assert isinstance(reply, CountTokensReply)
        return reply.input_tokens
