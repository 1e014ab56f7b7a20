"""The context filter (context-MMU): quarantined tool results never reach a model again.

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
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict
from typing import Any

import msgspec
import nats
from nats.js.api import DeliverPolicy

from fakcore.protocol import (
    ChatMessage,
    Decoders,
    QuarantineVerdict,
    ResultVerdict,
    block_id,
    signed_ok,
    subjects,
)

log = logging.getLogger("fak.gateway.filter")

PLACEHOLDER = ("[fak: this tool result was quarantined and withheld from the model: it carried content addressed to the "
               "model ({detector}, score {score:.2f}; block {block}). Treat the tool call as failed.]")


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
