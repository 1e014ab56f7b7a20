"""Continuous batching: one thread runs every active sequence of a worker through shared forward passes.

Each step builds one batch: a chunk of prompt for sequences still prefilling (at most `prefill_chunk` tokens
per step, so a long prompt never stalls the streams already decoding) and the newest token of every
decoding sequence. One forward pass reads the weights once for all of them; each sequence keeps its own KV
cache (a Segment of the batch). Finished sequences leave, waiting ones join, at every step:

    step = admit (cancel, join, time out) -> pack (the batch's rows) -> forward -> sample (events out)

Sampling on the device: when the backend samples (Backend.sample) and the transformer can leave its logits
there (`forward(host=False)`), the forward's logits stay on the device and each sequence that needs no host
logits (Sequence.samples_on_device) gets its token from the backend, from its sampler's Draw (the host's
generator, so the choice is the host sampler's); the other rows alone are copied to the host.

Events go to `on_event(event)` from the scheduler thread, one small dataclass each: `Chunk` (text, token
ids, logprobs), `Done`, `Failed` (code, message). The worker hops them onto its event loop.

The scheduler thread is the only one that touches KV caches: a sequence gets its cache from the KV pool
(`kv.acquire`) when it becomes active and hands it back (`kv.give_back`) when it leaves, and other threads
run cache work (evictions, stats) through `call`, between two steps. A held sequence (verdict barrier)
prefills all but its last prompt token and then waits, without a batch row, until `held` is cleared or
`hold_timeout` passes.
"""

from __future__ import annotations

import collections
import concurrent.futures
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fakcore.engine.backend import Segment
from fakcore.engine.kvpool import KVPool
from fakcore.engine.loader import LoadedModel
from fakcore.engine.sequence import Sequence
from fakcore.protocol import ErrorCode, TokenLogprob

log = logging.getLogger("fak.engine.scheduler")

PREFILL_CHUNK = 256  # prompt tokens per step, over every prefilling sequence


# ---------------------------------------------------------------------------------------------------------
# Events (scheduler thread -> the worker)
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Chunk:
    """What one step added to a sequence's output (any part may be empty, not all of them)."""

    seq: Sequence
    text: str  # content text to stream
    token_ids: list[int]  # the tokens sampled
    logprobs: list[TokenLogprob]  # Sampling.logprobs: the tokens whose text is in `text`


@dataclass(frozen=True)
class Done:
    """The sequence finished (seq.finish_reason says why); its cache has been given back."""

    seq: Sequence


@dataclass(frozen=True)
class Failed:
    """The sequence failed; its cache has been given back."""

    seq: Sequence
    code: str  # an ErrorCode
    message: str


Event = Chunk | Done | Failed
EventFn = Callable[[Event], None]


class Overloaded(Exception):
    pass


def samples_on_device(model: LoadedModel) -> bool:
    """The backend samples (Backend.sample): the transformer leaves the logits with it (forward's `host`)."""
    return callable(getattr(model.backend, "sample", None))


@dataclass
class Batch:
    """The rows of one forward pass."""

    tokens: list[int] = field(default_factory=list)  # one per row
    segments: list[Segment] = field(default_factory=list)  # each sequence's rows
    owners: list[Sequence] = field(default_factory=list)  # sequences that get logits this step, in row order
    logit_rows: list[int] = field(default_factory=list)  # the row each owner's logits come from

    def add(self, seq: Sequence, tokens: list[int], *, logits: bool) -> None:
        rows = slice(len(self.tokens), len(self.tokens) + len(tokens))
        self.tokens.extend(tokens)
        self.segments.append(Segment(seq.cache, rows))
        if logits:
            self.owners.append(seq)
            self.logit_rows.append(rows.stop - 1)


class Scheduler:
    def __init__(self, model: LoadedModel, on_event: EventFn, *, kv: KVPool | None = None,
                 on_crash: Callable[[BaseException], None] | None = None, max_sessions: int = 16,
                 max_queue: int = 64, prefill_chunk: int = PREFILL_CHUNK, metrics: Any = None,
                 hold_timeout: float = 30.0, device_sampling: bool | None = None):
        """kv: the worker's KV pool (None: a pool of this scheduler's own; a sequence submitted with its cache
        keeps it either way). on_crash: called if the scheduler thread itself dies (the worker must go).
        device_sampling: None samples on the backend where it can (samples_on_device), False on the host."""
        self.model = model
        self.on_event = on_event
        self.max_sessions = max(1, max_sessions)
        self.max_queue = max(0, max_queue)
        self.prefill_chunk = max(1, prefill_chunk)
        self.kv = kv if kv is not None else KVPool(model.transformer, chunk=self.prefill_chunk)
        self.on_crash = on_crash or (lambda exc: None)
        self.metrics = metrics
        self.hold_timeout = hold_timeout
        self.device_sampling = samples_on_device(model) if device_sampling is None else device_sampling and samples_on_device(model)
        self.waiting: collections.deque[Sequence] = collections.deque()
        self.active: list[Sequence] = []
        self._cancelled: set[str] = set()
        self._cv = threading.Condition()
        self._stop = False
        self._thread: threading.Thread | None = None
        self._calls: collections.deque[tuple[Callable[[], Any], concurrent.futures.Future]] = collections.deque()

    # -- control (any thread) ------------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._supervised, name="fak-scheduler", daemon=True)
        self._thread.start()

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _supervised(self) -> None:
        try:
            if callable(bind := getattr(self.model.backend, "bind", None)):
                bind()  # a backend's per-thread state (numba's thread count, CUDA's current device) for this thread
            self._run()
        except BaseException as exc:  # not a step's fault (those are caught): the loop itself broke
            log.critical("the scheduler loop died", exc_info=exc)
            self.on_crash(exc)
            raise

    def stop(self, timeout: float = 10.0) -> None:
        with self._cv:
            self._stop = True
            self._cv.notify_all()
        if self._thread:
            self._thread.join(timeout)
        with self._cv:  # nobody will run these any more: let their callers go
            for _, future in self._calls:
                future.cancel()
            self._calls.clear()

    def check_room(self) -> None:
        """Raise Overloaded when `max_sessions` are decoding and `max_queue` more are waiting. Counted
        together: between two steps a burst sits in `waiting` before any of it becomes active."""
        if len(self.active) + len(self.waiting) >= self.max_sessions + self.max_queue:
            raise Overloaded(f"worker busy: {len(self.active)} active, {len(self.waiting)} queued "
                             f"(room for {self.max_sessions} + {self.max_queue})")

    def submit(self, seq: Sequence) -> None:
        with self._cv:
            self.check_room()
            if seq.held and not seq.hold_deadline:
                seq.hold_deadline = time.monotonic() + self.hold_timeout
            self.waiting.append(seq)
            self._cv.notify()

    def call(self, fn: Callable[[], Any]) -> concurrent.futures.Future:
        """Run `fn` on the scheduler thread before the next step; its result (or exception) in the future."""
        future: concurrent.futures.Future = concurrent.futures.Future()
        with self._cv:
            if self._stop:
                future.cancel()
            else:
                self._calls.append((fn, future))
                self._cv.notify()
        return future

    def find(self, request_id: str) -> Sequence | None:
        with self._cv:
            return next((s for s in [*self.active, *self.waiting] if s.request.request_id == request_id), None)

    def queued(self) -> list[Sequence]:
        with self._cv:
            return list(self.waiting)

    def cancel(self, request_id: str) -> None:
        with self._cv:
            self._cancelled.add(request_id)
            self._cv.notify()

    @property
    def load(self) -> tuple[int, int]:
        return len(self.active), len(self.waiting)

    # -- the loop (scheduler thread) -----------------------------------------------------------------
    def _runnable(self) -> bool:
        admissible = self.waiting and len(self.active) < self.max_sessions
        return bool(self._calls or admissible or any(not s.held or s.pending_prompt for s in self.active))

    def _hold_wait(self) -> float | None:
        """Seconds until the first held sequence times out (None: nothing is held)."""
        deadlines = [s.hold_deadline for s in [*self.active, *self.waiting] if s.held]
        return max(0.0, min(deadlines) - time.monotonic()) if deadlines else None

    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._stop and not self._runnable():
                    wait = self._hold_wait()
                    if wait is not None and wait <= 0:
                        break
                    self._cv.wait(wait)
                if self._stop:
                    return
            try:
                self.step()
            except Exception:  # a bug must not kill the worker silently: fail what was in flight
                log.exception("forward step failed")
                for seq in list(self.active):
                    self._finish(Failed(seq, ErrorCode.INTERNAL, "engine step failed; see worker log"))

    def _run_calls(self) -> None:
        while True:
            with self._cv:
                if not self._calls:
                    return
                fn, future = self._calls.popleft()
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(fn())
                except BaseException as exc:  # the caller gets it
                    future.set_exception(exc)

    def step(self) -> int:
        """Admit, run one batched forward, hand out tokens. Returns the number of tokens processed."""
        self._run_calls()
        batch = self._pack(self._admit())
        if not batch.tokens:
            return 0
        logits = self._forward(batch)
        if self.device_sampling:
            self._sample_on_device(batch.owners, logits)
        else:
            for seq, row in zip(batch.owners, logits[:len(batch.owners)], strict=True):
                self._sample(seq, row)
        return len(batch.tokens)

    def _admit(self) -> list[Sequence]:
        """Cancelled sequences leave, waiting ones join while there is room, held ones past their deadline
        fail. Returns the sequences that may run this step."""
        now = time.monotonic()
        with self._cv:
            gone = self._take_cancelled()
            expired = [s for s in [*self.active, *self.waiting] if s.held and s.hold_deadline <= now]
            admitted = []
            while self.waiting and len(self.active) < self.max_sessions:
                admitted.append(self.waiting.popleft())
                self.active.append(admitted[-1])
            runnable = [s for s in self.active if s not in expired]
        for seq in gone:
            self.kv.give_back(seq)
        for seq in admitted:
            self.kv.acquire(seq)
        for seq in expired:
            self._expire(seq)
        return runnable

    def _take_cancelled(self) -> list[Sequence]:
        """(Under the lock.) Take the cancelled sequences out of `waiting` and `active`."""
        gone = [s for s in self.waiting if s.request.request_id in self._cancelled]
        for seq in gone:
            self.waiting.remove(seq)
        for seq in [s for s in self.active if s.request.request_id in self._cancelled]:
            self.active.remove(seq)
            gone.append(seq)
        self._cancelled.clear()
        return gone

    def _expire(self, seq: Sequence) -> None:
        with self._cv:
            if seq in self.waiting:
                self.waiting.remove(seq)
        self._finish(Failed(seq, ErrorCode.TIMEOUT, f"verdict barrier: no Release for request {seq.request.request_id} "
                                                    f"within {self.hold_timeout:g}s"))

    def _pack(self, runnable: list[Sequence]) -> Batch:
        """A chunk of prompt for each sequence still prefilling (`prefill_chunk` tokens in all, first come
        first served) and the newest token of each decoding one. A held sequence prefills but gets no logits
        and, once its prompt is in, no row."""
        batch, budget = Batch(), self.prefill_chunk
        for seq in runnable:
            pending = seq.pending_prompt
            if pending and budget > 0:
                take = pending[:budget]
                budget -= len(take)
                batch.add(seq, take, logits=len(take) == len(pending) and not seq.held)
            elif not pending and not seq.held:
                batch.add(seq, [seq.next_input], logits=True)
        return batch

    def _forward(self, batch: Batch) -> Any:
        """One forward pass over the batch: the logits of its owners' rows, in order (left on the device with
        device_sampling)."""
        t0 = time.perf_counter()
        rows = batch.logit_rows or [len(batch.tokens) - 1]  # only held prefill this step: the logits are not used
        on_device = {"host": False} if self.device_sampling else {}
        logits = self.model.transformer.forward(np.asarray(batch.tokens, np.int64), batch.segments,
                                                np.asarray(rows, np.int64), **on_device)
        if self.metrics is not None:
            self.metrics.step(len(batch.tokens), len(batch.owners), time.perf_counter() - t0)
        return logits

    def _sample_on_device(self, owners: list[Sequence], logits: Any) -> None:
        """The owners' tokens from device logits: the backend samples those it can; the rest get their own row
        on the host."""
        be = self.model.backend
        device = [i for i, seq in enumerate(owners) if seq.samples_on_device]
        host = [i for i, seq in enumerate(owners) if not seq.samples_on_device]
        chosen: dict[int, tuple[int, int]] = {}
        if device:
            tokens, status = be.sample(logits, np.asarray(device, np.int64), [owners[i].sampler.draw() for i in device])
            chosen = {i: (int(t), int(st)) for i, t, st in zip(device, tokens, status, strict=True)}
        rows = be.to_host(be.take_rows(logits, np.asarray(host, np.int64))) if host else None
        for i, seq in enumerate(owners):
            if i in chosen:
                self._sample(seq, drawn=chosen[i])
            else:
                self._sample(seq, rows[host.index(i)])

    def _sample(self, seq: Sequence, logits: np.ndarray | None = None, drawn: tuple[int, int] | None = None) -> None:
        """Turn one sequence's logits (or the device's (token, status) for its draw) into its next token and
        events; its own failure fails it alone."""
        try:
            before = len(seq.generated)
            text = seq.accept(logits) if drawn is None else seq.take(seq.sampler.finish_draw(*drawn))
            token_ids = seq.generated[before:]
            logprobs = seq.take_logprobs()
        except Exception as exc:  # this sequence's sampler, grammar or detokenizer: only it fails
            log.exception("sequence %s failed", seq.request.request_id)
            self._finish(Failed(seq, ErrorCode.INTERNAL, f"generation failed: {type(exc).__name__}: {exc}"))
            return
        if text or token_ids or logprobs:
            self.on_event(Chunk(seq, text, token_ids, logprobs))
        if seq.done:
            self._finish(Done(seq))

    def _finish(self, event: Done | Failed) -> None:
        seq = event.seq
        with self._cv:
            if seq in self.active:
                self.active.remove(seq)
        self.kv.give_back(seq)
        self.on_event(event)
