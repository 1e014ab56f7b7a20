"""The gateway's view of the audit log, for the operator endpoints.

The last `audit_buffer` records of the audit stream (fak.v1.audit.verdict, replayed from that far back when
the gateway starts) plus the kvmmu's eviction receipts (fak.v1.kv.evicted), and the context of each recent
request as it left for the engines.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections import OrderedDict, deque
from typing import TYPE_CHECKING, Any

import msgspec
import nats
from nats.js.api import DeliverPolicy

from fak_gateway.context_filter import GatewayConsumer
from fakcore.protocol import Decoders, GenerateRequest, receipt_id, subjects

if TYPE_CHECKING:
    from fak_gateway.handling import Viewer

log = logging.getLogger("fak.gateway.audit")

CONTENT_CHARS = 8000  # the most of each message's content a remembered request keeps


class AuditView:
    """Recent verdicts, eviction receipts and request contexts, for the operator endpoints."""

    def __init__(self, capacity: int = 20_000, requests: int = 500):
        self.records: deque[dict[str, Any]] = deque(maxlen=capacity)
        self.requests: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self.request_capacity = requests
        self.receipts: OrderedDict[str, list[str]] = OrderedDict()  # block id -> its eviction receipts' ids, newest blocks last
        self.on_eviction: Any = lambda receipt: None
        self._subs: list[Any] = []

    async def start(self, nc: Any) -> None:
        js = nc.jetstream()
        start = 1
        with contextlib.suppress(nats.js.errors.NotFoundError):
            info = await js.stream_info(subjects.AUDIT_STREAM)
            start = max(1, info.state.last_seq - (self.records.maxlen or 0) + 1)
        config = GatewayConsumer(deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=start)
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
        rid = receipt_id(r.worker, r.sequence, r.digest_before, r.digest_after)
        self.records.append({"kind": "eviction", "outcome": "evicted", "key_id": owner, **msgspec.to_builtins(r),
                             "receipt_id": rid})
        for block in r.blocks:
            self.receipts.setdefault(block, []).append(rid)
            self.receipts.move_to_end(block)
        while len(self.receipts) > (self.records.maxlen or 0):
            self.receipts.popitem(last=False)
        self.on_eviction(r)

    def query(self, *, request_id: str = "", session: str = "", kind: str = "", block: str = "", limit: int = 100,
              tenant: Viewer | None = None) -> list[dict]:
        """Newest first. `tenant`: only the records that tenant may read (None: an operator's view of all)."""
        out = []
        for r in reversed(self.records):
            if tenant is not None and not tenant.sees(r):
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
