"""Pure handlers: a request Struct in, a verdict Struct out. No bus, no I/O (main.py wires them).

A tool result's verdict is the screener's, shaped by the key's `screening:` policy section:

    allowlisted (tool, source or block)  -> clean, detector "allowlist", stage "policy", nothing screened
    thresholds                           -> the key's instead of the settings' (rule names the one that decided)
    mode: flag                           -> what screening found (detector, score, spans) on a *clean* verdict
                                            with `flagged`: the content passes, no quarantine is published,
                                            the audit record's outcome is the would-be verdict
    quarantine: spans                    -> the verdict's `replace`: the gateway removes only `spans`
"""

from __future__ import annotations

import time

from fakcore.policy import PolicySet, RateLimiter, Screening
from fakcore.protocol import (
    AdjudicateCall,
    AdjudicateResult,
    AuditRecord,
    CallVerdict,
    QuarantineVerdict,
    ResultVerdict,
)
from fakcore.screening import Screener, Verdict, window

JUDGE_DETECTORS = ("model:judge-", "model:probe-")  # judge.py's and probe.py's DETECTOR, less the model's name

NO_POLICY = Screening()  # the settings' screening, unchanged


def adjudicate_call(policies: PolicySet, limiter: RateLimiter, req: AdjudicateCall, now: float | None = None) -> CallVerdict:
    d = policies.for_key(req.key_id).decide(req.tool, req.arguments, tainted=req.tainted)
    d = limiter.decide(d, req.key_id, req.tool, now)
    return CallVerdict(allow=d.allow, rule=d.rule, reason=d.reason)


def _threshold_rule(policy: Screening, v: Verdict) -> str:
    """The key's threshold that decided `v`, '' when the settings' did. A clean verdict from both stages
    names the first one the key sets."""
    inline = "screening.inline_threshold" if policy.inline_threshold is not None else ""
    # the key's model_threshold is the n-gram model's, never the judge's (which has only the settings')
    model = "screening.model_threshold" if policy.model_threshold is not None and not is_judge(v) else ""
    if v.quarantine:
        return inline if v.stage == "inline" else model
    return inline or (model if v.stage == "model" else "")


def _result(req: AdjudicateResult, v: Verdict, policy: Screening) -> ResultVerdict:
    spans = list(v.spans)
    if v.quarantine and policy.mode == "flag":
        return ResultVerdict(block=req.block, verdict="clean", detector=v.detector, score=v.score, reason=v.reason, stage=v.stage,
                             spans=spans, replace=policy.replace, rule="screening.mode", flagged=True)
    return ResultVerdict(block=req.block, verdict=v.verdict, detector=v.detector, score=v.score, reason=v.reason, stage=v.stage,
                         spans=spans, replace=policy.replace, rule=_threshold_rule(policy, v))


def screen_result(screener: Screener, req: AdjudicateResult, *, with_model: bool, policy: Screening = NO_POLICY) -> ResultVerdict:
    """The verdict the request waits for: the inline stage, and the model stage too when `with_model`."""
    allowed = policy.allowed(req.tool, req.block, req.kind)
    if allowed:
        return ResultVerdict(block=req.block, verdict="clean", detector="allowlist", stage="policy", replace=policy.replace,
                             rule=allowed, reason=f"not screened: the policy's {allowed}")
    if with_model:
        v = screener.screen(req.content, req.kind, policy.inline_threshold, policy.model_threshold)
    else:
        v = screener.inline(req.content, req.kind, policy.inline_threshold)
    return _result(req, v, policy)


def needs_second_opinion(v: ResultVerdict) -> bool:
    """Whether the async model stage still has something to say: a clean verdict that screening made."""
    return v.verdict == "clean" and not v.flagged and v.detector != "allowlist"


def second_opinion(screener: Screener, req: AdjudicateResult, policy: Screening = NO_POLICY) -> ResultVerdict | None:
    """The model stage after an inline 'clean' (async mode): a verdict only when it finds an injection (a
    flagged one in flag mode)."""
    v = screener.model_stage(req.content, req.kind, policy.model_threshold)
    return _result(req, v, policy) if v.quarantine else None


def is_judge(v: Verdict) -> bool:
    return v.detector.startswith(JUDGE_DETECTORS)


def judge_opinion(req: AdjudicateResult, v: Verdict, policy: Screening = NO_POLICY) -> ResultVerdict | None:
    """The judge stage's verdict (screening/judge.py) on a result screening found clean: one only when it
    finds an injection (a flagged one in flag mode). An allowlisted result never gets here (a clean verdict
    with detector "allowlist" needs no second opinion)."""
    return _result(req, v, policy) if v.quarantine else None


def quarantine_of(req: AdjudicateResult, v: ResultVerdict) -> QuarantineVerdict:
    return QuarantineVerdict(block=v.block, detector=v.detector, score=v.score, reason=v.reason, session=req.session,
                             request_id=req.request_id, ts=time.time(), stage=v.stage, spans=v.spans)


def audit_call(req: AdjudicateCall, v: CallVerdict, seconds: float, source: str) -> AuditRecord:
    return AuditRecord(kind="call", outcome="allow" if v.allow else "deny", request_id=req.request_id, session=req.session,
                       key_id=req.key_id, tool=req.tool, arguments=req.arguments[:2000], rule=v.rule, reason=v.reason,
                       stage="policy", latency_ms=round(seconds * 1e3, 3), source=source, ts=time.time(),
                       server=req.server)


def audit_result(req: AdjudicateResult, v: ResultVerdict, seconds: float, source: str) -> AuditRecord:
    """A flagged verdict is recorded as what screening found (outcome "quarantine", flagged)."""
    return AuditRecord(kind="result", outcome="quarantine" if v.flagged else v.verdict, request_id=req.request_id,
                       session=req.session, key_id=req.key_id, tool=req.tool, block=req.block, rule=v.rule, detector=v.detector,
                       score=v.score, reason=v.reason, stage=v.stage, latency_ms=round(seconds * 1e3, 3), source=source,
                       ts=time.time(), spans=v.spans, window=window(req.content, v.spans), flagged=v.flagged,
                       server=req.server)
