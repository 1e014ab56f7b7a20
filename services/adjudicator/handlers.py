"""Pure handlers: a request Struct in, a verdict Struct out. No bus, no I/O (main.py wires them)."""

from __future__ import annotations

import time

from fakcore import screen
from fakcore.policy import Policy
from fakcore.protocol import AdjudicateCall, AdjudicateResult, CallVerdict, QuarantineVerdict, ResultVerdict


def adjudicate_call(policy: Policy, req: AdjudicateCall) -> CallVerdict:
    d = policy.decide(req.tool, req.arguments)
    return CallVerdict(allow=d.allow, rule=d.rule, reason=d.reason)


def adjudicate_result(req: AdjudicateResult) -> ResultVerdict:
    s = screen.screen(req.content)
    return ResultVerdict(block=req.block, verdict=s.verdict, detector=s.detector, score=s.score, reason=s.reason)


def quarantine_of(req: AdjudicateResult, v: ResultVerdict) -> QuarantineVerdict:
    return QuarantineVerdict(block=v.block, detector=v.detector, score=v.score, reason=v.reason, session=req.session,
                             request_id=req.request_id, ts=time.time())
