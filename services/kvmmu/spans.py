"""The span map: which worker holds which content block in which cached sequence, at which positions.

Pure state, fed by `fak.v1.kv.spans` messages and worker heartbeats; the service answers stats from it and
asks it which workers to command when a quarantine verdict arrives.
"""

from __future__ import annotations

import time
from collections import defaultdict

from fakcore.protocol import KvSpans, KvStats, KvWorkerStats, Span


class SpanMap:
    def __init__(self) -> None:
        self.sequences: dict[tuple[str, str], KvSpans] = {}  # (worker, sequence) -> latest span map
        self.workers: dict[str, float] = {}  # worker -> monotonic time last heard (heartbeat or span map)
        self.evictions = 0

    def update(self, msg: KvSpans) -> None:
        key = (msg.worker, msg.sequence)
        self.heard(msg.worker)
        if msg.dropped:
            self.sequences.pop(key, None)
        else:
            self.sequences[key] = msg

    def heard(self, worker: str, now: float | None = None) -> None:
        self.workers[worker] = time.monotonic() if now is None else now

    def forget_worker(self, worker: str) -> None:
        """The worker is gone (no responders): its caches went with it."""
        self.workers.pop(worker, None)
        for key in [k for k in self.sequences if k[0] == worker]:
            del self.sequences[key]

    def live(self, stale_s: float, now: float | None = None) -> list[str]:
        now = time.monotonic() if now is None else now
        return sorted(w for w, t in self.workers.items() if now - t < stale_s)

    def holders(self, block: str) -> list[tuple[str, str, Span]]:
        """Every (worker, sequence, span) holding `block`."""
        return [(w, s, span) for (w, s), m in self.sequences.items() for span in m.spans if span.block == block]

    def targets(self, block: str, stale_s: float) -> list[str]:
        """Workers to command for `block`: those whose map holds it and every live one (a map can lag behind a
        request admitted a moment ago; a worker holding nothing answers with no receipts)."""
        return sorted(set(self.live(stale_s)) | {w for w, _, _ in self.holders(block)})

    def stats(self, worker: str = "") -> KvStats:
        per: dict[str, list[KvSpans]] = defaultdict(list)
        for (w, _), m in self.sequences.items():
            if not worker or w == worker:
                per[w].append(m)
        workers = [KvWorkerStats(worker=w, sequences=len(ms), tokens=sum(m.length for m in ms),
                                 spans=sum(len(m.spans) for m in ms)) for w, ms in sorted(per.items())]
        blocks = {span.block for ms in per.values() for m in ms for span in m.spans}
        return KvStats(workers=workers, blocks=len(blocks), evictions=self.evictions)
