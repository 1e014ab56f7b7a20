"""Continuous batching: one thread runs every active sequence of a worker through shared forward passes.

Each step builds one batch: a chunk of prompt for sequences still prefilling (at most `prefill_chunk` tokens
per step, so a long prompt never stalls the streams already decoding) and the newest token of every
decoding sequence. One forward pass reads the weights once for all of them; each sequence keeps its own KV
cache (a Segment of the batch). Finished sequences leave, waiting ones join, at every step.

Events go to `on_event(seq, kind, payload)` from the scheduler thread: ("chunk", (text, token_ids)),
("done", None), ("error", (code, message)). The worker hops them onto its event loop.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from fakcore.engine.backend import Segment
from fakcore.engine.loader import LoadedModel
from fakcore.engine.sequence import Sequence
from fakcore.protocol import ErrorCode

log = logging.getLogger("fak.engine.scheduler")

EventFn = Callable[[Sequence, str, Any], None]


class Overloaded(Exception):
    pass


class Scheduler:
    def __init__(self, model: LoadedModel, on_event: EventFn, *, max_sessions: int = 16, max_queue: int = 64,
                 prefill_chunk: int = 256, metrics: Any = None):
        self.model = model
        self.on_event = on_event
        self.max_sessions = max(1, max_sessions)
        self.max_queue = max(0, max_queue)
        self.prefill_chunk = max(1, prefill_chunk)
        self.metrics = metrics
        self.waiting: collections.deque[Sequence] = collections.deque()
        self.active: list[Sequence] = []
        self._cancelled: set[str] = set()
        self._cv = threading.Condition()
        self._stop = False
        self._thread: threading.Thread | None = None
        self.release: Callable[[Sequence], None] = lambda seq: None  # hook: hand the cache back (KV-MMU)

    # -- control (any thread) ------------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="fak-scheduler", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        with self._cv:
            self._stop = True
            self._cv.notify_all()
        if self._thread:
            self._thread.join(timeout)

    def submit(self, seq: Sequence) -> None:
        with self._cv:
            if len(self.active) >= self.max_sessions and len(self.waiting) >= self.max_queue:
                raise Overloaded(f"worker busy: {len(self.active)} active, {len(self.waiting)} queued")
            self.waiting.append(seq)
            self._cv.notify()

    def cancel(self, request_id: str) -> None:
        with self._cv:
            self._cancelled.add(request_id)
            self._cv.notify()

    @property
    def load(self) -> tuple[int, int]:
        return len(self.active), len(self.waiting)

    # -- the loop (scheduler thread) -----------------------------------------------------------------
    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._stop and not self.active and not self.waiting:
                    self._cv.wait()
                if self._stop:
                    return
            try:
                self.step()
            except Exception:  # a bug must not kill the worker silently: fail what was in flight
                log.exception("forward step failed")
                for seq in list(self.active):
                    self._finish(seq, "error", (ErrorCode.INTERNAL, "engine step failed; see worker log"))

    def step(self) -> int:
        """Admit, run one batched forward, hand out tokens. Returns the number of tokens processed."""
        with self._cv:
            for seq in [s for s in self.waiting if s.request.request_id in self._cancelled]:
                self.waiting.remove(seq)
            for seq in [s for s in self.active if s.request.request_id in self._cancelled]:
                self.active.remove(seq)
                self.release(seq)
            self._cancelled.clear()
            while self.waiting and len(self.active) < self.max_sessions:
                self.active.append(self.waiting.popleft())
            batch = list(self.active)
        if not batch:
            return 0

        tokens: list[int] = []
        segments: list[Segment] = []
        owners: list[Sequence] = []  # sequences that get logits this step, in row order
        logit_rows: list[int] = []
        budget = self.prefill_chunk
        for seq in batch:
            pending = seq.pending_prompt
            if pending:
                if budget <= 0:
                    continue
                take = pending[:budget]
                budget -= len(take)
                rows = slice(len(tokens), len(tokens) + len(take))
                tokens.extend(take)
                segments.append(Segment(seq.cache, rows))
                if len(take) == len(pending):
                    owners.append(seq)
                    logit_rows.append(rows.stop - 1)
            else:
                rows = slice(len(tokens), len(tokens) + 1)
                tokens.append(seq.next_input)
                segments.append(Segment(seq.cache, rows))
                owners.append(seq)
                logit_rows.append(rows.stop - 1)
        if not tokens:
            return 0

        t0 = time.perf_counter()
        logits = self.model.transformer.forward(np.asarray(tokens, np.int64), segments, np.asarray(logit_rows, np.int64))
        if self.metrics is not None:
            self.metrics.step(len(tokens), len(owners), time.perf_counter() - t0)
        for seq, row in zip(owners, logits, strict=True):
            before = len(seq.generated)
            text = seq.accept(row)
            token_ids = seq.generated[before:]
            if text or token_ids:
                self.on_event(seq, "chunk", (text, token_ids))
            if seq.done:
                self._finish(seq, "done", None)
        return len(tokens)

    def _finish(self, seq: Sequence, kind: str, payload: Any) -> None:
        with self._cv:
            if seq in self.active:
                self.active.remove(seq)
        self.release(seq)
        self.on_event(seq, kind, payload)
