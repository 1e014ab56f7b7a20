"""What the adjudicator does with each request, bus-free: a handler per message type, and what it needs.

    AdjudicateCall   -> policy (per API key) + rate limits            -> CallVerdict, the reply
    AdjudicateResult -> the key's `screening:` (allowlist, thresholds, mode, quarantine: whole|spans)
                        inline screen [+ model stage if sync] [+ judge if sync]  -> ResultVerdict, the reply
                        quarantine: published before the reply (the fan-out never misses one), unless
                        the gateway said it holds one already (`quarantined`: asked again for this key)
                        flagged (mode: flag): audited, never published
                        async model stage, then async judge, after a clean verdict -> a late QuarantineVerdict
    every verdict    -> an audit record, after the reply

main.py's consumer decodes the bytes, picks the handler from HANDLERS and gives it `respond` (which signs
the reply for the request it answers); the decisions themselves are handlers.py's pure functions.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import msgspec

from fak_adjudicator import handlers
from fakcore.policy import PolicyStore, RateLimiter, Screening
from fakcore.protocol import (
    AdjudicateCall,
    AdjudicateResult,
    AuditRecord,
    ResultVerdict,
    encode,
    encode_signed,
    subjects,
)
from fakcore.screening import Screener
from fakcore.screening.judge import Judge
from fakcore.screening.probe import Probe
from fakcore.settings import Settings

if TYPE_CHECKING:  # main.py registers the metrics and builds Deps
    from fak_adjudicator.main import AdjudicatorMetrics

log = logging.getLogger("fak.adjudicator")

Publish = Callable[..., Awaitable[Any]]  # JetStream's publish(subject, payload, headers=...): returns once stored
Respond = Callable[[msgspec.Struct], Awaitable[None]]  # the reply to the request being handled


@dataclass
class Deps:
    settings: Settings  # verdict_key (signatures), screen_model ("sync", "async", "off")
    store: PolicyStore  # the policies in force (`store.current`), reloaded by check_policy
    limiter: RateLimiter
    screener: Screener  # its model is None when screen_model is "off"
    publish: Publish  # quarantine verdicts and audit records go to JetStream through it
    metrics: AdjudicatorMetrics
    instance: str  # this process, the audit records' `source`
    health: dict[str, Any] = field(default_factory=dict)  # the service's /healthz detail (policy, policy_error)
    background: set[asyncio.Task] = field(default_factory=set)  # async model stages in flight
    judge: Judge | Probe | None = None  # the judge stage's client (FAK_SCREEN_JUDGE_METHOD); None when screen_judge is "off"


async def on_call(deps: Deps, req: AdjudicateCall, respond: Respond) -> None:
    t0 = time.perf_counter()
    verdict = handlers.adjudicate_call(deps.store.current, deps.limiter, req)
    deps.metrics.verdicts.labels("call", "allow" if verdict.allow else "deny", verdict.rule, "").inc()
    await respond(verdict)
    record = handlers.audit_call(req, verdict, time.perf_counter() - t0, deps.instance)
    deps.metrics.latency.labels("call").observe(time.perf_counter() - t0)
    await audit(deps, record)


async def on_result(deps: Deps, req: AdjudicateResult, respond: Respond) -> None:
    t0 = time.perf_counter()
    mode, m = deps.settings.screen_model, deps.metrics
    policy = deps.store.current.for_key(req.key_id).screening
    verdict = handlers.screen_result(deps.screener, req, with_model=mode == "sync", policy=policy)
    m.screen.labels("inline+model" if mode == "sync" else "inline").observe(time.perf_counter() - t0)
    if deps.judge is not None and deps.settings.screen_judge == "sync" and handlers.needs_second_opinion(verdict):
        # fail closed: a judge that does not answer fails this adjudication (on_request), the gateway refuses
        verdict = await judge_stage(deps, req, policy) or verdict
    m.verdicts.labels("result", "flag" if verdict.flagged else verdict.verdict, verdict.rule, verdict.detector or "none").inc()
    if verdict.verdict == "quarantine" and not req.quarantined:
        await publish_quarantine(deps, req, verdict)  # before the reply: the fan-out never misses one
    await respond(verdict)
    record = handlers.audit_result(req, verdict, time.perf_counter() - t0, deps.instance)
    late = [*([late_model_stage] if mode == "async" and deps.screener.model is not None else []),
            *([late_judge_stage] if deps.judge is not None and deps.settings.screen_judge == "async" else [])]
    if handlers.needs_second_opinion(verdict) and late:
        task = asyncio.create_task(late_stages(deps, req, late))
        deps.background.add(task)
        task.add_done_callback(deps.background.discard)
    m.latency.labels("result").observe(time.perf_counter() - t0)
    await audit(deps, record)


HANDLERS: dict[type, Callable[[Deps, Any, Respond], Awaitable[None]]] = {
    AdjudicateCall: on_call,
    AdjudicateResult: on_result,
}


async def late_stages(deps: Deps, req: AdjudicateResult, stages: list[Callable[[Deps, AdjudicateResult], Awaitable[bool]]]) -> None:
    """The async second opinions after a clean verdict, in order (the n-gram model's ~ms, then the judge's
    seconds), until one finds something. One that fails is logged and counted: the verdict is out already."""
    for stage in stages:
        try:
            if await stage(deps, req):
                return
        except Exception as exc:
            deps.metrics.stage_errors.labels(stage.__name__).inc()
            log.error("%s of %s failed: %s", stage.__name__, req.block, exc)


async def judge_stage(deps: Deps, req: AdjudicateResult, policy: Screening) -> ResultVerdict | None:
    """The judge's verdict on a result screening found clean: one only when it finds an injection."""
    assert deps.judge is not None
    t0 = time.perf_counter()
    v = handlers.judge_opinion(req, await deps.judge.verdict(req.content, req.kind), policy)
    deps.metrics.screen.labels("judge").observe(time.perf_counter() - t0)
    return v


async def late_judge_stage(deps: Deps, req: AdjudicateResult) -> bool:
    """The judge after a clean verdict (screen_judge=async): a late quarantine, by the same path as the model
    stage's. The key's policy is read again (it may have been reloaded meanwhile)."""
    t0 = time.perf_counter()
    v = await judge_stage(deps, req, deps.store.current.for_key(req.key_id).screening)
    if v is not None:
        await _late(deps, req, v, t0)
    return v is not None


async def late_model_stage(deps: Deps, req: AdjudicateResult) -> bool:
    """The model stage after a clean inline verdict (async mode): a quarantine arrives late, enforced by eviction
    (of the whole block from KV caches, also under `quarantine: spans`: the next request brings the redacted
    text). Flag mode: audited only. The key's policy is read again: it may have been reloaded meanwhile."""
    t0 = time.perf_counter()
    policy = deps.store.current.for_key(req.key_id).screening
    v = await asyncio.to_thread(handlers.second_opinion, deps.screener, req, policy)
    deps.metrics.screen.labels("model").observe(time.perf_counter() - t0)
    if v is not None:
        await _late(deps, req, v, t0)
    return v is not None


async def _late(deps: Deps, req: AdjudicateResult, v: ResultVerdict, t0: float) -> None:
    """A late second opinion's verdict: published as a quarantine (flag mode: audited only)."""
    deps.metrics.verdicts.labels("result", "flag" if v.flagged else "quarantine", v.rule, v.detector).inc()
    if not v.flagged and not req.quarantined:
        await publish_quarantine(deps, req, v)
    await audit(deps, handlers.audit_result(req, v, time.perf_counter() - t0, deps.instance))
    log.info("late %s of %s (%s, %.3f)", "flag" if v.flagged else "quarantine", v.block, v.detector, v.score)


async def publish_quarantine(deps: Deps, req: AdjudicateResult, v: ResultVerdict) -> None:
    q = handlers.quarantine_of(req, v)
    # Nats-Msg-Id: the stream drops a second copy of the same block's verdict (another replica, a retry)
    await deps.publish(subjects.QUARANTINE, encode_signed(q, deps.settings.verdict_key, subjects.QUARANTINE),
                       headers={"Nats-Msg-Id": f"q-{q.block}"})
    deps.metrics.quarantines.labels(v.stage, v.detector).inc()


async def audit(deps: Deps, record: AuditRecord) -> None:
    try:
        await deps.publish(subjects.AUDIT, encode(record))
    except Exception as exc:  # the verdict stands; a lost audit record is logged, never fatal
        log.warning("audit record not stored: %s", exc)


def check_policy(deps: Deps) -> None:
    """One look at the policy files: reload them if they changed; a bad file keeps the policy in force."""
    store, m = deps.store, deps.metrics
    try:
        changed = store.check()
    except Exception as exc:  # one bad look at the files: the policy in force stays, the next look may do better
        changed = False
        store.error = f"cannot read the policy files: {exc}"
    if changed is True:
        m.reloads.labels("ok").inc()
        deps.health.update(policy=store.current.source, policy_error="")
        log.info("policy reloaded from %s", store.current.source)
    elif changed is False:
        m.reloads.labels("error").inc()
        deps.health["policy_error"] = store.error
        log.error("policy reload failed, the previous policy stays in force: %s", store.error)
