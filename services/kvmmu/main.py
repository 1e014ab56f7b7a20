"""kvmmu: the map of content blocks to KV spans on engine workers, and eviction of quarantined blocks.

    fak.v1.kv.spans      (engines -> here)           -> SpanMap.update
    fak.v1.engine.announce (engine heartbeats)       -> SpanMap.heard
    fak.v1.kv.stats      (request/reply)             -> SpanMap.stats
    fak.v1.verdict.quarantine (JetStream, durable consumer "kvmmu")
        -> verdicts.apply_verdict: KvEvict on every worker that may hold the block
        -> receipts on fak.v1.kv.evicted, then ack (a failed worker: nak, retried)

The consumer is durable: a verdict published while the kvmmu is down waits in the stream and is applied
when it returns. With FAK_VERDICT_KEY a verdict without the adjudicator's signature evicts nothing (it is
logged, counted as `unsigned` and dropped from the consumer). Before consuming, the kvmmu asks every
worker for its span maps (kv.sync) and listens a moment, so that a backlog of verdicts meets a complete map.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

import msgspec
import nats
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from fak_kvmmu.spans import SpanMap
from fak_kvmmu.verdicts import WorkerGone, apply_verdict
from fakcore import bus
from fakcore.protocol import (
    KVMMU_DURABLE,
    KVMMU_QUEUE,
    Decoders,
    ErrorCode,
    GenerateError,
    KvEvict,
    KvEvictReply,
    KvSync,
    encode,
    signed_ok,
    subjects,
)
from fakcore.service import Service, run_service
from fakcore.settings import Settings

log = logging.getLogger("fak.kvmmu")

EVICT_TIMEOUT_S = 120.0  # one worker's eviction (exact recompute + verification of a long sequence)
MAX_DELIVER = 10  # a verdict whose eviction keeps failing is given up (and logged) after this many tries
CONSUMER = ConsumerConfig(durable_name=KVMMU_DURABLE, ack_policy=AckPolicy.EXPLICIT, deliver_policy=DeliverPolicy.ALL,
                          ack_wait=EVICT_TIMEOUT_S + 30, max_deliver=MAX_DELIVER, filter_subject=subjects.QUARANTINE)


async def bootstrap(svc: Service) -> None:
    s, nc = svc.settings, svc.nc
    spans = SpanMap()
    m = svc.metrics
    updates = m.counter("kvmmu_span_updates_total", "Span maps received from engines")
    sequences = m.gauge("kvmmu_sequences", "Cached sequences mapped")
    blocks = m.gauge("kvmmu_blocks", "Distinct content blocks mapped")
    verdicts = m.counter("kvmmu_verdicts_total", "Quarantine verdicts consumed by outcome", ("outcome",))
    evictions = m.counter("kvmmu_evictions_total", "Span evictions done on workers", ("mode",))
    evicted_tokens = m.counter("kvmmu_evicted_tokens_total", "Cached tokens removed by evictions")
    latency = m.histogram("kvmmu_verdict_seconds", "From a verdict's delivery to its receipts")

    def observe() -> None:
        st = spans.stats()
        sequences.set(len(spans.sequences))
        blocks.set(st.blocks)
        svc.health_detail.update(sequences=len(spans.sequences), workers=len(spans.workers), evictions=spans.evictions)

    async def on_spans(msg: Any) -> None:
        try:
            spans.update(Decoders.kv_spans.decode(msg.data))
        except msgspec.DecodeError as exc:
            log.warning("undecodable span map: %s", exc)
            return
        updates.inc()
        observe()

    async def on_announce(msg: Any) -> None:
        with contextlib.suppress(msgspec.DecodeError):
            spans.heard(Decoders.announce.decode(msg.data).worker)

    async def on_stats(msg: Any) -> None:
        try:
            req = Decoders.kvmmu_request.decode(msg.data)
        except msgspec.DecodeError as exc:
            await msg.respond(encode(GenerateError(request_id="", code=ErrorCode.INVALID, message=str(exc))))
            return
        await msg.respond(encode(spans.stats(req.worker)))

    async def evict(worker: str, command: KvEvict) -> KvEvictReply:
        try:
            reply = await bus.request(nc, subjects.worker(worker, "kv.evict"), encode(command), Decoders.kv_evict_reply,
                                      timeout=EVICT_TIMEOUT_S)
        except bus.NoResponders:
            raise WorkerGone(worker) from None
        if isinstance(reply, GenerateError):
            raise RuntimeError(f"{worker}: {reply.message}")
        return reply

    async def on_verdict(msg: Any) -> None:
        t0 = time.perf_counter()
        if not signed_ok(msg.data, s.verdict_key, subjects.QUARANTINE):
            log.error("quarantine verdict without a valid signature dropped (stream sequence %s)", msg.metadata.sequence.stream)
            verdicts.labels("unsigned").inc()
            await msg.term()
            return
        try:
            verdict = Decoders.quarantine.decode(msg.data)
        except msgspec.DecodeError as exc:
            log.error("undecodable verdict dropped: %s", exc)
            verdicts.labels("undecodable").inc()
            await msg.term()
            return
        out = await apply_verdict(verdict, spans, evict, mode=s.kv_evict_mode, stale_s=s.worker_stale_s)
        for r in out.receipts:
            await nc.publish(subjects.KV_EVICTED, encode(r))
            evictions.labels(r.mode).inc()
            evicted_tokens.inc(r.tokens_before - r.tokens_after)
        log.info("verdict %s: %d eviction(s)%s", verdict.block, len(out.receipts),
                 f", failed on {out.failed}" if out.failed else "")
        if out.failed and msg.metadata.num_delivered < MAX_DELIVER:
            verdicts.labels("retry").inc()
            await msg.nak(delay=1.0)
        else:
            verdicts.labels("failed" if out.failed else "applied").inc()
            await msg.ack()
        latency.observe(time.perf_counter() - t0)
        observe()

    await nc.subscribe(subjects.KV_SPANS, cb=on_spans)
    await nc.subscribe(subjects.ANNOUNCE, cb=on_announce)
    await nc.subscribe(subjects.KV_STATS, queue=KVMMU_QUEUE, cb=on_stats)
    js = await bus.ensure_streams(nc)
    await nc.publish(subjects.KV_SYNC, encode(KvSync(reason="kvmmu started")))
    await asyncio.sleep(max(0.5, 2.5 * s.announce_interval_s))  # hear every worker before the backlog
    sub = await js.pull_subscribe(subjects.QUARANTINE, durable=KVMMU_DURABLE, stream=subjects.VERDICT_STREAM, config=CONSUMER)
    consumer = svc.supervise(consume(sub, on_verdict), "the verdict consumer")

    async def stop_consumer() -> None:
        consumer.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await consumer
        with contextlib.suppress(Exception):  # a pull subscription left to the drain would hold it up
            await sub.unsubscribe()

    svc.stack.push_async_callback(stop_consumer)
    observe()
    log.info("consuming quarantine verdicts (durable %s, eviction mode %s)", KVMMU_DURABLE, s.kv_evict_mode)


async def consume(sub: Any, handle: Any) -> None:
    """Fetch verdicts one batch at a time; a failure in one is logged and the verdict redelivered later."""
    while True:
        try:
            batch = await sub.fetch(8, timeout=1.0)
        except TimeoutError:  # nats' (no verdict within the second) or asyncio's (its reply a moment late)
            continue
        except (nats.errors.ConnectionClosedError, nats.errors.ConnectionDrainingError):
            return
        except Exception as exc:  # reconnecting: the durable consumer keeps our place
            log.warning("verdict fetch: %r", exc)
            await asyncio.sleep(0.5)
            continue
        for msg in batch:
            try:
                await handle(msg)
            except Exception:
                log.exception("verdict handling failed; it will be redelivered")


async def main(settings: Settings) -> int:
    return await run_service("kvmmu", settings, bootstrap)
