"""The context filter (context-MMU) and the gateway's view of the audit log.

Every gateway replica keeps the set of quarantined blocks. It is fed by an *ordered* JetStream consumer of
fak.v1.verdict.quarantine that starts at the stream's first message: a replica that (re)starts replays
every verdict ever published (the stream keeps them for 30 days) and serves no request before it has
caught up with the last one that existed when it subscribed. No state to lose, nothing shared to lock: the
stream is the set. Verdicts this replica obtains itself are applied at once, before they come back
through the stream.

A quarantined tool result becomes a placeholder (`placeholder()`) in every later request, whatever its
session or wire: the block id is a hash of the content, so the same text is recognised wherever it comes
back. Clean verdicts are cached per replica (LRU, `verdict_cache_size`) so repeated results are not
screened again; a later quarantine of the same block (the async model stage) overrides the clean entry.

The audit view: the last `audit_buffer` records of the audit stream plus the kvmmu's eviction receipts
(fak.v1.kv.evicted), and the context of each recent request as it left for the engines.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict, deque
from typing import Any

import msgspec
import nats
from nats.js.api import ConsumerConfig, DeliverPolicy

from fakcore.protocol import (
    ChatMessage,
    Decoders,
    GenerateRequest,
    QuarantineVerdict,
    ResultVerdict,
    block_id,
    signed_ok,
    subjects,
)

log = logging.getLogger("fak.gateway.filter")

PLACEHOLDER = ("[fak: this tool result was quarantined and withheld from the model: it carried content addressed to the "
               "model ({detector}, score {score:.2f}; block {block}). Treat the tool call as failed.]")


CONTENT_CHARS = 8000


def placeholder(q: QuarantineVerdict | ResultVerdict) -> str:
    return PLACEHOLDER.format(detector=q.detector or "screening", score=q.score, block=q.block)


class ContextFilter:
    def __init__(self, clean_capacity: int = 100_000, verdict_key: str = ""):
        self.verdict_key = verdict_key  # FAK_VERDICT_KEY: stream verdicts without the adjudicator's signature are ignored
        self.rejected = 0  # verdicts ignored for a missing or bad signature
        self.quarantined: dict[str, QuarantineVerdict] = {}
        self.clean: OrderedDict[str, ResultVerdict] = OrderedDict()
        self.capacity = clean_capacity
        self.ready = asyncio.Event()
        self.placeholders: set[str] = set()  # block ids of fak's own placeholder texts (never screened)
        self._caught_up_at = 0  # stream sequence to reach before `ready`
        self._sub: Any = None

    # -- state -----------------------------------------------------------------------------------------
    def known(self, block: str) -> str:
        if block in self.placeholders:
            return "clean"
        if block in self.quarantined:
            return "quarantine"
        if block in self.clean:
            self.clean.move_to_end(block)
            return "clean"
        return ""

    def add(self, v: QuarantineVerdict | ResultVerdict) -> None:
        if isinstance(v, ResultVerdict) and v.verdict != "quarantine":
            if v.block not in self.quarantined:
                self.clean[v.block] = v
                self.clean.move_to_end(v.block)
                while len(self.clean) > self.capacity:
                    self.clean.popitem(last=False)
            return
        if isinstance(v, ResultVerdict):
            v = QuarantineVerdict(block=v.block, detector=v.detector, score=v.score, reason=v.reason, stage=v.stage, ts=time.time())
        self.clean.pop(v.block, None)
        self.quarantined.setdefault(v.block, v)

    def apply(self, messages: list[ChatMessage]) -> list[str]:
        """Replace quarantined tool results by placeholders, in place; returns the blocks replaced."""
        replaced = []
        for m in messages:
            if m.role == "tool":
                q = self.quarantined.get(m.block or block_id(m.content))
                if q is not None:
                    replaced.append(q.block)
                    m.content = placeholder(q)
                    m.block = block_id(m.content)
                    self.placeholders.add(m.block)
        return replaced

    # -- the JetStream feed ----------------------------------------------------------------------------
    async def start(self, nc: Any, timeout: float = 15.0) -> None:
        """Subscribe from the first verdict ever published and wait until caught up (bounded)."""
        js = nc.jetstream()
        try:
            last = await js.get_last_msg(subjects.VERDICT_STREAM, subjects.QUARANTINE)
            self._caught_up_at = last.seq or 0
        except nats.js.errors.NotFoundError:
            self._caught_up_at = 0
        if self._caught_up_at == 0:
            self.ready.set()
        self._sub = await js.subscribe(subjects.QUARANTINE, cb=self._on_verdict, ordered_consumer=True,
                                       deliver_policy=DeliverPolicy.ALL, stream=subjects.VERDICT_STREAM)
        try:
            await asyncio.wait_for(self.ready.wait(), timeout)
        except TimeoutError:
            raise RuntimeError(f"the context filter did not catch up with {subjects.VERDICT_STREAM} within {timeout:.0f}s") from None
        log.info("context filter: %d quarantined blocks", len(self.quarantined))

    async def _on_verdict(self, msg: Any) -> None:
        try:
            if signed_ok(msg.data, self.verdict_key, subjects.QUARANTINE):
                self.add(Decoders.quarantine.decode(msg.data))
            else:
                self.rejected += 1
                log.error("quarantine verdict without a valid signature ignored (stream sequence %s)",
                          msg.metadata.sequence.stream)
        except msgspec.DecodeError as exc:
            log.warning("undecodable quarantine verdict: %s", exc)
        if not self.ready.is_set() and msg.metadata.sequence.stream >= self._caught_up_at:
            self.ready.set()

    async def stop(self) -> None:
        if self._sub is not None:
            with contextlib.suppress(Exception):
                await self._sub.unsubscribe()


class AuditView:
    """Recent verdicts, eviction receipts and request contexts, for the operator endpoints."""

    def __init__(self, capacity: int = 20_000, requests: int = 500):
        self.records: deque[dict[str, Any]] = deque(maxlen=capacity)
        self.requests: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self.request_capacity = requests
        self.on_eviction: Any = lambda receipt: None
        self._subs: list[Any] = []

    async def start(self, nc: Any) -> None:
        js = nc.jetstream()
        start = 1
        with contextlib.suppress(nats.js.errors.NotFoundError):
            info = await js.stream_info(subjects.AUDIT_STREAM)
            start = max(1, info.state.last_seq - (self.records.maxlen or 0) + 1)
        config = ConsumerConfig(deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=start)
        self._subs.append(await js.subscribe(subjects.AUDIT, cb=self._on_audit, ordered_consumer=True, config=config,
                                             stream=subjects.AUDIT_STREAM))
        self._subs.append(await nc.subscribe(subjects.KV_EVICTED, cb=self._on_evicted))

    async def _on_audit(self, msg: Any) -> None:
        try:
            self.records.append(msgspec.to_builtins(Decoders.audit.decode(msg.data)))
        except msgspec.DecodeError as exc:
            log.warning("undecodable audit record: %s", exc)

    async def _on_evicted(self, msg: Any) -> None:
        try:
            r = Decoders.kv_evicted.decode(msg.data)
        except msgspec.DecodeError as exc:
            log.warning("undecodable eviction receipt: %s", exc)
            return
        owner = self.requests.get(r.request_id, {}).get("key_id", "")  # whose request's span it was
        self.records.append({"kind": "eviction", "outcome": "evicted", "key_id": owner, **msgspec.to_builtins(r)})
        self.on_eviction(r)

    def query(self, *, request_id: str = "", session: str = "", kind: str = "", block: str = "", limit: int = 100,
              tenant: str | None = None) -> list[dict]:
        """Newest first. `tenant`: only the records of that API key id (None: an operator's view of all)."""
        out = []
        for r in reversed(self.records):
            if tenant is not None and r.get("key_id") != tenant:
                continue
            if request_id and r.get("request_id") != request_id:
                continue
            if session and r.get("session") != session:
                continue
            if kind and r.get("kind") != kind:
                continue
            if block and r.get("block") != block and block not in r.get("blocks", []):
                continue
            out.append(r)
            if len(out) >= limit:
                break
        return out

    def remember(self, req: GenerateRequest, **extra: Any) -> None:
        """The request as it left for the engines: its messages after the filter, and what happened."""
        messages = msgspec.to_builtins(req.messages)
        for m in messages:  # bounded memory: the view keeps the first CONTENT_CHARS of each message
            if len(m.get("content", "")) > CONTENT_CHARS:
                m["content"] = m["content"][:CONTENT_CHARS] + f"… [{len(m['content'])} chars]"
        self.requests[req.request_id] = {"request_id": req.request_id, "model": req.model, "ts": time.time(),
                                         "messages": messages, **extra}
        while len(self.requests) > self.request_capacity:
            self.requests.popitem(last=False)

    def update(self, request_id: str, **extra: Any) -> None:
        if request_id in self.requests:
            self.requests[request_id].update(extra)

    async def stop(self) -> None:
        for s in self._subs:
            with contextlib.suppress(Exception):
                await s.unsubscribe()
