"""A worker's KV memory: every cached sequence, prefix reuse across requests and sessions, the memory budget,
and span eviction with receipts (docs/architecture.md §3, §4).

    acquire(seq)    a request gets its cache: the longest cached prefix of its prompt, taken over or copied
    give_back(seq)  the request is done; its cache stays for reuse until the budget needs the room (LRU)
    evict(...)      drop the spans of quarantined blocks from every cache holding them, with a receipt each
                    (engine/eviction.py: exact or shift)
    lift_hold(...)  the verdict barrier opens for a held request: its quarantined blocks go first

Everything here runs on the scheduler thread, the only thread that touches caches (the worker reaches it
through Scheduler.call). Nothing here knows about NATS: bus messages leave through `publish`.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from fakcore.engine.eviction import evict_cache
from fakcore.engine.kvcache import KVCache
from fakcore.engine.transformer import Transformer
from fakcore.protocol import KvEvicted, KvSpans, KvWorkerStats, Span

if TYPE_CHECKING:
    from fakcore.engine.sequence import Sequence

RESERVE_DECODE = 256  # decode room reserved with a new request's cache (more grows by doubling)


@dataclass
class Entry:
    id: str  # the sequence's name on the bus (KvSpans.sequence)
    cache: KVCache
    session: str = ""  # x-fak-session of the request that last used it: such entries are dropped last
    tenant: str = ""  # whose prompts it holds: only that tenant's requests may reuse it (cached_tokens is an oracle)
    owner: Sequence | None = None  # the Sequence using it now; None: idle (reusable, droppable)
    used: float = 0.0  # monotonic time of the last use (LRU)
    prompt_len: int = 0  # how much of it was the last request's prompt (the rest it generated)


def common_prefix(a: list[int], b: list[int], limit: int) -> int:
    n = min(len(a), len(b), limit)
    if n <= 0:
        return 0
    diff = np.flatnonzero(np.asarray(a[:n], np.int64) != np.asarray(b[:n], np.int64))
    return int(diff[0]) if len(diff) else n


class KVPool:
    def __init__(self, tf: Transformer, *, worker: str = "", budget: int = 1 << 30, min_prefix: int = 16,
                 chunk: int = 256, verify: bool = True, publish: Callable[[Any], None] | None = None,
                 metrics: Any = None):
        self.tf = tf
        self.worker = worker
        self.budget = budget
        self.min_prefix = max(1, min_prefix)
        self.chunk = chunk
        self.verify = verify
        self.publish = publish or (lambda msg: None)
        self.metrics = metrics  # optional: kv_lookup(cached_tokens), kv_dropped() (thread-safe counters)
        self.entries: dict[str, Entry] = {}
        # counters (read by the heartbeat thread; plain ints)
        self.bytes = 0
        self.lookups = self.hits = self.cached_tokens = self.evictions = self.dropped = 0

    # -- requests ------------------------------------------------------------------------------------
    def acquire(self, seq: Sequence) -> None:
        """Give `seq` its cache, reusing the longest cached prefix of its prompt (any session's of its own
        tenant: another tenant's cached prefix would tell, through cached_tokens, what that tenant sent).
        A sequence that came with its cache keeps it."""
        if seq.cache is not None:
            return
        session, tenant = seq.request.session, seq.request.tenant
        limit = len(seq.prompt) - 1  # the last prompt token is always computed: it yields the first logits
        # the longest shared prefix (a hybrid model's: cut back to a state checkpoint, KVCache.restorable); on a
        # tie the session's own sequence, then an idle one, then the newest
        candidates = [((n, bool(session) and e.session == session, e.owner is None, e.used), e)
                      for e in self.entries.values()
                      if e.tenant == tenant and (n := e.cache.restorable(common_prefix(e.cache.tokens, seq.prompt, limit)))]
        rank, best = max(candidates, key=lambda c: c[0], default=((0,), None))
        best_len = rank[0]
        self.lookups += 1
        if self.metrics is not None:
            self.metrics.kv_lookup(best_len if best_len >= self.min_prefix else 0)
        room = len(seq.prompt) + min(seq.request.sampling.max_tokens, RESERVE_DECODE)  # grow once, not by doubling
        if best is not None and best_len >= self.min_prefix:
            self.hits += 1
            self.cached_tokens += best_len
            # Take an idle sequence over when nothing another request could want is lost: the new prompt
            # extends its whole prompt (a conversation's next turn) or it is the same session's; else copy.
            mine = best_len >= best.prompt_len or (session and best.session == session)
            if best.owner is None and mine:
                entry = best
                entry.cache.truncate(best_len)
            else:  # copy the shared prefix: the other sequence keeps its cache
                entry = self._new_entry()
                entry.cache.reserve(room)  # before the copy: growing after it allocated and copied the cache again
                entry.cache.copy_prefix(best.cache, best_len)
        else:
            best_len = 0
            entry = self._new_entry()
        entry.owner, entry.session, entry.tenant, entry.used = seq, session, tenant, time.monotonic()
        entry.cache.reserve(room)
        entry.cache.spans = [Span(block=s.block, start=s.start, end=s.end) for s in seq.spans]
        seq.cache, seq.cached_tokens = entry.cache, best_len
        self._fit()
        self.publish(self.span_map(entry))

    def give_back(self, seq: Sequence) -> None:
        """`seq` is finished (done, failed or cancelled): its cache becomes idle, kept while the budget allows.
        A cache the pool did not lend (the sequence came with it) is left alone."""
        entry = self.entry_of(seq)
        if entry is None:
            return
        entry.owner, entry.used, entry.prompt_len = None, time.monotonic(), len(seq.prompt)
        self._fit()
        if entry.id in self.entries:
            self.publish(self.span_map(entry))

    def entry_of(self, seq: Sequence) -> Entry | None:
        return next((e for e in self.entries.values() if e.owner is seq), None)

    def _new_entry(self) -> Entry:
        entry = Entry(id=uuid.uuid4().hex[:12], cache=self.tf.new_cache(), used=time.monotonic())
        self.entries[entry.id] = entry
        return entry

    def _fit(self) -> None:
        """Discard idle sequences, least recently used first and session-pinned ones last, until under budget."""
        self.bytes = sum(e.cache.nbytes for e in self.entries.values())
        idle = sorted((e for e in self.entries.values() if e.owner is None), key=lambda e: (bool(e.session), e.used))
        for e in idle:
            if self.bytes <= self.budget:
                break
            self.discard(e.id)

    def discard(self, entry_id: str) -> None:
        """Forget an idle sequence and its cache (the memory goes back; its spans are announced gone)."""
        e = self.entries.pop(entry_id)
        self.bytes -= e.cache.nbytes
        self.dropped += 1
        if self.metrics is not None:
            self.metrics.kv_dropped()
        self.publish(KvSpans(worker=self.worker, sequence=e.id, session=e.session, dropped=True))

    # -- eviction ------------------------------------------------------------------------------------
    def evict(self, blocks: Iterable[str], mode: str = "exact", *, queued: Iterable[Sequence] = (),
              only: Sequence | None = None, cause: str = "", request_id: str = "") -> list[KvEvicted]:
        """Evict every span of `blocks` from the caches holding them: all of them, or only `only`'s (a
        Sequence). Queued sequences (no cache yet) whose prompt holds a block get their cache first, so their
        prompt loses the block too. In-flight sequences lose the block from their remaining prompt as well."""
        blocks = set(blocks)
        for seq in [only] if only is not None else queued:
            if seq.cache is None and (seq is only or any(s.block in blocks for s in seq.spans)):
                self.acquire(seq)
        targets = [self.entry_of(only)] if only is not None else list(self.entries.values())
        receipts = []
        for e in targets:
            if e is None:
                continue
            ranges = e.cache.ranges_of(blocks)
            if not ranges:
                continue
            r = evict_cache(self.tf, e.cache, ranges, mode, chunk=self.chunk, verify=self.verify)
            if e.owner is not None:
                e.owner.drop_prompt(ranges)
                # what followed the first evicted position was recomputed: it no longer came from the cache
                e.owner.cached_tokens = min(e.owner.cached_tokens, ranges[0][0])
            e.prompt_len -= sum(max(0, min(end, e.prompt_len) - start) for start, end in ranges)
            r.worker, r.sequence, r.session, r.cause, r.request_id = self.worker, e.id, e.session, cause, request_id
            receipts.append(r)
            self.evictions += 1
            self.publish(self.span_map(e))
        self._fit()
        return receipts

    def lift_hold(self, seq: Sequence, quarantined: Iterable[str], request_id: str = "") -> list[KvEvicted]:
        """The verdict barrier opens for `seq` (a Release named it): evict the quarantined blocks from its own
        cache (exact: the cache then equals one that never saw them) and let it decode."""
        quarantined = list(quarantined)
        receipts = self.evict(quarantined, "exact", only=seq, cause="release", request_id=request_id) if quarantined else []
        seq.held = False
        return receipts

    # -- views ---------------------------------------------------------------------------------------
    def span_map(self, e: Entry) -> KvSpans:
        return KvSpans(worker=self.worker, sequence=e.id, session=e.session, length=e.cache.length,
                       spans=list(e.cache.spans))

    def maps(self) -> list[KvSpans]:
        return [self.span_map(e) for e in self.entries.values()]

    def stats(self, with_maps: bool = True) -> KvWorkerStats:
        entries = list(self.entries.values())
        return KvWorkerStats(worker=self.worker, sequences=len(entries), tokens=sum(e.cache.length for e in entries),
                             spans=sum(len(e.cache.spans) for e in entries), bytes=self.bytes, budget=self.budget,
                             active=sum(e.owner is not None for e in entries), lookups=self.lookups, hits=self.hits,
                             cached_tokens=self.cached_tokens, evictions=self.evictions, dropped=self.dropped,
                             maps=[self.span_map(e) for e in entries] if with_maps else [])
