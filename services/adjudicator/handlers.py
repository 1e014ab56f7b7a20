"""Pure handlers: a request Struct in, a verdict Struct out. No bus, no I/O (main.py wires them)."""

from __future__ import annotations

import time

from fakcore.policy import PolicySet, RateLimiter
from fakcore.protocol import (
    AdjudicateCall,
    AdjudicateResult,
    AuditRecord,
    CallVerdict,
    QuarantineVerdict,
    ResultVerdict,
)
from fakcore.screening import Screener, Verdict


def adjudicate_call(policies: PolicySet, limiter: RateLimiter, req: AdjudicateCall, now: float | None = None) -> CallVerdict:
    d = policies.for_key(req.key_id).decide(req.tool, req.arguments, tainted=req.tainted)
    d = limiter.decide(d, req.key_id, req.tool, now)
    return CallVerdict(allow=d.allow, rule=d.rule, reason=d.reason)


def _result(req: AdjudicateResult, v: Verdict) -> ResultVerdict:
    return ResultVerdict(block=req.block, verdict=v.verdict, detector=v.detector, score=v.score, reason=v.reason, stage=v.stage)


def screen_result(screener: Screener, req: AdjudicateResult, *, with_model: bool) -> ResultVerdict:
    """The verdict the request waits for: the inline stage, and the model stage too when `with_model`."""
    return _result(req, screener.screen(req.content, req.kind) if with_model else screener.inline(req.content, req.kind))


def second_opinion(screener: Screener, req: AdjudicateResult) -> ResultVerdict | None:
    """The model stage after an inline 'clean' (async mode): a verdict only when it quarantines."""
    v = screener.model_stage(req.content, req.kind)
    return _result(req, v) if v.quarantine else None


def quarantine_of(req: AdjudicateResult, v: ResultVerdict) -> QuarantineVerdict:
    return QuarantineVerdict(block=v.block, detector=v.detector, score=v.score, reason=v.reason, session=req.session,
                             request_id=req.request_id, ts=time.time(), stage=v.stage)


def audit_call(req: AdjudicateCall, v: CallVerdict, seconds: float, source: str) -> AuditRecord:
    return AuditRecord(kind="call", outcome="allow" if v.allow else "deny", request_id=req.request_id, session=req.session,
                       key_id=req.key_id, tool=req.tool, arguments=req.arguments[:2000], rule=v.rule, reason=v.reason,
                       stage="policy", latency_ms=round(seconds * 1e3, 3), source=source, ts=time.time())


def audit_result(req: AdjudicateResult, v: ResultVerdict, seconds: float, source: str) -> AuditRecord:
    return AuditRecord(kind="result", outcome=v.verdict, request_id=req.request_id, session=req.session, key_id=req.key_id,
                       tool=req.tool, block=req.block, detector=v.detector, score=v.score, reason=v.reason, stage=v.stage,
                       latency_ms=round(seconds * 1e3, 3), source=source, ts=time.time())
