"""The context filter (context-MMU): quarantined tool results never reach a model again.

Every gateway replica keeps the set of quarantined blocks. It is fed by an *ordered* JetStream consumer of
fak.v1.verdict.quarantine that starts at the stream's first message: a replica that (re)starts replays
every verdict ever published (the stream keeps them for 30 days) and serves no request before it has
caught up with the last one that existed when it subscribed. No state to lose, nothing shared to lock: the
stream is the set. Verdicts this replica obtains itself are applied at once, before they come back
through the stream.

A quarantined tool result becomes a placeholder (`placeholder()`) in every later request, whatever its
session or wire: the block id is a hash of the content, so the same text is recognised wherever it comes
back. With `spans` (the key's policy says `quarantine: spans` and the verdict carries spans) only the
offending characters are replaced, each by a placeholder naming its detector and why (`redacted()`); the
rest of the result reaches the model verbatim. Either way the new text is fak's own and never screened.

Clean verdicts are cached per replica (LRU, `verdict_cache_size`) so repeated results are not screened
again, under a *scope*: "" for every key whose policy leaves verdicts to the settings, else the
fingerprint of the key's `screening:` section (its thresholds, allowlist or flag mode make a verdict that
holds for that section only). A clean verdict a key's policy shaped (`rule`) is never kept under "", and
an allowlisted one not at all (it depends on the tool's name, not only on the bytes). A later quarantine of
the same block (the async model stage) overrides every clean entry.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import msgspec
import nats
from nats.js.api import ConsumerConfig, DeliverPolicy

from fakcore.permissions import CONSUMER_PREFIX
from fakcore.protocol import (
    ChatMessage,
    Decoders,
    QuarantineVerdict,
    ResultVerdict,
    TextSpan,
    block_id,
    signed_ok,
    subjects,
)

log = logging.getLogger("fak.gateway.filter")


@dataclass
class GatewayConsumer(ConsumerConfig):
    """The config of a gateway's ordered consumer: named `gateway-<random>`, afresh on every create. The bus
    lets the gateway create consumers only by name (permissions.py), and nats.py copies the config for each
    create, so the re-creation after an ordered consumer's reset never reuses the name it replaces."""

    def __post_init__(self) -> None:
        self.name = CONSUMER_PREFIX + uuid.uuid4().hex

PLACEHOLDER = ("[fak: this tool result was quarantined and withheld from the model: it carried content addressed to the "
               "model ({detector}, score {score:.2f}; block {block}). Treat the tool call as failed.]")


SPAN_PLACEHOLDER = "[fak: removed {n} characters — {detector}: {reason}]"


def placeholder(q: QuarantineVerdict | ResultVerdict) -> str:
    return PLACEHOLDER.format(detector=q.detector or "screening", score=q.score, block=q.block)


def span_placeholder(sp: TextSpan, q: QuarantineVerdict | ResultVerdict) -> str:
    return SPAN_PLACEHOLDER.format(n=sp.end - sp.start, detector=sp.detector or q.detector or "screening",
                                   reason=sp.reason or q.reason or "content addressed to the model")


def redacted(text: str, q: QuarantineVerdict | ResultVerdict) -> str | None:
    """`text` with only the verdict's spans replaced; None when it has none that fit the text, or nothing but
    whitespace would be left (then the whole result goes, by the placeholder that says the tool call failed)."""
    spans = sorted(q.spans, key=lambda sp: sp.start)
    if not spans or any(not 0 <= a.start < a.end <= len(text) for a in spans) or any(
            a.end > b.start for a, b in zip(spans, spans[1:], strict=False)):
        return None
    kept = [text[a:b] for a, b in zip([0] + [sp.end for sp in spans], [sp.start for sp in spans] + [len(text)], strict=True)]
    if not "".join(kept).strip():
        return None
    out = [kept[0]]
    for sp, after in zip(spans, kept[1:], strict=True):
        out += [span_placeholder(sp, q), after]
    return "".join(out)


class ContextFilter:
    def __init__(self, clean_capacity: int = 100_000, verdict_key: str = ""):
        self.verdict_key = verdict_key  # FAK_VERDICT_KEY: stream verdicts without the adjudicator's signature are ignored
        self.rejected = 0  # verdicts ignored for a missing or bad signature
        self.quarantined: dict[str, QuarantineVerdict] = {}
        self.clean: OrderedDict[str, ResultVerdict] = OrderedDict()  # scope "": block -> verdict
        self.scoped: OrderedDict[tuple[str, str], ResultVerdict] = OrderedDict()  # (scope, block) -> verdict
        self.capacity = clean_capacity
        self.ready = asyncio.Event()
        self.placeholders: set[str] = set()  # block ids of fak's own placeholder texts (never screened)
        self._caught_up_at = 0  # stream sequence to reach before `ready`
        self._sub: Any = None

    # -- state -----------------------------------------------------------------------------------------
    def known(self, block: str, scope: str = "") -> str:
        """"quarantine", "clean" or "" (unknown) for a key whose verdicts are `scope`'s. A scope's clean entry
        is newer than any quarantine of the block (a quarantine removes them): its key's policy exempts it."""
        if block in self.placeholders:
            return "clean"
        if scope and (scope, block) in self.scoped:
            self.scoped.move_to_end((scope, block))
            return "clean"
        if block in self.quarantined:
            return "quarantine"
        if not scope and block in self.clean:
            self.clean.move_to_end(block)
            return "clean"
        return ""

    def add(self, v: QuarantineVerdict | ResultVerdict, scope: str = "") -> None:
        if isinstance(v, ResultVerdict) and v.verdict != "quarantine":
            if v.detector == "allowlist" or (v.rule and not scope):
                return  # holds for this request's tool, or for a policy this gateway cannot name
            if scope:
                self.scoped[(scope, v.block)] = v
                self.scoped.move_to_end((scope, v.block))
                while len(self.scoped) > self.capacity:
                    self.scoped.popitem(last=False)
            elif v.block not in self.quarantined:
                self.clean[v.block] = v
                self.clean.move_to_end(v.block)
                while len(self.clean) > self.capacity:
                    self.clean.popitem(last=False)
            return
        if isinstance(v, ResultVerdict):
            v = QuarantineVerdict(block=v.block, detector=v.detector, score=v.score, reason=v.reason, stage=v.stage, ts=time.time(),
                                  spans=v.spans)
        self.clean.pop(v.block, None)
        if self.scoped:  # rare (a quarantine of a block some key's policy let pass): a scan is fine
            for key in [k for k in self.scoped if k[1] == v.block]:
                del self.scoped[key]
        self.quarantined.setdefault(v.block, v)

    def redact(self, m: ChatMessage, q: QuarantineVerdict | ResultVerdict, spans: bool = False) -> None:
        """One tool result replaced in place: its spans only (`spans` and the verdict has some that fit), else
        all of it. The new text is fak's own: its block is never screened."""
        text = redacted(m.content, q) if spans else None
        m.content = text if text is not None else placeholder(q)
        m.block = block_id(m.content)
        self.placeholders.add(m.block)

    def apply(self, messages: list[ChatMessage], spans: bool = False) -> list[str]:
        """Replace quarantined tool results (by placeholders, or only their spans), in place; returns the
        blocks replaced."""
        replaced = []
        for m in messages:
            if m.role == "tool":
                q = self.quarantined.get(m.block or block_id(m.content))
                if q is not None:
                    replaced.append(q.block)
                    self.redact(m, q, spans)
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
                                       config=GatewayConsumer(deliver_policy=DeliverPolicy.ALL), stream=subjects.VERDICT_STREAM)
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
