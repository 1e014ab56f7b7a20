"""The engine worker on the bus: the thin translator between NATS and the scheduler.

Subjects (protocol.subjects): generate requests arrive on the model's queue group (any worker of the model)
and on this worker's own subject (session-affine); token counting on the model's count queue group;
screening's judge questions (one token, logprobs: `judge_shaped`) on the model's judge queue group;
cancellations are broadcast. Replies stream to the request's reply inbox: TokenChunk…, then GenerateDone
or GenerateError. The same worker serves engine-cpu and engine-cuda; only the backend differs.

KV memory (engine/kvpool.py): the worker owns its caches. Span maps go to the kvmmu on kv.spans; the
kvmmu commands evictions on this worker's kv.evict and reads kv.stats; kv.sync asks for every map again.
Verdict barrier: a request with `hold` is prefilled but not decoded until a Release (broadcast) names it;
the quarantined blocks it lists are evicted (exact) from that request's cache first, receipts on
kv.evicted. A Release that overtakes its request is kept for `hold_timeout_s`. With FAK_RELEASE_KEY a
Release without the gateway's signature is ignored: the held request waits for the real one (or times out).

The scheduler thread reaches the loop through one outbox, in order: the scheduler's events (Chunk, Done,
Failed) become the request's replies, the KV pool's messages (ToBus) go out on kv.spans / kv.evicted.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import socket
import time
import uuid
from dataclasses import dataclass
from typing import Any

import msgspec
import numpy as np

from fakcore.engine import probe
from fakcore.engine.eviction import MODES
from fakcore.engine.kvpool import KVPool
from fakcore.engine.loader import LoadedModel
from fakcore.engine.prompt import RequestError, build_prompt
from fakcore.engine.sampling import validate_sampling, with_defaults
from fakcore.engine.scheduler import PREFILL_CHUNK, Chunk, Done, Event, Failed, Overloaded, Scheduler
from fakcore.engine.sequence import Sequence, make_grammar
from fakcore.models.sources import FALLBACK_SAMPLING
from fakcore.protocol import (
    Accepted,
    Announce,
    CountTokensReply,
    CountTokensRequest,
    Decoders,
    ErrorCode,
    GenerateDone,
    GenerateError,
    GenerateRequest,
    KvEvicted,
    KvEvictReply,
    KvSpans,
    KvStats,
    ProbeReply,
    Receipt,
    Release,
    TokenChunk,
    Usage,
    encode,
    signed_ok,
    subjects,
)
from fakcore.service import Service
from fakcore.settings import sampling_defaults

log = logging.getLogger("fak.engine")

PROMPT_THREADS = 2  # prompts built at once (render + tokenize); the scheduler thread does the model work


def judge_shaped(req: GenerateRequest) -> bool:
    """A question of screening's judge: one token, its logprobs, a chat prompt, nothing that constrains or holds."""
    s = req.sampling
    return (s.max_tokens == 1 and s.logprobs and req.prompt is None and bool(req.messages) and not req.tools
            and req.response_schema is None and not req.hold and not s.stop)


@dataclass(frozen=True)
class ToBus:
    """A KV-pool message for the kvmmu (a span map or an eviction receipt), from the scheduler thread."""

    msg: KvSpans | KvEvicted


Outgoing = Event | ToBus  # what the reply publisher takes from the outbox


class EngineMetrics:
    def __init__(self, svc: Service, model: str):
        m = svc.metrics
        self.model = model
        self.requests = m.counter("engine_requests_total", "Generate requests by outcome", ("model", "outcome"))
        self.tokens = m.counter("engine_tokens_total", "Tokens processed", ("model", "kind"))
        self.latency = m.histogram("engine_request_seconds", "Request time from arrival to done", ("model",))
        self.ttft = m.histogram("engine_time_to_first_token_seconds", "Arrival to first sampled token", ("model",))
        self.step_seconds = m.histogram("engine_step_seconds", "One batched forward pass", ("model",))
        self.batch_rows = m.histogram("engine_batch_tokens", "Tokens per forward pass", ("model",),
                                      buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512))
        self.active = m.gauge("engine_active_sequences", "Sequences being decoded", ("model",))
        self.queued = m.gauge("engine_queued_requests", "Requests waiting for a slot", ("model",))
        self.tps = m.gauge("engine_tokens_per_second", "Tokens per second of the last forward pass", ("model",))
        self.kv_bytes = m.gauge("engine_kv_bytes", "KV-cache memory held (allocated)", ("model",))
        self.kv_budget = m.gauge("engine_kv_budget_bytes", "KV-cache budget (FAK_KV_BUDGET)", ("model",))
        self.kv_sequences = m.gauge("engine_kv_sequences", "Cached sequences (in use and idle)", ("model",))
        self.kv_occupancy = m.gauge("engine_kv_occupancy_ratio", "KV memory held / budget", ("model",))
        self.kv_hit_ratio = m.gauge("engine_kv_prefix_hit_ratio", "Share of requests that reused a cached prefix", ("model",))
        self.kv_lookups = m.counter("engine_kv_prefix_lookups_total", "Prefix look-ups by outcome", ("model", "outcome"))
        self.kv_cached = m.counter("engine_kv_cached_tokens_total", "Prompt tokens served from reused prefixes", ("model",))
        self.kv_drops = m.counter("engine_kv_dropped_sequences_total", "Idle sequences dropped to stay under budget", ("model",))
        self.kv_evictions = m.counter("engine_kv_evictions_total", "Span evictions by mode and cause", ("model", "mode", "cause"))
        self.kv_evicted_tokens = m.counter("engine_kv_evicted_tokens_total", "Cached tokens removed by evictions", ("model",))
        self.kv_recomputed = m.counter("engine_kv_recomputed_tokens_total", "Tokens recomputed by exact evictions", ("model",))
        self.kv_evict_seconds = m.histogram("engine_kv_eviction_seconds", "Time of one eviction (without verification)", ("model",))
        self.unsigned = m.counter("engine_unsigned_releases_total", "Releases ignored for a missing or bad signature "
                                  "(FAK_RELEASE_KEY)", ("model",))

    def kv_lookup(self, cached: int) -> None:
        self.kv_lookups.labels(self.model, "hit" if cached else "miss").inc()
        self.kv_cached.labels(self.model).inc(cached)

    def kv_dropped(self) -> None:
        self.kv_drops.labels(self.model).inc()

    def kv_evicted(self, r: KvEvicted) -> None:
        self.kv_evictions.labels(self.model, r.mode, r.cause or "command").inc()
        self.kv_evicted_tokens.labels(self.model).inc(r.tokens_before - r.tokens_after)
        self.kv_recomputed.labels(self.model).inc(r.tokens_recomputed)
        self.kv_evict_seconds.labels(self.model).observe(r.seconds)

    def done(self, seq: Sequence, seconds: float) -> None:
        self.tokens.labels(self.model, "prompt").inc(len(seq.prompt) - seq.cached_tokens)
        self.tokens.labels(self.model, "completion").inc(len(seq.generated))
        self.requests.labels(self.model, "ok").inc()
        self.latency.labels(self.model).observe(seconds)

    def step(self, n_tokens: int, n_logits: int, seconds: float) -> None:
        self.step_seconds.labels(self.model).observe(seconds)
        self.batch_rows.labels(self.model).observe(n_tokens)
        if seconds > 0:
            self.tps.labels(self.model).set(n_tokens / seconds)


class EngineWorker:
    def __init__(self, svc: Service, model: LoadedModel, engine_kind: str):
        self.svc, self.model, self.engine_kind = svc, model, engine_kind
        s = svc.settings
        self.worker_id = s.worker_id or f"{engine_kind}-{socket.gethostname()}-{os.getpid()}"
        self.metrics = EngineMetrics(svc, model.name)
        self.kv = KVPool(model.transformer, worker=self.worker_id, budget=s.kv_budget_bytes, min_prefix=s.kv_min_prefix,
                         chunk=PREFILL_CHUNK, verify=s.kv_verify, publish=self._to_bus, metrics=self.metrics)
        self.scheduler = Scheduler(model, self._on_event, kv=self.kv, on_crash=self._on_crash, max_sessions=s.max_sessions,
                                   max_queue=s.max_queue, prefill_chunk=PREFILL_CHUNK, metrics=self.metrics,
                                   hold_timeout=s.hold_timeout_s)
        self.evict_mode = s.kv_evict_mode
        # for the knobs a request leaves unset: FAK_SAMPLING, else the makers', else conservative (llama.cpp's)
        self.sampling = {**FALLBACK_SAMPLING, **model.sampling, **sampling_defaults(s.sampling)}
        self.receipt = Receipt(engine=engine_kind, worker=self.worker_id, backend=model.backend.name,
                               device=model.backend.device, model=model.name, weights_digest=model.weights_digest,
                               incarnation=uuid.uuid4().hex[:12])
        self._loop: asyncio.AbstractEventLoop | None = None
        self._outbox: asyncio.Queue[Outgoing] = asyncio.Queue()
        self._inflight: dict[str, tuple[str, float]] = {}  # request id -> (reply subject, arrival time)
        self._early: dict[str, tuple[Release, float]] = {}  # Releases that overtook their request
        self._tasks: set[asyncio.Task] = set()
        # Prompts are rendered and tokenized here, off the event loop: a huge conversation must not stall
        # other streams' replies or the heartbeat.
        self._prompts = concurrent.futures.ThreadPoolExecutor(PROMPT_THREADS, thread_name_prefix="fak-prompt")

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        nc, name = self.svc.nc, self.model.name
        queue = subjects.engine_queue(name)
        await nc.subscribe(subjects.generate(name), queue=queue, cb=self._on_generate)
        await nc.subscribe(subjects.worker(self.worker_id, "generate"), cb=self._on_generate)
        await nc.subscribe(subjects.count_tokens(name), queue=queue, cb=self._on_count)
        await nc.subscribe(subjects.judge(name), queue=queue, cb=self._on_judge)
        await nc.subscribe(subjects.probe(name), queue=queue, cb=self._on_probe)
        await nc.subscribe(subjects.CANCEL, cb=self._on_cancel)
        await nc.subscribe(subjects.RELEASE, cb=self._on_release)
        await nc.subscribe(subjects.worker(self.worker_id, "kv.evict"), cb=self._on_kv_evict)
        await nc.subscribe(subjects.worker(self.worker_id, "kv.stats"), cb=self._on_kv_stats)
        await nc.subscribe(subjects.KV_SYNC, cb=self._on_kv_sync)
        self.scheduler.start()
        self.svc.supervise(self._publish_loop(), "the reply publisher")
        self.svc.stack.callback(self.scheduler.stop)
        self.svc.stack.callback(self._prompts.shutdown, wait=False, cancel_futures=True)
        self.svc.heartbeat = self.announce
        self.svc.health_detail.update(model=name, worker=self.worker_id, engine=self.engine_kind,
                                      backend=self.model.backend.name)
        log.info("worker %s serving %s on %s/%s", self.worker_id, name, self.model.backend.name, self.model.backend.device)

    def announce(self) -> Announce:
        active, queued = self.scheduler.load
        self.metrics.active.labels(self.model.name).set(active)
        self.metrics.queued.labels(self.model.name).set(queued)
        kv, name = self.kv, self.model.name
        self.metrics.kv_bytes.labels(name).set(kv.bytes)
        self.metrics.kv_budget.labels(name).set(kv.budget)
        self.metrics.kv_sequences.labels(name).set(len(kv.entries))
        self.metrics.kv_occupancy.labels(name).set(kv.bytes / kv.budget if kv.budget else 0.0)
        self.metrics.kv_hit_ratio.labels(name).set(kv.hits / kv.lookups if kv.lookups else 0.0)
        return Announce(worker=self.worker_id, model=self.model.name, engine=self.engine_kind,
                        backend=self.model.backend.name, device=self.model.backend.device,
                        weights_digest=self.model.weights_digest, context_length=self.model.config.context_length,
                        capacity=self.scheduler.max_sessions, active=active, queued=queued,
                        metrics_url=self.svc.metrics_url, ts=time.time(), queue_limit=self.scheduler.max_queue,
                        incarnation=self.receipt.incarnation, sampling=self.sampling)

    # -- handlers (event loop) -----------------------------------------------------------------------
    async def _on_generate(self, msg: Any) -> None:
        if not msg.reply:
            return
        try:
            req = Decoders.engine_request.decode(msg.data)
        except msgspec.DecodeError as exc:
            await self._reply(msg.reply, GenerateError(request_id="", code=ErrorCode.INVALID, message=f"undecodable request: {exc}"))
            return
        if not isinstance(req, GenerateRequest):
            return
        self._inflight[req.request_id] = (msg.reply, time.monotonic())  # from here on a CancelRequest reaches it
        # A task per request: a subscription's callbacks run one at a time, and building one huge prompt
        # must not hold back the requests behind it.
        task = asyncio.create_task(self._accept(req, msg.reply))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _on_judge(self, msg: Any) -> None:
        """Screening's question (screening/judge.py): served as a generate request, but only in its shape, one
        token with logprobs and nothing that makes a generation, so the bus user that may ask (the
        adjudicator's) gets yes/no answers and no text."""
        try:
            req = Decoders.engine_request.decode(msg.data)
        except msgspec.DecodeError:
            req = None
        if msg.reply and not (isinstance(req, GenerateRequest) and judge_shaped(req)):
            rid = req.request_id if isinstance(req, GenerateRequest) else ""
            await self._reply(msg.reply, GenerateError(request_id=rid, code=ErrorCode.INVALID, message=(
                "the judge subject serves one-token questions only (max_tokens 1, logprobs, messages, no tools, "
                "grammar or hold)")))
            return
        await self._on_generate(msg)

    async def _accept(self, req: GenerateRequest, reply: str) -> None:
        rid = req.request_id
        try:
            self.scheduler.check_room()
            seq = await asyncio.wrap_future(self._prompts.submit(self._admit, req))
            if rid not in self._inflight:  # cancelled (and counted) while its prompt was being built
                return
            self.scheduler.submit(seq)
            early = self._early.pop(rid, None)
            if early is not None and seq.held:
                task = asyncio.create_task(self._lift_hold(early[0]))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
            await self._reply(reply, Accepted(request_id=rid, receipt=self.receipt, queued=self.scheduler.load[1],
                                                  prompt_tokens=len(seq.prompt), held=seq.held))
        except (RequestError, Overloaded) as exc:
            code = exc.code if isinstance(exc, RequestError) else ErrorCode.OVERLOADED
            self._inflight.pop(rid, None)
            self.metrics.requests.labels(self.model.name, code).inc()
            await self._reply(reply, GenerateError(request_id=rid, code=code, message=str(exc)))
        except Exception:  # a bug in handling one request fails that request, never the worker
            log.exception("request %s failed before it was scheduled", rid)
            self._inflight.pop(rid, None)
            self.metrics.requests.labels(self.model.name, ErrorCode.INTERNAL).inc()
            await self._reply(reply, GenerateError(request_id=rid, code=ErrorCode.INTERNAL,
                                                   message="the engine could not prepare this request; see the worker log"))

    def _admit(self, req: GenerateRequest) -> Sequence:
        """Validate, render and tokenize (on a prompt thread): a Sequence ready for the scheduler."""
        ctx = self.model.config.context_length
        req.sampling = with_defaults(req.sampling, self.sampling)
        validate_sampling(req.sampling)
        if len(req.messages) >= ctx:  # every message takes at least one token: no need to render it to know
            raise RequestError(ErrorCode.CONTEXT_LENGTH, f"{len(req.messages)} messages cannot fit in the {ctx}-token "
                                                         f"context of {self.model.name}")
        prompt = build_prompt(self.model, req)
        if not prompt.ids:
            raise RequestError(ErrorCode.INVALID, "the prompt is empty")
        if len(prompt.ids) >= ctx:
            raise RequestError(ErrorCode.CONTEXT_LENGTH, f"prompt is {len(prompt.ids)} tokens; the context of {self.model.name} holds {ctx}")
        return Sequence(request=req, prompt=prompt.ids, cache=None, model=self.model, grammar=make_grammar(self.model, req),
                        spans=prompt.spans, held=req.hold)

    async def _on_count(self, msg: Any) -> None:
        try:
            req = Decoders.engine_request.decode(msg.data)
            if not isinstance(req, CountTokensRequest):
                raise RequestError(ErrorCode.INVALID, "expected CountTokensRequest")
            if len(req.messages) >= self.model.config.context_length:
                raise RequestError(ErrorCode.CONTEXT_LENGTH, f"{len(req.messages)} messages cannot fit in the "
                                                             f"{self.model.config.context_length}-token context of {self.model.name}")
            n = len((await asyncio.wrap_future(self._prompts.submit(build_prompt, self.model, req))).ids)
            await msg.respond(encode(CountTokensReply(input_tokens=n)))
        except RequestError as exc:
            await msg.respond(encode(GenerateError(request_id="", code=exc.code, message=str(exc))))
        except Exception as exc:
            await msg.respond(encode(GenerateError(request_id="", code=ErrorCode.INVALID, message=f"cannot count tokens: {exc}")))

    async def _on_probe(self, msg: Any) -> None:
        """Screening's probe (engine/probe.py): each token's hidden state after a layer, times a direction.
        Tokenized on a prompt thread; each piece's forward on the scheduler thread, between two steps."""
        if not msg.reply:
            return
        rid = ""
        try:
            req = Decoders.probe_request.decode(msg.data)
            rid = req.request_id
            probe.check(self.model, req)
            parts = await asyncio.wrap_future(self._prompts.submit(probe.pieces, self.model, req.text))
            direction = np.asarray(req.direction, np.float32)
            offsets: list[tuple[int, int]] = []
            values: list[float] = []
            for ids, offs in parts:  # a piece a call: a decode step may run between two of them
                got = await asyncio.wrap_future(self.scheduler.call(
                    lambda ids=ids: probe.project(self.model, [ids], req.layer, direction)[0]))
                offsets += offs
                values += got.tolist()
            await msg.respond(encode(ProbeReply(request_id=rid, starts=[a for a, _ in offsets], ends=[b for _, b in offsets],
                                                values=values)))
        except msgspec.DecodeError as exc:
            await msg.respond(encode(GenerateError(request_id=rid, code=ErrorCode.INVALID, message=f"undecodable probe request: {exc}")))
        except probe.ProbeError as exc:
            await msg.respond(encode(GenerateError(request_id=rid, code=exc.code, message=str(exc))))
        except Exception as exc:  # a failed forward: the asker fails closed on it
            log.exception("probe %s failed", rid)
            await msg.respond(encode(GenerateError(request_id=rid, code=ErrorCode.INTERNAL, message=f"the probe failed: {exc}")))

    async def _on_cancel(self, msg: Any) -> None:
        try:
            req = Decoders.cancel.decode(msg.data)
        except msgspec.DecodeError:
            return
        if req.request_id in self._inflight:
            self._inflight.pop(req.request_id, None)
            self.scheduler.cancel(req.request_id)
            self.metrics.requests.labels(self.model.name, "cancelled").inc()

    # -- KV memory: the verdict barrier, kvmmu commands ------------------------------------------------
    async def _on_release(self, msg: Any) -> None:
        if not signed_ok(msg.data, self.svc.settings.release_key, subjects.RELEASE):
            log.error("a Release without a valid signature was ignored")
            self.metrics.unsigned.labels(self.model.name).inc()
            return
        try:
            rel = Decoders.release.decode(msg.data)
        except msgspec.DecodeError:
            return
        if rel.request_id in self._inflight:
            await self._lift_hold(rel)
            return
        now = time.monotonic()  # not here (yet): keep it a while, in case the request itself is still on its way
        for rid in [r for r, (_, t) in self._early.items() if now - t > self.scheduler.hold_timeout]:
            del self._early[rid]
        self._early[rel.request_id] = (rel, now)

    async def _lift_hold(self, rel: Release) -> None:
        """A Release names a held request: evict its quarantined blocks (exact) and let it decode."""

        def on_thread() -> list[KvEvicted]:
            seq = self.scheduler.find(rel.request_id)
            if seq is None or not seq.held:
                return []
            return self.kv.lift_hold(seq, rel.quarantined, rel.request_id)

        try:
            receipts = await asyncio.wrap_future(self.scheduler.call(on_thread))
        except Exception:
            log.exception("release of %s failed", rel.request_id)
            self.scheduler.cancel(rel.request_id)
            entry = self._inflight.pop(rel.request_id, None)
            if entry:
                await self._reply(entry[0], GenerateError(request_id=rel.request_id, code=ErrorCode.INTERNAL,
                                                          message="eviction before decoding failed; see worker log"))
            return
        for r in receipts:
            self.metrics.kv_evicted(r)
            await self._publish(subjects.KV_EVICTED, r)

    async def _on_kv_evict(self, msg: Any) -> None:
        try:
            cmd = Decoders.kv_evict.decode(msg.data)
            mode = cmd.mode or self.evict_mode
            if mode not in MODES:
                raise ValueError(f"unknown eviction mode {mode!r}: expected {' or '.join(MODES)}")
            receipts = await asyncio.wrap_future(self.scheduler.call(
                lambda: self.kv.evict(cmd.blocks, mode, queued=self.scheduler.queued(), cause=cmd.cause,
                                      request_id=cmd.request_id)))
        except Exception as exc:
            log.exception("kv.evict failed")
            await msg.respond(encode(GenerateError(request_id="", code=ErrorCode.INVALID, message=f"cannot evict: {exc}")))
            return
        for r in receipts:
            self.metrics.kv_evicted(r)
        await msg.respond(encode(KvEvictReply(worker=self.worker_id, receipts=receipts)))

    async def _on_kv_stats(self, msg: Any) -> None:
        stats = await asyncio.wrap_future(self.scheduler.call(self.kv.stats))
        await msg.respond(encode(KvStats(workers=[stats], blocks=len({s.block for m in stats.maps for s in m.spans}),
                                         evictions=stats.evictions)))

    async def _on_kv_sync(self, msg: Any) -> None:
        for m in await asyncio.wrap_future(self.scheduler.call(self.kv.maps)):
            await self._publish(subjects.KV_SPANS, m)

    async def _publish(self, subject: str, msg: Any) -> None:
        try:
            await self.svc.nc.publish(subject, encode(msg))
        except Exception as exc:
            log.warning("cannot publish on %s: %s", subject, exc)

    # -- the scheduler thread -> the loop ------------------------------------------------------------
    def _on_event(self, event: Event) -> None:
        assert self._loop is not None
        self._loop.call_soon_threadsafe(self._outbox.put_nowait, event)

    def _to_bus(self, msg: KvSpans | KvEvicted) -> None:
        """From the KV pool: publish on the loop."""
        assert self._loop is not None
        self._loop.call_soon_threadsafe(self._outbox.put_nowait, ToBus(msg))

    def _on_crash(self, exc: BaseException) -> None:
        self.svc.fail("the scheduler thread died", exc)

    async def _publish_loop(self) -> None:
        while True:
            item = await self._outbox.get()
            try:
                await self._publish_item(item)
            except Exception:  # one event's fault fails that request, never the loop that serves all of them
                log.exception("publishing a %s event failed", type(item).__name__)
                if not isinstance(item, ToBus) and (entry := self._inflight.pop(item.seq.request.request_id, None)):
                    await self._reply(entry[0], GenerateError(request_id=item.seq.request.request_id, code=ErrorCode.INTERNAL,
                                                              message="the engine failed to report this request; see the worker log"))

    async def _publish_item(self, item: Outgoing) -> None:
        match item:
            case ToBus(msg=KvSpans() as msg):
                await self._publish(subjects.KV_SPANS, msg)
            case ToBus(msg=msg):
                await self._publish(subjects.KV_EVICTED, msg)
            case Chunk() | Done() | Failed():
                await self._reply_event(item)

    async def _reply_event(self, event: Event) -> None:
        """A sequence's event as the next message on its request's reply inbox (nothing once cancelled)."""
        seq = event.seq
        rid = seq.request.request_id
        entry = self._inflight.get(rid)
        if entry is None:
            return  # cancelled
        reply, arrived = entry
        name = self.model.name
        msg: TokenChunk | GenerateDone | GenerateError
        match event:
            case Chunk(text=text, token_ids=token_ids, logprobs=logprobs):
                if seq.emitted == 0 and seq.first_token_at:
                    self.metrics.ttft.labels(name).observe(seq.first_token_at - seq.started)
                msg = TokenChunk(request_id=rid, seq=seq.emitted, text=text, token_ids=token_ids, logprobs=logprobs)
            case Done():
                self._inflight.pop(rid, None)
                usage = Usage(prompt_tokens=len(seq.prompt), completion_tokens=len(seq.generated), cached_tokens=seq.cached_tokens)
                msg = GenerateDone(request_id=rid, seq=seq.emitted, finish_reason=seq.finish_reason or "stop", usage=usage,
                                   receipt=self.receipt, stop_sequence=seq.stops.matched, tool_calls=seq.tool_calls)
                self.metrics.done(seq, time.monotonic() - arrived)
            case Failed(code=code, message=message):
                self._inflight.pop(rid, None)
                self.metrics.requests.labels(name, code).inc()
                msg = GenerateError(request_id=rid, code=code, message=message)
        seq.emitted += 1
        await self._reply(reply, msg)

    async def _reply(self, subject: str, msg: Any) -> None:
        try:
            await self.svc.nc.publish(subject, encode(msg))
        except Exception as exc:  # the bus is going away; the gateway will time out and report it
            log.warning("cannot publish reply: %s", exc)
