"""The span map: which worker holds which content block in which cached sequence, at which positions.

Pure state, fed by `fak.v1.kv.spans` messages; the service answers stats from it and (with the KV-MMU
issue) finds the spans a quarantine verdict must evict.
"""

from __future__ import annotations

from collections import defaultdict

from fakcore.protocol import KvSpans, KvStats, KvWorkerStats, Span


class SpanMap:
    def __init__(self) -> None:
        self.sequences: dict[tuple[str, str], KvSpans] = {}  # (worker, sequence) -> latest span map
        self.evictions = 0

    def update(self, msg: KvSpans) -> None:
        key = (msg.worker, msg.sequence)
        if msg.dropped:
            self.sequences.pop(key, None)
        else:
            self.sequences[key] = msg

    def holders(self, block: str) -> list[tuple[str, str, Span]]:
        """Every (worker, sequence, span) holding `block`."""
        return [(w, s, span) for (w, s), m in self.sequences.items() for span in m.spans if span.block == block]

    def stats(self, worker: str = "") -> KvStats:
        per: dict[str, list[KvSpans]] = defaultdict(list)
        for (w, _), m in self.sequences.items():
            if not worker or w == worker:
                per[w].append(m)
        workers = [KvWorkerStats(worker=w, sequences=len(ms), tokens=sum(m.length for m in ms),
                                 spans=sum(len(m.spans) for m in ms)) for w, ms in sorted(per.items())]
        blocks = {span.block for ms in per.values() for m in ms for span in m.spans}
        return KvStats(workers=workers, blocks=len(blocks), evictions=self.evictions)
