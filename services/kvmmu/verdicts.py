"""From a quarantine verdict to evictions on the workers that hold the block, with their receipts.

    verdict -> SpanMap.targets(block) -> KvEvict on each worker (in parallel) -> receipts | failures

Bus-free: the caller passes `evict(worker, command)`, which returns the worker's KvEvictReply, raises
WorkerGone when nobody answers on the worker's subject (it went away, and its caches with it), or raises
anything else for a failure worth retrying.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from fak_kvmmu.spans import SpanMap
from fakcore.protocol import KvEvict, KvEvicted, KvEvictReply, QuarantineVerdict


class WorkerGone(Exception):
    pass


@dataclass
class Outcome:
    receipts: list[KvEvicted] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)  # worker -> why (retry the verdict later)


EvictFn = Callable[[str, KvEvict], Awaitable[KvEvictReply]]


async def apply_verdict(verdict: QuarantineVerdict, spans: SpanMap, evict: EvictFn, *, mode: str, stale_s: float) -> Outcome:
    command = KvEvict(blocks=[verdict.block], mode=mode, cause="verdict", request_id=verdict.request_id)
    targets = spans.targets(verdict.block, stale_s)
    results = await asyncio.gather(*(evict(w, command) for w in targets), return_exceptions=True)
    out = Outcome()
    for worker, result in zip(targets, results, strict=True):
        if isinstance(result, KvEvictReply):
            out.receipts += result.receipts
        elif isinstance(result, WorkerGone):
            spans.forget_worker(worker)
        else:
            out.failed[worker] = str(result) or type(result).__name__
    spans.evictions += len(out.receipts)
    return out
