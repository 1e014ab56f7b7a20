"""The gateway's view of the engines: who serves what and how loaded (from heartbeats), and a streamed
generate call that routes, retries and notices a dead worker.

Routing: a session's requests go to the worker holding its cache (x-fak-session) while it is alive and has
room; any other request to the live worker with the most free room (`capacity + queue_limit - active -
queued` from its last announce, less what this gateway has sent it since and is still running there), on
that worker's own subject. Before any worker has announced itself, to the model's queue group, where NATS
gives it to one of them.

Bounded waiting: NATS answers "no responders" at once when nobody subscribes, a worker must accept
(Accepted) within `ack_timeout_s`, and the stream may not fall silent for `idle_timeout_s`. A silent stream
also looks every `CHECK_EVERY_S` whether its worker still announces itself: after `worker_stale_s` without
a heartbeat, or once it announces a new incarnation (restarted), the stream fails with a clear error.

Retries: a worker that refuses for load makes way for the next one (none that refused since its last
announce); a request whose worker dies before its first token is sent once more (its second Accepted is not
passed on). A refusal by all carries `retry_after`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
import time
from collections import OrderedDict
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from nats.aio.client import Client as NATS

from fak_gateway.errors import RETRY_AFTER_S, WireError
from fakcore import bus
from fakcore.protocol import (
    Accepted,
    Announce,
    CancelRequest,
    ChatMessage,
    CountTokensReply,
    CountTokensRequest,
    Decoders,
    ErrorCode,
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
CHECK_EVERY_S = 0.5  # a silent stream looks this often whether its worker is still alive


def derive_session(messages: list[ChatMessage]) -> str:
    """A conversation's session when the client names none (x-fak-session): its opening (the first system
    and the first user message), which every later turn of it repeats. Requests of one session go to one worker, whose
    cache holds its prefix."""
    opening = [next(((m.role, m.content) for m in messages if m.role == role), None) for role in ("system", "user")]
    return "d-" + hashlib.sha256(json.dumps(opening).encode()).hexdigest()[:16]


def affinity_key(req: GenerateRequest) -> str:
    """Which requests should share a worker: the client's session, else the conversation's (raw prompts
    have none)."""
    return req.session or (derive_session(req.messages) if req.messages else "")


@dataclass
class _Watch:
    """The worker a request is waiting on, and when it last showed signs of life to this request."""

    worker: str  # "" while the model's queue group has not answered yet
    incarnation: str
    since: float  # monotonic: when the request was sent, or its latest reply came


class Engines:
    can_hold = True  # workers prefill a held request and decode nothing before its Release (the verdict barrier)
    def __init__(self, nc: NATS, settings: Settings, on_done: Any = None):
        self.nc, self.settings = nc, settings
        self.affinity: OrderedDict[str, str] = OrderedDict()  # x-fak-session -> the worker holding its cache
        self.on_done = on_done or (lambda model, done: None)
        self.workers: dict[str, Announce] = {}
        self.services: dict[str, Heartbeat] = {}
        self._seen: dict[str, float] = {}
        self._sent: dict[str, int] = {}  # requests in flight to a worker, sent since its last announce
        self._announces: dict[str, int] = {}  # announces heard per worker (which one a sent request counts against)
        self._ended: dict[str, int] = {}  # requests ended since the worker's last announce, which that announce counted
        self._full: set[str] = set()  # workers that refused for load since their last announce

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
        self._sent.pop(a.worker, None)  # its own count now includes what we sent
        self._ended.pop(a.worker, None)
        self._announces[a.worker] = self._announces.get(a.worker, 0) + 1
        self._full.discard(a.worker)

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

    # -- routing ----------------------------------------------------------------------------------------
    def free(self, a: Announce) -> int:
        """Requests `a` could still take by its last announce, less what ended since (none once it refused one
        for load since). Without the ended ones, a worker announced mid-request looks busy for a whole
        interval and a burst of short requests all goes to the others."""
        if a.worker in self._full:
            return 0
        return a.capacity + a.queue_limit - a.active - a.queued + min(self._ended.get(a.worker, 0), a.active + a.queued)

    def running(self, a: Announce) -> int:
        """Requests `a` is running by its last announce, less those ended since, plus those sent since."""
        return a.active - min(self._ended.get(a.worker, 0), a.active) + self._sent.get(a.worker, 0)

    def room(self, a: Announce) -> int:
        """`free`, less what this gateway sent it since that announce and is still running: a burst spreads
        before the workers report it."""
        return self.free(a) - self._sent.get(a.worker, 0)

    def _count(self, worker: str) -> tuple[str, int]:
        """Note a request sent to `worker`; returns what `_uncount` needs when it is over."""
        self._sent[worker] = self._sent.get(worker, 0) + 1
        return worker, self._announces.get(worker, 0)

    def _uncount(self, worker: str, announce: int) -> None:
        """A request is over: it takes no room any more. Counted by us until the worker's next announce,
        else by that announce (then it is noted as ended, until the next one)."""
        if self._announces.get(worker, 0) == announce:
            if self._sent.get(worker, 0) > 0:
                self._sent[worker] -= 1
        else:
            self._ended[worker] = self._ended.get(worker, 0) + 1

    def _pick(self, req: GenerateRequest, tried: set[str]) -> str:
        """The worker to send to ("": the model's queue group, when no untried worker has announced itself)."""
        live = [a for a in self.live_workers(req.model) if a.worker not in tried]
        session = affinity_key(req)
        pinned = self.affinity.get(session, "") if session else ""
        for a in live:
            if a.worker == pinned and self.free(a) > 0:
                self.affinity.move_to_end(session)
                return pinned
        if not live:
            return ""
        # most room; then the least busy; then any (so that equal workers share a trickle of requests)
        best = max(live, key=lambda a: (self.room(a), self.free(a), -self.running(a), random.random()))
        return best.worker

    def _pin(self, session: str, worker: str) -> None:
        if session:
            self.affinity[session] = worker
            self.affinity.move_to_end(session)
            while len(self.affinity) > AFFINITY_SESSIONS:
                self.affinity.popitem(last=False)

    def _lost(self, watch: _Watch) -> str:
        """Why the watched worker can no longer answer ("" while it can): no heartbeat (nor reply) for
        `worker_stale_s`, or a heartbeat from a new incarnation of it."""
        if not watch.worker:
            return ""
        seen = self._seen.get("w:" + watch.worker, 0.0)
        a = self.workers.get(watch.worker)
        if a is not None and seen > watch.since and watch.incarnation and a.incarnation not in ("", watch.incarnation):
            return "it was restarted"
        silent = time.monotonic() - max(seen, watch.since)
        return f"no heartbeat for {silent:.1f}s" if silent >= self.settings.worker_stale_s else ""

    # -- generate ---------------------------------------------------------------------------------------
    async def generate(self, req: GenerateRequest) -> AsyncIterator[Any]:
        """Yield Accepted, TokenChunk…, then GenerateDone; engine errors become WireError. Routing, retries
        and the watch on the worker: see the module's docstring."""
        self.check_model(req.model)
        s = self.settings
        tried: set[str] = set()  # workers that refused this request for load, were gone, or died on it
        accepted = started = resent = finished = False
        try:
            while True:
                worker = self._pick(req, tried)
                a = self.workers.get(worker)
                watch = _Watch(worker, a.incarnation if a else "", time.monotonic())
                counted = self._count(worker) if worker else None
                stream = self._send(worker, req, watch)
                try:
                    async for reply in stream:
                        watch.since = time.monotonic()
                        if isinstance(reply, Accepted):
                            watch.worker, watch.incarnation = reply.receipt.worker, reply.receipt.incarnation
                            self._pin(affinity_key(req), reply.receipt.worker)
                            if counted is None:
                                counted = self._count(reply.receipt.worker)
                            if accepted:
                                continue  # sent again after its first worker died: the caller has its Accepted
                            accepted = True
                        elif isinstance(reply, GenerateError):
                            if reply.code == ErrorCode.OVERLOADED and self._refused(req, worker, tried):
                                break  # another worker has room
                            finished = True
                            raise self._error(req, reply)
                        elif isinstance(reply, GenerateDone):
                            finished = True
                            self.on_done(req.model, reply)
                        else:
                            started = True
                        yield reply
                        if finished:
                            return
                except bus.NoResponders:
                    if not worker:
                        raise
                    log.info("worker %s is gone (nobody on its subject); sending %s elsewhere", worker, req.request_id)
                    tried.add(worker)
                except bus.PeerLost as exc:
                    tried.add(watch.worker)
                    if started or resent:
                        raise WireError("unavailable", f"engine worker {watch.worker} stopped ({exc}) before request "
                                                       f"{req.request_id} finished") from None
                    log.warning("worker %s stopped (%s) before request %s started; sending it once more",
                                watch.worker, exc, req.request_id)
                    resent = True
                    await self._cancel(req)  # were it only stalled, it must not serve the request as well
                finally:
                    await stream.aclose()
                    if counted is not None:
                        self._uncount(*counted)
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
                await self._cancel(req)

    def _refused(self, req: GenerateRequest, worker: str, tried: set[str]) -> bool:
        """`worker` refused `req` for load: whether another worker may have room for it. Announces are up
        to an interval old, so only a refusal of its own since its last one rules a worker out."""
        if not worker:
            return False  # the queue group's choice: we cannot tell which one to avoid
        self._full.add(worker)
        tried.add(worker)
        nxt = self._pick(req, tried)
        log.debug("worker %s refused %s for load; next: %r", worker, req.request_id, nxt)
        return bool(nxt) and nxt not in self._full

    def _error(self, req: GenerateRequest, reply: GenerateError) -> WireError:
        message = reply.message
        if reply.code == ErrorCode.OVERLOADED:
            message = f"every engine worker for {req.model!r} is at capacity ({message}); retry after {RETRY_AFTER_S:g}s"
        return WireError.from_engine(reply.code, message)

    def _send(self, worker: str, req: GenerateRequest, watch: _Watch) -> AsyncIterator[Any]:
        """The reply stream of `req` sent to `worker` (its own subject) or to the model's queue group."""
        s = self.settings
        subject = subjects.worker(worker, "generate") if worker else subjects.generate(req.model)
        return bus.stream_request(self.nc, subject, encode(req), Decoders.engine_reply, first_timeout=s.ack_timeout_s,
                                  idle_timeout=s.idle_timeout_s, is_last=lambda r: isinstance(r, GenerateDone | GenerateError),
                                  lost=lambda: self._lost(watch), check_every=CHECK_EVERY_S)

    async def _cancel(self, req: GenerateRequest) -> None:
        try:
            await self.nc.publish(subjects.CANCEL, encode(CancelRequest(request_id=req.request_id)))
        except Exception:
            pass

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
