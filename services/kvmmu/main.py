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

Here: the metrics, the consumers (bytes -> Struct -> handlers.py) and the bootstrap that wires them.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from typing import Any

import msgspec
import nats
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from fak_kvmmu.handlers import HANDLERS, MAX_DELIVER, Deps, observe, on_verdict
from fak_kvmmu.spans import SpanMap
from fak_kvmmu.verdicts import WorkerGone
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
CONSUMER = ConsumerConfig(durable_name=KVMMU_DURABLE, ack_policy=AckPolicy.EXPLICIT, deliver_policy=DeliverPolicy.ALL,
                          ack_wait=EVICT_TIMEOUT_S + 30, max_deliver=MAX_DELIVER, filter_subject=subjects.QUARANTINE)


class KvmmuMetrics:
    def __init__(self, svc: Service):
        m = svc.metrics
        self.updates = m.counter("kvmmu_span_updates_total", "Span maps received from engines")
        self.sequences = m.gauge("kvmmu_sequences", "Cached sequences mapped")
        self.blocks = m.gauge("kvmmu_blocks", "Distinct content blocks mapped")
        self.verdicts = m.counter("kvmmu_verdicts_total", "Quarantine verdicts consumed by outcome", ("outcome",))
        self.evictions = m.counter("kvmmu_evictions_total", "Span evictions done on workers", ("mode",))
        self.evicted_tokens = m.counter("kvmmu_evicted_tokens_total", "Cached tokens removed by evictions")
        self.latency = m.histogram("kvmmu_verdict_seconds", "From a verdict's delivery to its receipts")


async def on_message(deps: Deps, decoder: msgspec.msgpack.Decoder, msg: Any) -> None:
    """bytes -> the subject's Struct -> its handler; a request gets the handler's reply (or INVALID)."""
    try:
        decoded = decoder.decode(msg.data)
    except msgspec.DecodeError as exc:
        # a heartbeat from an older or newer peer is skipped quietly, as by every other listener
        log.log(logging.DEBUG if msg.subject == subjects.ANNOUNCE else logging.WARNING,
                "undecodable message on %s: %s", msg.subject, exc)
        if msg.reply:
            await msg.respond(encode(GenerateError(request_id="", code=ErrorCode.INVALID, message=str(exc))))
        return
    reply = HANDLERS[type(decoded)](deps, decoded)
    if reply is not None and msg.reply:
        await msg.respond(encode(reply))


async def on_verdict_msg(deps: Deps, msg: Any) -> None:
    """A verdict from the stream: signature, Struct, handler; then ack, redeliver later (nak) or drop (term)."""
    if not signed_ok(msg.data, deps.settings.verdict_key, subjects.QUARANTINE):
        log.error("quarantine verdict without a valid signature dropped (stream sequence %s)", msg.metadata.sequence.stream)
        deps.metrics.verdicts.labels("unsigned").inc()
        await msg.term()
        return
    try:
        verdict = Decoders.quarantine.decode(msg.data)
    except msgspec.DecodeError as exc:
        log.error("undecodable verdict dropped: %s", exc)
        deps.metrics.verdicts.labels("undecodable").inc()
        await msg.term()
        return
    match await on_verdict(deps, verdict, msg.metadata.num_delivered):
        case "retry":
            await msg.nak(delay=1.0)
        case "ack":
            await msg.ack()


async def evict_on_bus(nc: Any, worker: str, command: KvEvict) -> KvEvictReply:
    """verdicts.EvictFn over NATS: the worker's reply, WorkerGone when nobody answers on its subject."""
    try:
        reply = await bus.request(nc, subjects.worker(worker, "kv.evict"), encode(command), Decoders.kv_evict_reply,
                                  timeout=EVICT_TIMEOUT_S)
    except bus.NoResponders:
        raise WorkerGone(worker) from None
    match reply:
        case GenerateError(message=why):
            raise RuntimeError(f"{worker}: {why}")
        case _:
            return reply


async def bootstrap(svc: Service) -> None:
    s, nc = svc.settings, svc.nc
    deps = Deps(settings=s, spans=SpanMap(), evict=functools.partial(evict_on_bus, nc), publish=nc.publish,
                metrics=KvmmuMetrics(svc), health=svc.health_detail)
    await nc.subscribe(subjects.KV_SPANS, cb=functools.partial(on_message, deps, Decoders.kv_spans))
    await nc.subscribe(subjects.ANNOUNCE, cb=functools.partial(on_message, deps, Decoders.announce))
    await nc.subscribe(subjects.KV_STATS, queue=KVMMU_QUEUE, cb=functools.partial(on_message, deps, Decoders.kvmmu_request))
    js = await bus.ensure_streams(nc)
    await nc.publish(subjects.KV_SYNC, encode(KvSync(reason="kvmmu started")))
    await asyncio.sleep(max(0.5, 2.5 * s.announce_interval_s))  # hear every worker before the backlog
    sub = await js.pull_subscribe(subjects.QUARANTINE, durable=KVMMU_DURABLE, stream=subjects.VERDICT_STREAM, config=CONSUMER)
    consumer = svc.supervise(consume(sub, functools.partial(on_verdict_msg, deps)), "the verdict consumer")

    async def stop_consumer() -> None:
        consumer.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await consumer
        with contextlib.suppress(Exception):  # a pull subscription left to the drain would hold it up
            await sub.unsubscribe()

    svc.stack.push_async_callback(stop_consumer)
    observe(deps)
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
