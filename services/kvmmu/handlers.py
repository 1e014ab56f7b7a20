"""What the kvmmu does with each message, bus-free: a handler per message type, and what it needs.

    KvSpans           (fak.v1.kv.spans, from engines)   -> on_spans: SpanMap.update
    Announce          (fak.v1.engine.announce)          -> on_announce: SpanMap.heard
    KvStatsRequest    (fak.v1.kv.stats)                 -> on_stats: KvStats, the reply
    QuarantineVerdict (the durable JetStream consumer)  -> on_verdict: KvEvict on every worker that may hold
                      the block (verdicts.apply_verdict), receipts on fak.v1.kv.evicted; then "ack", or
                      "retry" while a worker failed and deliveries are left

main.py's consumers decode the bytes (and check a verdict's signature) and call these.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from fak_kvmmu.spans import SpanMap
from fak_kvmmu.verdicts import EvictFn, apply_verdict
from fakcore.protocol import Announce, KvSpans, KvStats, KvStatsRequest, QuarantineVerdict, encode, subjects
from fakcore.settings import Settings

if TYPE_CHECKING:  # main.py registers the metrics and builds Deps
    from fak_kvmmu.main import KvmmuMetrics

log = logging.getLogger("fak.kvmmu")

MAX_DELIVER = 10  # a verdict whose eviction keeps failing is given up (and logged) after this many tries

Publish = Callable[[str, bytes], Awaitable[Any]]  # core NATS publish(subject, payload)


@dataclass
class Deps:
    settings: Settings  # kv_evict_mode, worker_stale_s
    spans: SpanMap
    evict: EvictFn  # one worker's eviction: its KvEvictReply, WorkerGone, or an error to retry on
    publish: Publish  # eviction receipts go out through it
    metrics: KvmmuMetrics
    health: dict[str, Any] = field(default_factory=dict)  # the service's /healthz detail, kept current


def on_spans(deps: Deps, msg: KvSpans) -> None:
    deps.spans.update(msg)
    deps.metrics.updates.inc()
    observe(deps)


def on_announce(deps: Deps, msg: Announce) -> None:
    deps.spans.heard(msg.worker)


def on_stats(deps: Deps, req: KvStatsRequest) -> KvStats:
    return deps.spans.stats(req.worker)


HANDLERS: dict[type, Callable[[Deps, Any], KvStats | None]] = {
    KvSpans: on_spans,
    Announce: on_announce,
    KvStatsRequest: on_stats,
}


async def on_verdict(deps: Deps, verdict: QuarantineVerdict, delivered: int) -> Literal["ack", "retry"]:
    """`delivered`: how many times the stream has delivered this verdict, this time included."""
    t0 = time.perf_counter()
    s, m = deps.settings, deps.metrics
    out = await apply_verdict(verdict, deps.spans, deps.evict, mode=s.kv_evict_mode, stale_s=s.worker_stale_s)
    for r in out.receipts:
        await deps.publish(subjects.KV_EVICTED, encode(r))
        m.evictions.labels(r.mode).inc()
        m.evicted_tokens.inc(r.tokens_before - r.tokens_after)
    log.info("verdict %s: %d eviction(s)%s", verdict.block, len(out.receipts),
             f", failed on {out.failed}" if out.failed else "")
    retry = bool(out.failed) and delivered < MAX_DELIVER
    m.verdicts.labels("retry" if retry else "failed" if out.failed else "applied").inc()
    m.latency.observe(time.perf_counter() - t0)
    observe(deps)
    return "retry" if retry else "ack"


def observe(deps: Deps) -> None:
    """The gauges and /healthz detail, from the span map."""
    spans = deps.spans
    deps.metrics.sequences.set(len(spans.sequences))
    deps.metrics.blocks.set(spans.stats().blocks)
    deps.health.update(sequences=len(spans.sequences), workers=len(spans.workers), evictions=spans.evictions)
