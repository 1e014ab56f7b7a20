"""adjudicator: answer `adjudicate.call` / `adjudicate.result` (queue group), publish quarantine verdicts.

    call   -> policy (per API key, hot-reloaded) + rate limits  -> CallVerdict
    result -> inline screen [+ model stage if sync]             -> ResultVerdict
              quarantine                                         -> JetStream fak.v1.verdict.quarantine, once
              async model stage after a clean inline verdict     -> a late QuarantineVerdict
    every verdict                                                -> JetStream fak.v1.audit.verdict

With FAK_VERDICT_KEY every verdict is signed (protocol.encode_signed): a reply for the request it answers,
a quarantine verdict for its subject.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

import msgspec

from fak_adjudicator import handlers
from fakcore import bus
from fakcore.audit import ensure_audit_stream
from fakcore.policy import PolicyStore, RateLimiter
from fakcore.protocol import (
    ADJUDICATOR_QUEUE,
    AdjudicateCall,
    AdjudicateResult,
    Decoders,
    ErrorCode,
    GenerateError,
    ResultVerdict,
    encode,
    encode_signed,
    subjects,
)
from fakcore.screening import Screener
from fakcore.service import Service, run_service
from fakcore.settings import Settings

log = logging.getLogger("fak.adjudicator")


class AdjudicatorMetrics:
    def __init__(self, svc: Service):
        m = svc.metrics
        self.verdicts = m.counter("adjudicator_verdicts_total", "Verdicts by kind, outcome, rule (calls) and detector (results)",
                                  ("kind", "outcome", "rule", "detector"))
        self.latency = m.histogram("adjudicator_seconds", "Request to verdict", ("kind",))
        self.screen = m.histogram("adjudicator_screen_seconds", "Screening time of one tool result by stage", ("stage",),
                                  buckets=(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5))
        self.quarantines = m.counter("adjudicator_quarantines_total", "Quarantine verdicts published", ("stage", "detector"))
        self.reloads = m.counter("adjudicator_policy_reloads_total", "Policy reloads by outcome", ("outcome",))


async def bootstrap(svc: Service) -> None:
    s = svc.settings
    store = PolicyStore(s.policy)  # a bad policy at start-up stops the service with the file and field named
    limiter = RateLimiter()
    screener = Screener(inline_threshold=s.screen_threshold, model_threshold=s.screen_model_threshold)
    if s.screen_model == "off":
        screener.model = None
    js = await bus.ensure_streams(svc.nc)
    await ensure_audit_stream(svc.nc)
    m = AdjudicatorMetrics(svc)
    background: set[asyncio.Task] = set()
    svc.health_detail.update(policy=store.current.source, policy_error="", screen_model=s.screen_model,
                             model=screener.model.version if screener.model else "")
    svc.healthy = lambda: (not store.error, store.error)

    async def publish_quarantine(req: AdjudicateResult, v: ResultVerdict) -> None:
        q = handlers.quarantine_of(req, v)
        # Nats-Msg-Id: the stream drops a second copy of the same block's verdict (another replica, a retry)
        await js.publish(subjects.QUARANTINE, encode_signed(q, s.verdict_key, subjects.QUARANTINE),
                         headers={"Nats-Msg-Id": f"q-{q.block}"})
        m.quarantines.labels(v.stage, v.detector).inc()

    async def audit(record: Any) -> None:
        try:
            await js.publish(subjects.AUDIT, encode(record))
        except Exception as exc:  # the verdict stands; a lost audit record is logged, never fatal
            log.warning("audit record not stored: %s", exc)

    async def late_model_stage(req: AdjudicateResult) -> None:
        t0 = time.perf_counter()
        v = await asyncio.to_thread(handlers.second_opinion, screener, req)
        m.screen.labels("model").observe(time.perf_counter() - t0)
        if v is not None:
            m.verdicts.labels("result", "quarantine", "", v.detector).inc()
            await publish_quarantine(req, v)
            await audit(handlers.audit_result(req, v, time.perf_counter() - t0, svc.instance))
            log.info("late quarantine of %s (%s, %.3f)", v.block, v.detector, v.score)

    async def on_request(msg: Any) -> None:
        t0 = time.perf_counter()
        try:
            req = Decoders.adjudicate.decode(msg.data)
        except msgspec.DecodeError as exc:
            await msg.respond(encode(GenerateError(request_id="", code=ErrorCode.INVALID, message=str(exc))))
            return
        try:
            if isinstance(req, AdjudicateCall):
                verdict: Any = handlers.adjudicate_call(store.current, limiter, req)
                m.verdicts.labels("call", "allow" if verdict.allow else "deny", verdict.rule, "").inc()
                await msg.respond(encode_signed(verdict, s.verdict_key, msg.subject, msg.data))  # bound to the request
                record = handlers.audit_call(req, verdict, time.perf_counter() - t0, svc.instance)
            else:
                verdict = handlers.screen_result(screener, req, with_model=s.screen_model == "sync")
                m.screen.labels("inline" if s.screen_model != "sync" else "inline+model").observe(time.perf_counter() - t0)
                m.verdicts.labels("result", verdict.verdict, "", verdict.detector or "none").inc()
                if verdict.verdict == "quarantine":
                    await publish_quarantine(req, verdict)  # before the reply: the fan-out never misses one
                await msg.respond(encode_signed(verdict, s.verdict_key, msg.subject, msg.data))
                record = handlers.audit_result(req, verdict, time.perf_counter() - t0, svc.instance)
                if verdict.verdict == "clean" and s.screen_model == "async" and screener.model is not None:
                    task = asyncio.create_task(late_model_stage(req))
                    background.add(task)
                    task.add_done_callback(background.discard)
        except Exception as exc:  # fail closed: the gateway refuses the request rather than pass it unjudged
            log.exception("adjudication failed")
            await msg.respond(encode(GenerateError(request_id=getattr(req, "request_id", ""), code=ErrorCode.INTERNAL,
                                                   message=f"adjudication failed: {exc}")))
            return
        m.latency.labels("call" if isinstance(req, AdjudicateCall) else "result").observe(time.perf_counter() - t0)
        await audit(record)

    async def reload_loop() -> None:
        while True:  # started only when there are policy files to watch
            await asyncio.sleep(s.policy_reload_s)
            try:
                changed = store.check()
            except Exception as exc:  # one bad look at the files: the policy in force stays, the loop goes on
                changed = False
                store.error = f"cannot read the policy files: {exc}"
            if changed is True:
                m.reloads.labels("ok").inc()
                svc.health_detail.update(policy=store.current.source, policy_error="")
                log.info("policy reloaded from %s", store.current.source)
            elif changed is False:
                m.reloads.labels("error").inc()
                svc.health_detail["policy_error"] = store.error
                log.error("policy reload failed, the previous policy stays in force: %s", store.error)

    await svc.nc.subscribe(subjects.ADJUDICATE_CALL, queue=ADJUDICATOR_QUEUE, cb=on_request)
    await svc.nc.subscribe(subjects.ADJUDICATE_RESULT, queue=ADJUDICATOR_QUEUE, cb=on_request)
    reloaders = [svc.supervise(reload_loop(), "the policy reloader")] if s.policy and s.policy_reload_s > 0 else []

    async def stop_tasks() -> None:
        for t in [*reloaders, *background]:
            t.cancel()
        with contextlib.suppress(BaseException):
            await asyncio.gather(*reloaders, *background, return_exceptions=True)

    svc.stack.push_async_callback(stop_tasks)
    p = store.current.default
    log.info("policy %s: default %s, %d tool rules; screening inline (threshold %.2f) + model %s", store.current.source,
             p.default, len(p.tools), s.screen_threshold, s.screen_model)


async def main(settings: Settings) -> int:
    return await run_service("adjudicator", settings, bootstrap)
