"""Adjudication on the request path: the context filter, the verdict barrier, and tool-call verdicts.

    request ─▶ filter (known-quarantined tool results -> placeholders)
            ─▶ unscreened tool results? ── no ──▶ backend (plain)
                     │ yes
                     ├─▶ adjudicate.result for each (in parallel)      ┐ verdict barrier
                     └─▶ backend with hold=True (prefill runs meanwhile) ┘
                         all verdicts in ─▶ Release(request, quarantined blocks) ─▶ the worker evicts, decodes
            ─▶ replies ─▶ GenerateDone with tool calls? ─▶ adjudicate.call for each (tainted if any tool result)
                          denied ─▶ a TokenChunk with the refusal + GenerateDone without that call

The wires (openai_wire, anthropic_wire) see an ordinary reply stream, so a refusal is wire-correct on every
wire, streaming or not: assistant text naming the tool, the reason and the policy rule, and a finish
reason of `stop` / `end_turn` when no call is left (a denied call never reaches the client as a call).

A worker that does not confirm the hold (`Accepted.held` false: an older engine) may already be decoding
with the payload in context; when one of its blocks is quarantined, the gateway cancels it and sends the
request again with the placeholder (fak_gateway_barrier_fallbacks_total counts these).

The key's `screening:` policy section (the FAK_POLICY files the adjudicator decides with, read here too):
- `quarantine: spans`: a quarantined result keeps its clean text and loses only the offending spans. Such a
  request waits at the gateway barrier whatever FAK_VERDICT_BARRIER says (a held prefill would already
  hold the raw bytes, and evicting the whole block would drop the clean text with it); a spans verdict
  that comes back for a held request anyway (this gateway's copy of the policy was older) cancels it and
  sends it again with the redacted text. A late quarantine (async model stage) of a block already in a
  KV cache evicts the whole block there; the next request brings the redacted text.
- a section that changes verdicts (thresholds, `allow:`, `mode: flag`): its clean verdicts are cached for
  that section only (ContextFilter scopes), and a block quarantined for someone else is judged again for
  this key (AdjudicateResult.quarantined) instead of replaced: the adjudicator decides, and audits.

Sessions: `x-fak-session` when the client sends it, else derived from the conversation's opening (the
hash of its first system and user messages), which stays the same as a conversation grows.
Taint: a request whose conversation holds any tool result is tainted (the chat APIs resend the whole
conversation, so this follows the session across replicas without shared state).
Signatures: with FAK_VERDICT_KEY a verdict that is not signed by the adjudicator for its very request fails
that request (503), as no verdict would; with FAK_RELEASE_KEY the Release is signed for the engines.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from typing import Any

import msgspec

from fak_gateway.audit_view import AuditView
from fak_gateway.context_filter import ContextFilter, placeholder
from fak_gateway.engines import derive_session
from fak_gateway.errors import WireError
from fakcore import bus
from fakcore.metrics import Metrics
from fakcore.policy import PolicyStore, Screening
from fakcore.protocol import (
    Accepted,
    AdjudicateCall,
    AdjudicateResult,
    AuditRecord,
    CallVerdict,
    ChatMessage,
    Decoders,
    GenerateDone,
    GenerateError,
    GenerateRequest,
    Release,
    ResultVerdict,
    TokenChunk,
    ToolCall,
    block_id,
    encode,
    encode_signed,
    signed_ok,
    subjects,
)
from fakcore.screening import window
from fakcore.settings import Settings

log = logging.getLogger("fak.gateway.guard")
NO_SCREENING = Screening()


class GuardMetrics:
    def __init__(self, m: Metrics):
        self.verdicts = m.counter("gateway_verdicts_total", "Verdicts applied by the gateway, by kind, outcome, source (adjudicator|cache) "
                                  "and rule or detector", ("kind", "outcome", "source", "rule"))
        self.barrier = m.histogram("gateway_verdict_barrier_seconds", "Request arrival to all screening verdicts in (requests with "
                                   "unscreened tool results)", buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5))
        self.screened = m.histogram("gateway_screening_seconds", "One tool result's adjudicate.result round trip",
                                    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5))
        self.placeholders = m.counter("gateway_placeholders_total", "Quarantined tool results replaced by a placeholder")
        self.quarantined = m.gauge("gateway_quarantined_blocks", "Blocks the context filter holds as quarantined")
        self.fallbacks = m.counter("gateway_barrier_fallbacks_total", "Requests resent because their worker did not hold")
        self.evictions = m.counter("gateway_evictions_seen_total", "Eviction receipts seen on fak.v1.kv.evicted", ("cause", "mode"))
        self.unsigned = m.counter("gateway_unsigned_verdicts_total", "Adjudicator replies refused for a missing or bad signature "
                                  "(FAK_VERDICT_KEY); each fails its request", ("kind",))


def refusal(denied: list[tuple[ToolCall, CallVerdict]]) -> str:
    lines = []
    for call, v in denied:
        args = call.arguments if len(call.arguments) <= 200 else call.arguments[:197] + "..."
        lines.append(f"[fak] The tool call {call.name}({args}) was refused and not made: {v.reason} (policy rule: {v.rule}).")
    return "\n".join(lines)


@dataclass
class Context:
    """What the guard knows of one request between screening and the reply."""

    session: str
    key: str
    tainted: bool
    t0: float
    scope: str = ""  # the clean-verdict cache this key's policy reads and fills (ContextFilter)
    spans: bool = False  # the key's policy: `quarantine: spans` (the gateway barrier, only spans replaced)
    replaced: list[str] = field(default_factory=list)  # blocks the filter turned into placeholders
    pending: dict[str, ChatMessage] = field(default_factory=dict)  # block -> tool result still to screen
    rejudge: set[str] = field(default_factory=set)  # pending blocks quarantined already, asked again for this key
    texts: dict[str, str] = field(default_factory=dict)  # block -> what it became in this request (redacted)
    tools: dict[str, str] = field(default_factory=dict)  # tool call id -> tool name (a tool result may not say)
    record: dict[str, Any] = field(default_factory=dict)  # the audit view's record of the request
    quarantined: list[tuple[str, str, str]] = field(default_factory=list)  # (block, action, detector) this request
    named: dict[str, str] = field(default_factory=dict)  # a replacement's block -> the block its verdict names


OUTCOMES = 2000  # the requests whose quarantine outcome the gateway remembers for its response headers


class Guard:
    def __init__(self, nc: Any, settings: Settings, metrics: Metrics, filt: ContextFilter, audit: AuditView, instance: str):
        self.nc, self.settings, self.filter, self.audit, self.instance = nc, settings, filt, audit, instance
        self.m = GuardMetrics(metrics)
        audit.on_eviction = lambda r: self.m.evictions.labels(r.cause or "verdict", r.mode).inc()
        # the policy files the adjudicator decides with; here only to apply known verdicts the key's way
        self.policies = PolicyStore(settings.policy) if settings.policy else None
        self._policy_checked = time.monotonic()
        self.outcomes: OrderedDict[str, list[tuple[str, str, str]]] = OrderedDict()  # request id -> Context.quarantined

    def screening(self, key: str) -> Screening:
        """The key's `screening:` section (reloaded every `policy_reload_s`; a bad file keeps the last good one)."""
        if self.policies is None:
            return NO_SCREENING
        every = self.settings.policy_reload_s
        if every > 0 and time.monotonic() - self._policy_checked >= every:
            self._policy_checked = time.monotonic()
            if self.policies.check() is False:
                log.error("policy reload failed, screening keeps the previous policy: %s", self.policies.error)
        return self.policies.current.for_key(key).screening

    def scope(self, key: str) -> str:
        """The clean-verdict cache scope of a key (ContextFilter): "" unless its policy changes verdicts."""
        sc = self.screening(key)
        return sc.fingerprint if sc.changes_verdicts else ""

    async def ask(self, msg: AdjudicateCall | AdjudicateResult) -> Any:
        """The adjudicator's signed verdict on one call or result (the model wires' and /mcp's); no verdict in
        time, no adjudicator, a bad signature: a 503 WireError, never a pass."""
        subject = subjects.ADJUDICATE_CALL if isinstance(msg, AdjudicateCall) else subjects.ADJUDICATE_RESULT
        payload, key = encode(msg), self.settings.verdict_key
        try:  # a verdict must be signed for this very request (an error fails the request anyway)
            reply = await bus.request(self.nc, subject, payload, Decoders.adjudicator_reply, timeout=self.settings.adjudicate_timeout_s,
                                      accept=lambda r, raw: isinstance(r, GenerateError) or signed_ok(raw, key, subject, payload))
        except bus.Rejected:
            self.m.unsigned.labels("call" if isinstance(msg, AdjudicateCall) else "result").inc()
            raise WireError("unavailable", "the adjudicator's verdict did not carry a valid signature, so the request "
                                           "is refused") from None
        except bus.NoResponders:
            raise WireError("unavailable", "no adjudicator is running: tool calls and tool results cannot be judged, "
                                           "so the request is refused") from None
        except bus.BusTimeout:
            raise WireError("unavailable", f"the adjudicator gave no verdict within {self.settings.adjudicate_timeout_s:g}s") from None
        if isinstance(reply, GenerateError):
            raise WireError("unavailable", f"the adjudicator failed: {reply.message}")
        return reply

    async def publish_audit(self, record: AuditRecord) -> None:
        """Append a record the gateway decided itself (a cached verdict, a hidden MCP tool) to the audit log."""
        try:
            await self.nc.jetstream().publish(subjects.AUDIT, encode(record))
        except Exception:  # the audit log is best-effort here; the adjudicator's own records are the primary ones
            pass

    # -- results ---------------------------------------------------------------------------------------
    async def _screen(self, req: GenerateRequest, ctx: Context) -> list[ResultVerdict]:
        async def one(block: str, m: ChatMessage) -> ResultVerdict:
            t0 = time.perf_counter()
            v = await self.ask(AdjudicateResult(request_id=req.request_id, tool=m.name or ctx.tools.get(m.tool_call_id, ""),
                                                 content=m.content, block=block, session=ctx.session, key_id=ctx.key,
                                                 quarantined=block in ctx.rejudge))
            self.m.screened.observe(time.perf_counter() - t0)
            self.m.verdicts.labels("result", "flag" if v.flagged else v.verdict, "adjudicator", v.detector or "none").inc()
            self.filter.add(v, ctx.scope)
            return v

        results = await asyncio.gather(*(one(b, m) for b, m in ctx.pending.items()), return_exceptions=True)
        for r in results:
            if isinstance(r, BaseException):
                raise r
        self.m.quarantined.set(len(self.filter.quarantined))
        return list(results)  # type: ignore[arg-type]

    async def prepare(self, req: GenerateRequest, key: str) -> Context:
        """The context filter applied (quarantined results -> placeholders or redacted, in place) and what is
        left to screen."""
        sc = self.screening(key)
        ctx = Context(session=req.session or derive_session(req.messages), key=key,
                      tainted=any(m.role == "tool" for m in req.messages), t0=time.perf_counter(),
                      scope=sc.fingerprint if sc.changes_verdicts else "", spans=sc.replace == "spans",
                      tools={c.id: c.name for m in req.messages if m.role == "assistant" for c in m.tool_calls})
        for m in req.messages:
            if m.role != "tool":
                continue
            block = m.block or block_id(m.content)
            if block in self.filter.placeholders or block in ctx.pending:
                continue
            state = self.filter.known(block, ctx.scope)
            if state == "clean":
                self.m.verdicts.labels("result", "clean", "cache", "none").inc()
            elif state == "quarantine" and not (ctx.scope and m.block):
                await self._replace_known(req, ctx, m, block)
            elif m.block:  # unknown, or quarantined for others and this key's policy may say otherwise
                ctx.pending[block] = m
                if state == "quarantine":
                    ctx.rejudge.add(block)
        self.m.quarantined.set(len(self.filter.quarantined))
        barrier = "gateway" if ctx.spans else self.settings.verdict_barrier
        ctx.record = dict(key_id=key, session=ctx.session, tainted=ctx.tainted, placeholders=ctx.replaced, screened=list(ctx.pending),
                          evicted=[], barrier=barrier if ctx.pending else "", replace="spans" if ctx.spans else "whole")
        return ctx

    async def _replace_known(self, req: GenerateRequest, ctx: Context, m: ChatMessage, block: str) -> None:
        """A block this gateway knows is quarantined: replaced the key's way, audited as the cache's verdict."""
        q = self.filter.quarantined[block]
        original = m.content
        self.filter.redact(m, q, ctx.spans)
        ctx.named[m.block] = block
        ctx.replaced.append(block)
        ctx.quarantined.append((block, "spans" if m.content != placeholder(q) else "placeholder", q.detector))
        ctx.texts[block] = m.content
        self.m.placeholders.inc()
        self.m.verdicts.labels("result", "quarantine", "cache", q.detector).inc()
        tool = m.name or ctx.tools.get(m.tool_call_id, "")
        await self.publish_audit(AuditRecord(kind="result", outcome="quarantine", request_id=req.request_id, session=ctx.session,
                                             key_id=ctx.key, tool=tool, block=block, detector=q.detector, score=q.score,
                                             reason=q.reason, stage="cache", source=self.instance, ts=time.time(),
                                             spans=q.spans, window=window(original, q.spans)))

    def _apply(self, messages: list[ChatMessage], verdicts: list[ResultVerdict], ctx: Context | None = None) -> list[str]:
        """This request's own quarantine verdicts applied to `messages`, in place, each as it says (`replace`)."""
        bad = {v.block: v for v in verdicts if v.verdict == "quarantine"}
        replaced = []
        for m in messages:
            v = bad.get(m.block or block_id(m.content)) if m.role == "tool" else None
            if v is not None:
                self.filter.redact(m, v, v.replace == "spans")
                replaced.append(v.block)
                if ctx is not None:
                    ctx.named[m.block] = v.block
                    ctx.texts[v.block] = m.content
                    ctx.quarantined.append((v.block, "spans" if m.content != placeholder(v) else "placeholder", v.detector))
        return replaced

    async def start(self, backend: Any, req: GenerateRequest, key: str) -> tuple[Accepted, AsyncIterator[Any]]:
        """Filter, screen (barrier), send; the reply stream comes back with tool calls adjudicated. A backend
        that cannot hold a request (`can_hold` false: an upstream) is sent nothing before every verdict is in."""
        if not self.settings.adjudicate:
            return await start_backend(backend, req)
        ctx = await self.prepare(req, key)
        if not ctx.pending:
            self.audit.remember(named(req, ctx), **ctx.record)
            first, replies = await start_backend(backend, req)
        elif self.settings.verdict_barrier == "gateway" or ctx.spans or not getattr(backend, "can_hold", True):
            await self.screen(req, ctx)
            self.audit.remember(named(req, ctx), **ctx.record)
            first, replies = await start_backend(backend, req)
        else:
            first, replies = await self._held(backend, req, ctx)
        if ctx.quarantined:
            self.outcomes[first.request_id] = ctx.quarantined
            while len(self.outcomes) > OUTCOMES:
                self.outcomes.popitem(last=False)
        return first, self._judge_calls(req, replies, ctx.session, key, ctx.tainted)

    def quarantine_report(self, request_id: str) -> list[dict[str, Any]]:
        """What the boundary did to this request's tool results (none quarantined: [])."""
        return self.report(self.outcomes.get(request_id, ()))

    def report(self, notes: Iterable[tuple[str, str, str]]) -> list[dict[str, Any]]:
        """Context.quarantined as the responses give it: each block, what became of it (`evicted` from the KV
        cache, `placeholder`, `spans`), its detector and the ids (protocol.receipt_id) of the eviction receipts
        the gateway has seen for it so far (the records: /v1/fak/requests/{id}, /v1/fak/audit?block=...)."""
        return [{"block": b, "action": a, "detector": d or "screening", "receipt_ids": list(self.audit.receipts.get(b, ()))}
                for b, a, d in notes]

    async def screen(self, req: GenerateRequest, ctx: Context) -> None:
        """The gateway barrier: every pending result screened; the quarantined ones replaced (whole or spans)."""
        if ctx.pending:
            verdicts = await self._screen(req, ctx)
            self.m.barrier.observe(time.perf_counter() - ctx.t0)
            replaced = self._apply(req.messages, verdicts, ctx)
            self.m.placeholders.inc(len(replaced))
            ctx.record["placeholders"] = ctx.replaced + replaced
            ctx.record["verdicts"] = [msgspec.to_builtins(v) for v in verdicts]

    def placeholder_of(self, block: str) -> str | None:
        """The placeholder a quarantined block is replaced by; None when the block may pass."""
        q = self.filter.quarantined.get(block)
        return placeholder(q) if q is not None else None

    def replacement(self, ctx: Context, block: str) -> str | None:
        """What `block` became in the request `ctx` was prepared for (redacted spans, a placeholder), None when
        it passes as it is: a same-wire passthrough's lookup that follows the key's policy."""
        return ctx.texts.get(block)

    async def refusals(self, req: GenerateRequest, ctx: Context, calls: list[ToolCall]) -> list[str | None]:
        """Each proposed call's verdict: None (allowed) or the refusal text that replaces it."""
        if not self.settings.adjudicate or not calls:
            return [None] * len(calls)
        verdicts = await self._verdicts(req, calls, ctx.session, ctx.key, ctx.tainted)
        denied = [(c, v) for c, v in zip(calls, verdicts, strict=True) if not v.allow]
        if denied:
            self.audit.update(req.request_id, denied=[{"tool": c.name, "rule": v.rule, "reason": v.reason} for c, v in denied])
        return [None if v.allow else refusal([(c, v)]) for c, v in zip(calls, verdicts, strict=True)]

    async def _verdicts(self, req: GenerateRequest, calls: list[ToolCall], session: str, key: str,
                        tainted: bool) -> list[CallVerdict]:
        verdicts = await asyncio.gather(*(self.ask(AdjudicateCall(
            request_id=req.request_id, tool=c.name, arguments=c.arguments, session=session, key_id=key,
            tainted=tainted)) for c in calls))
        for v in verdicts:
            self.m.verdicts.labels("call", "allow" if v.allow else "deny", "adjudicator", v.rule).inc()
        return list(verdicts)

    async def _held(self, backend: Any, req: GenerateRequest, ctx: Context) -> tuple[Accepted, AsyncIterator[Any]]:
        """Screening and speculative prefill side by side; nothing is decoded before the Release."""
        req.hold = True
        screening = asyncio.create_task(self._screen(req, ctx))
        try:
            first, replies = await start_backend(backend, req)
        except BaseException:
            screening.cancel()
            raise
        try:
            verdicts = await screening
        except BaseException:
            await replies.aclose()  # cancels the held request on its worker
            raise
        self.m.barrier.observe(time.perf_counter() - ctx.t0)
        record = ctx.record
        record["verdicts"] = [msgspec.to_builtins(v) for v in verdicts]
        quarantined = [v.block for v in verdicts if v.verdict == "quarantine"]
        # spans: the worker's prefill holds the raw bytes, and evicting the block would drop its clean text too
        spans = any(v.verdict == "quarantine" and v.replace == "spans" for v in verdicts)
        if not spans or not first.held:
            release = Release(request_id=req.request_id, quarantined=quarantined)
            await self.nc.publish(subjects.RELEASE, encode_signed(release, self.settings.release_key, subjects.RELEASE))
        if not quarantined or (first.held and not spans):
            view = msgspec.structs.replace(req, messages=[msgspec.structs.replace(m) for m in req.messages])
            self._apply(view.messages, verdicts, ctx)  # the debug view: the evicted results shown by their placeholders
            for m, orig in zip(view.messages, req.messages, strict=True):
                m.block = orig.block or m.block  # ... under the block ids the eviction names
            gone = set(quarantined)  # evicted from the worker's cache, not replaced in what it was sent
            ctx.quarantined = [n for n in ctx.quarantined if n[0] not in gone]
            ctx.quarantined += [(v.block, "evicted", v.detector) for v in verdicts if v.verdict == "quarantine"]
            record["evicted"] = quarantined
            self.audit.remember(view, **record)
            return first, replies
        # The worker did not promise to hold (it may have decoded with the payload), or it holds bytes that
        # must give way to the redacted text: start over without them.
        self.m.fallbacks.inc()
        await replies.aclose()
        replaced = self._apply(req.messages, verdicts, ctx)
        self.m.placeholders.inc(len(replaced))
        record["placeholders"] = record["placeholders"] + replaced
        again = msgspec.structs.replace(req, request_id=f"{req.request_id}-r{uuid.uuid4().hex[:6]}", hold=False)
        self.audit.remember(named(req, ctx), resent_as=again.request_id, **record)
        first, replies = await start_backend(backend, again)
        return first, replies

    # -- calls -----------------------------------------------------------------------------------------
    async def _judge_calls(self, req: GenerateRequest, replies: AsyncIterator[Any], session: str, key: str,
                           tainted: bool) -> AsyncIterator[Any]:
        emitted = False
        try:
            async for r in replies:
                if isinstance(r, TokenChunk) and r.text:
                    emitted = True
                if isinstance(r, GenerateDone) and r.tool_calls:
                    verdicts = await self._verdicts(req, r.tool_calls, session, key, tainted)
                    allowed = [c for c, v in zip(r.tool_calls, verdicts, strict=True) if v.allow]
                    denied = [(c, v) for c, v in zip(r.tool_calls, verdicts, strict=True) if not v.allow]
                    if denied:
                        self.audit.update(req.request_id, denied=[{"tool": c.name, "rule": v.rule, "reason": v.reason}
                                                                  for c, v in denied])
                        yield TokenChunk(request_id=r.request_id, seq=r.seq, text=("\n\n" if emitted else "") + refusal(denied))
                        r = msgspec.structs.replace(r, tool_calls=allowed,
                                                    finish_reason=r.finish_reason if allowed else "stop", seq=r.seq + 1)
                yield r
        finally:
            await replies.aclose()  # type: ignore[attr-defined]


def named(req: GenerateRequest, ctx: Context) -> GenerateRequest:
    """The request as the audit view keeps it: each replaced tool result under the block id its verdict, the
    `placeholders` list and the eviction receipts name (the request sent keeps its replacement's own id)."""
    if not ctx.named:
        return req
    return msgspec.structs.replace(req, messages=[msgspec.structs.replace(m, block=ctx.named.get(m.block, m.block))
                                                  for m in req.messages])


async def start_backend(backend: Any, req: GenerateRequest) -> tuple[Accepted, AsyncIterator[Any]]:
    """Send to a backend and wait for its acceptance, so that 'no worker' or an upstream's refusal is an HTTP
    status, not a broken stream."""
    replies = backend.generate(req)
    first = await replies.__anext__()
    if not isinstance(first, Accepted):
        await replies.aclose()
        raise WireError("internal", f"engine answered {type(first).__name__} before accepting")
    return first, replies


def report_headers(report: list[dict[str, Any]]) -> dict[str, str]:
    """Guard.report as headers: `x-fak-quarantined` (block;action=…;detector=…, comma separated) and
    `x-fak-eviction-receipts` (the receipt ids)."""
    if not report:
        return {}
    out = {"x-fak-quarantined": ",".join(f"{q['block']};action={q['action']};detector={q['detector']}" for q in report)}
    if receipts := list(dict.fromkeys(rid for q in report for rid in q["receipt_ids"])):
        out["x-fak-eviction-receipts"] = ",".join(receipts)
    return out
