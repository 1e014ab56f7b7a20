"""adjudicator: answer `adjudicate.call` / `adjudicate.result` (queue group), publish quarantine verdicts.

    call   -> policy.decide(tool)            -> CallVerdict
    result -> screen(content)                -> ResultVerdict; quarantine -> JetStream fak.v1.verdict.quarantine
"""

from __future__ import annotations

import logging
import time
from typing import Any

import msgspec

from fak_adjudicator import handlers
from fakcore import bus, policy
from fakcore.protocol import (
    ADJUDICATOR_QUEUE,
    AdjudicateCall,
    Decoders,
    ErrorCode,
    GenerateError,
    encode,
    subjects,
)
from fakcore.service import Service, run_service
from fakcore.settings import Settings

log = logging.getLogger("fak.adjudicator")


async def bootstrap(svc: Service) -> None:
    rules = policy.load(svc.settings.policy)
    js = await bus.ensure_streams(svc.nc)
    m = svc.metrics
    verdicts = m.counter("adjudicator_verdicts_total", "Verdicts by kind and outcome", ("kind", "outcome", "rule"))
    latency = m.histogram("adjudicator_seconds", "Time to a verdict", ("kind",))
    svc.health_detail["policy"] = rules.source

    async def on_request(msg: Any) -> None:
        t0 = time.perf_counter()
        try:
            req = Decoders.adjudicate.decode(msg.data)
        except msgspec.DecodeError as exc:
            await msg.respond(encode(GenerateError(request_id="", code=ErrorCode.INVALID, message=str(exc))))
            return
        if isinstance(req, AdjudicateCall):
            verdict = handlers.adjudicate_call(rules, req)
            verdicts.labels("call", "allow" if verdict.allow else "deny", verdict.rule).inc()
            kind = "call"
        else:
            verdict = handlers.adjudicate_result(req)
            verdicts.labels("result", verdict.verdict, verdict.detector or "none").inc()
            kind = "result"
            if verdict.verdict == "quarantine":
                q = handlers.quarantine_of(req, verdict)
                await js.publish(subjects.QUARANTINE, encode(q), headers={"Nats-Msg-Id": q.block})
        await msg.respond(encode(verdict))
        latency.labels(kind).observe(time.perf_counter() - t0)

    await svc.nc.subscribe(subjects.ADJUDICATE_CALL, queue=ADJUDICATOR_QUEUE, cb=on_request)
    await svc.nc.subscribe(subjects.ADJUDICATE_RESULT, queue=ADJUDICATOR_QUEUE, cb=on_request)
    log.info("policy %s: default %s, %d tool rules", rules.source, rules.default, len(rules.rules))


async def main(settings: Settings) -> None:
    await run_service("adjudicator", settings, bootstrap)
