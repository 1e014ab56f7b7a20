"""adjudicator: answer `adjudicate.call` / `adjudicate.result` (queue group), publish quarantine verdicts.

    call   -> policy (per API key, hot-reloaded) + rate limits  -> CallVerdict
    result -> the key's screening section (allowlist, thresholds, flag | quarantine, whole | spans)
              inline screen [+ model stage if sync] [+ judge if sync]  -> ResultVerdict
              quarantine                                         -> JetStream fak.v1.verdict.quarantine, once
              async model stage, async judge after a clean verdict  -> a late QuarantineVerdict
    every verdict                                                -> JetStream fak.v1.audit.verdict

With FAK_VERDICT_KEY every verdict is signed (protocol.encode_signed): a reply for the request it answers,
a quarantine verdict for its subject.

The judge stage (FAK_SCREEN_JUDGE, screening/judge.py) asks an engine worker of its model over the bus; with
it on, the adjudicator starts only once such a worker has answered a probe question (fail closed: else it
exits naming what is missing).

Here: the metrics, the consumer (bytes -> Struct -> adjudicate.HANDLERS) and the bootstrap that wires them;
what each request does is in adjudicate.py, the decisions in handlers.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from typing import Any

import msgspec

from fak_adjudicator.adjudicate import HANDLERS, Deps, check_policy
from fakcore import bus
from fakcore.audit import ensure_audit_stream
from fakcore.policy import PolicyStore, RateLimiter
from fakcore.protocol import (
    ADJUDICATOR_QUEUE,
    Decoders,
    ErrorCode,
    GenerateError,
    encode,
    encode_signed,
    subjects,
)
from fakcore.screening import Screener
from fakcore.screening.judge import Judge, JudgeUnavailable
from fakcore.screening.probe import Head, Probe, head_path
from fakcore.service import Service, run_service
from fakcore.settings import Settings

log = logging.getLogger("fak.adjudicator")


class AdjudicatorMetrics:
    def __init__(self, svc: Service):
        m = svc.metrics
        self.verdicts = m.counter("adjudicator_verdicts_total", "Verdicts by kind, outcome (allow, deny, clean, quarantine, flag), "
                                  "rule (the policy's, or the screening section's) and detector (results)",
                                  ("kind", "outcome", "rule", "detector"))
        self.latency = m.histogram("adjudicator_seconds", "Request to verdict", ("kind",))
        self.screen = m.histogram("adjudicator_screen_seconds", "Screening time of one tool result by stage", ("stage",),
                                  buckets=(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5))
        self.quarantines = m.counter("adjudicator_quarantines_total", "Quarantine verdicts published", ("stage", "detector"))
        self.reloads = m.counter("adjudicator_policy_reloads_total", "Policy reloads by outcome", ("outcome",))
        self.stage_errors = m.counter("adjudicator_late_stage_errors_total", "Async second opinions (model, judge) that "
                                      "failed after the verdict was out", ("stage",))


async def on_request(deps: Deps, msg: Any) -> None:
    """bytes -> AdjudicateCall | AdjudicateResult -> its handler, whose reply is signed for this request."""
    try:
        req = Decoders.adjudicate.decode(msg.data)
    except msgspec.DecodeError as exc:
        await msg.respond(encode(GenerateError(request_id="", code=ErrorCode.INVALID, message=str(exc))))
        return

    async def respond(verdict: msgspec.Struct) -> None:
        await msg.respond(encode_signed(verdict, deps.settings.verdict_key, msg.subject, msg.data))  # bound to the request

    try:
        await HANDLERS[type(req)](deps, req, respond)
    except Exception as exc:  # fail closed: the gateway refuses the request rather than pass it unjudged
        log.exception("adjudication failed")
        await msg.respond(encode(GenerateError(request_id=req.request_id, code=ErrorCode.INTERNAL,
                                               message=f"adjudication failed: {exc}")))


async def reload_loop(deps: Deps) -> None:
    while True:  # started only when there are policy files to watch
        await asyncio.sleep(deps.settings.policy_reload_s)
        check_policy(deps)


async def bootstrap(svc: Service) -> None:
    s = svc.settings
    store = PolicyStore(s.policy)  # a bad policy at start-up stops the service with the file and field named
    screener = Screener(inline_threshold=s.screen_threshold, model_threshold=s.screen_model_threshold)
    if s.screen_model == "off":
        screener.model = None
    judge = await start_judge(svc) if s.screen_judge != "off" else None
    js = await bus.ensure_streams(svc.nc)
    await ensure_audit_stream(svc.nc)
    deps = Deps(settings=s, store=store, limiter=RateLimiter(), screener=screener, publish=js.publish,
                metrics=AdjudicatorMetrics(svc), instance=svc.instance, health=svc.health_detail, judge=judge)
    svc.health_detail.update(policy=store.current.source, policy_error="", screen_model=s.screen_model,
                             model=screener.model.version if screener.model else "", screen_judge=s.screen_judge,
                             judge=s.screen_judge_model if judge else "")
    svc.healthy = lambda: (not store.error, store.error)

    for subject in (subjects.ADJUDICATE_CALL, subjects.ADJUDICATE_RESULT):
        await svc.nc.subscribe(subject, queue=ADJUDICATOR_QUEUE, cb=functools.partial(on_request, deps))
    reloaders = [svc.supervise(reload_loop(deps), "the policy reloader")] if s.policy and s.policy_reload_s > 0 else []

    async def stop_tasks() -> None:
        for t in [*reloaders, *deps.background]:
            t.cancel()
        with contextlib.suppress(BaseException):
            await asyncio.gather(*reloaders, *deps.background, return_exceptions=True)

    svc.stack.push_async_callback(stop_tasks)
    p = store.current.default
    log.info("policy %s: default %s, %d tool rules; screening inline (threshold %.2f) + model %s + judge %s", store.current.source,
             p.default, len(p.tools), s.screen_threshold, s.screen_model, s.screen_judge)


def make_judge(svc: Service) -> Judge | Probe:
    """The judge stage's client for FAK_SCREEN_JUDGE_METHOD: a probe needs the head shipped for its model."""
    s = svc.settings
    if s.screen_judge_method == "ask":
        return Judge(svc.nc, s.screen_judge_model, s.screen_judge_threshold, timeout_s=s.screen_judge_timeout_s,
                     ack_timeout_s=s.ack_timeout_s)
    path = head_path(s.screen_judge_model)
    if not path.is_file():
        shipped = sorted(p.stem.removeprefix("probe-") for p in path.parent.glob("probe-*.npz"))
        raise JudgeUnavailable(f"FAK_SCREEN_JUDGE_METHOD=probe: no probe head is shipped for {s.screen_judge_model!r} "
                               f"({path} is missing); heads ship for: {', '.join(shipped) or 'none'}. Set "
                               f"FAK_SCREEN_JUDGE_MODEL to one of them, or FAK_SCREEN_JUDGE_METHOD=ask")
    return Probe(svc.nc, Head.load(path), s.screen_judge_threshold, timeout_s=s.screen_judge_timeout_s)


async def start_judge(svc: Service) -> Judge | Probe:
    """The judge's client, once a worker of its model has answered; JudgeUnavailable otherwise (the service
    does not start: fail closed, never a quiet skip of a stage that was asked for)."""
    s = svc.settings
    try:
        judge = make_judge(svc)
        probe = await judge.wait_ready(4 * s.screen_judge_timeout_s)  # its worker may still be loading
    except JudgeUnavailable as exc:
        log.error("%s", exc)
        raise
    log.info("judge stage %s (%s): %s answers (a known injection scored %.4f, threshold %.4f)", s.screen_judge,
             s.screen_judge_method, s.screen_judge_model, probe, judge.threshold)
    return judge


async def main(settings: Settings) -> int:
    return await run_service("adjudicator", settings, bootstrap)
