"""kvmmu: record the span maps engines publish; answer stats.

    fak.v1.kv.spans  (engines -> here)  -> SpanMap.update
    fak.v1.kv.stats  (request/reply)    -> SpanMap.stats
"""

from __future__ import annotations

import logging
from typing import Any

import msgspec

from fak_kvmmu.spans import SpanMap
from fakcore.protocol import KVMMU_QUEUE, Decoders, ErrorCode, GenerateError, encode, subjects
from fakcore.service import Service, run_service
from fakcore.settings import Settings

log = logging.getLogger("fak.kvmmu")


async def bootstrap(svc: Service) -> None:
    spans = SpanMap()
    m = svc.metrics
    updates = m.counter("kvmmu_span_updates_total", "Span maps received from engines")
    sequences = m.gauge("kvmmu_sequences", "Cached sequences mapped")

    async def on_spans(msg: Any) -> None:
        try:
            spans.update(Decoders.kv_spans.decode(msg.data))
        except msgspec.DecodeError as exc:
            log.warning("undecodable span map: %s", exc)
            return
        updates.inc()
        sequences.set(len(spans.sequences))

    async def on_stats(msg: Any) -> None:
        try:
            req = Decoders.kvmmu_request.decode(msg.data)
        except msgspec.DecodeError as exc:
            await msg.respond(encode(GenerateError(request_id="", code=ErrorCode.INVALID, message=str(exc))))
            return
        await msg.respond(encode(spans.stats(req.worker)))

    await svc.nc.subscribe(subjects.KV_SPANS, cb=on_spans)
    await svc.nc.subscribe(subjects.KV_STATS, queue=KVMMU_QUEUE, cb=on_stats)
    svc.health_detail["sequences"] = 0


async def main(settings: Settings) -> None:
    await run_service("kvmmu", settings, bootstrap)
