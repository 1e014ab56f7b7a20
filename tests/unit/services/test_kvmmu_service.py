"""The kvmmu's message handlers (handlers.py) and its consumers (main.py) without a bus: fake workers answer
the eviction commands, a fake publish records the receipts, fake JetStream messages record ack/nak/term."""

from __future__ import annotations

from types import SimpleNamespace

from fak_kvmmu.handlers import HANDLERS, MAX_DELIVER, Deps, on_announce, on_spans, on_stats, on_verdict
from fak_kvmmu.main import KvmmuMetrics, evict_on_bus, on_message, on_verdict_msg
from fak_kvmmu.spans import SpanMap
from fak_kvmmu.verdicts import WorkerGone
from fakcore import bus
from fakcore.metrics import Metrics
from fakcore.protocol import (
    Announce,
    Decoders,
    ErrorCode,
    GenerateError,
    KvEvict,
    KvEvicted,
    KvEvictReply,
    KvSpans,
    KvStats,
    KvStatsRequest,
    QuarantineVerdict,
    Span,
    encode,
    encode_signed,
    subjects,
)
from fakcore.settings import Settings

KEY = "test-verdict-key"


class Fakes:
    """Workers that hold block "bad" (w1 evicts it, w2 is gone, w3 fails while `w3_fails`), receipts published."""

    def __init__(self, mode: str = "exact"):
        self.commands: list[tuple[str, KvEvict]] = []
        self.published: list[tuple[str, bytes]] = []
        self.w3_fails = True
        self.metrics = Metrics("test")
        self.deps = Deps(settings=Settings(kv_evict_mode=mode, verdict_key=KEY), spans=SpanMap(), evict=self.evict,
                         publish=self.publish, metrics=KvmmuMetrics(SimpleNamespace(metrics=self.metrics)))

    async def evict(self, worker: str, command: KvEvict) -> KvEvictReply:
        self.commands.append((worker, command))
        if worker == "w2":
            raise WorkerGone(worker)
        if worker == "w3" and self.w3_fails:
            raise TimeoutError("no reply")
        return KvEvictReply(worker=worker, receipts=[KvEvicted(worker=worker, sequence="s", blocks=command.blocks,
                                                              mode=command.mode, tokens_before=40, tokens_after=32)])

    async def publish(self, subject: str, payload: bytes) -> None:
        self.published.append((subject, payload))

    def count(self, name: str, **labels: str) -> float:
        return self.metrics.registry.get_sample_value(f"fak_{name}", labels) or 0.0

    def hold(self, *workers: str, block: str = "bad") -> None:
        for w in workers:
            on_spans(self.deps, KvSpans(worker=w, sequence="s", length=40, spans=[Span(block=block, start=8, end=16)]))


VERDICT = QuarantineVerdict(block="bad", detector="instruction_override", score=0.95, request_id="q1")


def test_every_subscribed_message_type_has_its_handler():
    assert HANDLERS == {KvSpans: on_spans, Announce: on_announce, KvStatsRequest: on_stats}


def test_span_maps_and_heartbeats_feed_the_map_the_gauges_and_the_stats():
    f = Fakes()
    f.hold("w1", "w2")
    on_spans(f.deps, KvSpans(worker="w2", sequence="s2", length=10, spans=[Span(block="ok", start=0, end=4)]))
    on_announce(f.deps, Announce(worker="w9", model="m", engine="fak-cpu", backend="numpy", device="cpu", weights_digest="d",
                                 context_length=2048, capacity=4, active=0, queued=0))
    assert set(f.deps.spans.workers) == {"w1", "w2", "w9"}
    assert f.count("kvmmu_span_updates_total") == 3 and f.count("kvmmu_sequences") == 3 and f.count("kvmmu_blocks") == 2
    assert f.deps.health["sequences"] == 3
    st = on_stats(f.deps, KvStatsRequest(worker="w2"))
    assert isinstance(st, KvStats) and [(w.worker, w.sequences, w.tokens, w.spans) for w in st.workers] == [("w2", 2, 50, 2)]
    assert [w.worker for w in on_stats(f.deps, KvStatsRequest()).workers] == ["w1", "w2"]


async def test_a_verdict_evicts_on_every_holder_publishes_receipts_and_retries_a_failed_worker():
    f = Fakes(mode="shift")
    f.hold("w1", "w2", "w3")
    assert await on_verdict(f.deps, VERDICT, delivered=1) == "retry"  # w3 failed: redeliver the verdict
    assert [w for w, _ in f.commands] == ["w1", "w2", "w3"]
    assert all(c == KvEvict(blocks=["bad"], mode="shift", cause="verdict", request_id="q1") for _, c in f.commands)
    ((subject, payload),) = f.published
    receipt = Decoders.kv_evicted.decode(payload)
    assert subject == subjects.KV_EVICTED and (receipt.worker, receipt.blocks, receipt.mode) == ("w1", ["bad"], "shift")
    assert "w2" not in f.deps.spans.workers  # gone: its caches went with it
    assert f.count("kvmmu_verdicts_total", outcome="retry") == 1 and f.count("kvmmu_evictions_total", mode="shift") == 1
    assert f.count("kvmmu_evicted_tokens_total") == 8

    f.w3_fails, f.commands = False, []
    assert await on_verdict(f.deps, VERDICT, delivered=2) == "ack"
    assert sorted(w for w, _ in f.commands) == ["w1", "w3"]  # w2 is no longer commanded
    assert f.count("kvmmu_verdicts_total", outcome="applied") == 1 and f.deps.health["evictions"] == 3


async def test_a_verdict_still_failing_on_its_last_delivery_is_given_up():
    f = Fakes()
    f.hold("w3")
    assert await on_verdict(f.deps, VERDICT, delivered=MAX_DELIVER) == "ack"
    assert f.published == [] and f.count("kvmmu_verdicts_total", outcome="failed") == 1


class JsMsg:
    """A JetStream message as nats.py delivers it; records what the consumer did with it."""

    def __init__(self, data: bytes, delivered: int = 1):
        self.data, self.done = data, []
        self.metadata = SimpleNamespace(num_delivered=delivered, sequence=SimpleNamespace(stream=7))

    async def ack(self) -> None:
        self.done.append("ack")

    async def nak(self, delay: float | None = None) -> None:
        self.done.append("nak")

    async def term(self) -> None:
        self.done.append("term")


async def test_the_verdict_consumer_checks_the_signature_then_acks_naks_or_drops():
    f = Fakes()
    f.hold("w1")
    unsigned = JsMsg(encode(VERDICT))
    await on_verdict_msg(f.deps, unsigned)
    assert unsigned.done == ["term"] and f.commands == [] and f.count("kvmmu_verdicts_total", outcome="unsigned") == 1
    garbage = JsMsg(b"\x93junk")
    await on_verdict_msg(f.deps, garbage)
    assert garbage.done == ["term"] and f.commands == []
    signed = JsMsg(encode_signed(VERDICT, KEY, subjects.QUARANTINE))
    await on_verdict_msg(f.deps, signed)
    assert signed.done == ["ack"] and [w for w, _ in f.commands] == ["w1"] and len(f.published) == 1
    f.hold("w3")
    retried = JsMsg(encode_signed(VERDICT, KEY, subjects.QUARANTINE))
    await on_verdict_msg(f.deps, retried)
    assert retried.done == ["nak"]


class CoreMsg:
    def __init__(self, subject: str, data: bytes, reply: str = ""):
        self.subject, self.data, self.reply, self.replies = subject, data, reply, []

    async def respond(self, data: bytes) -> None:
        self.replies.append(data)


async def test_the_core_consumer_decodes_dispatches_and_answers_requests():
    f = Fakes()
    spans = CoreMsg(subjects.KV_SPANS, encode(KvSpans(worker="w1", sequence="s", length=40, spans=[Span(block="b", start=0, end=2)])))
    await on_message(f.deps, Decoders.kv_spans, spans)
    assert f.deps.spans.holders("b") == [("w1", "s", Span(block="b", start=0, end=2))] and spans.replies == []
    stats = CoreMsg(subjects.KV_STATS, encode(KvStatsRequest()), reply="_INBOX.1")
    await on_message(f.deps, Decoders.kvmmu_request, stats)
    reply = Decoders.kvmmu_reply.decode(stats.replies[0])
    assert isinstance(reply, KvStats) and reply.blocks == 1 and reply.workers[0].worker == "w1"
    bad = CoreMsg(subjects.KV_STATS, b"\x93junk", reply="_INBOX.2")
    await on_message(f.deps, Decoders.kvmmu_request, bad)
    error = Decoders.kvmmu_reply.decode(bad.replies[0])
    assert isinstance(error, GenerateError) and error.code == ErrorCode.INVALID
    await on_message(f.deps, Decoders.announce, CoreMsg(subjects.ANNOUNCE, b"\x93junk"))  # skipped quietly


async def test_eviction_over_the_bus_tells_a_gone_worker_from_a_failing_one(monkeypatch):
    answers = {"w1": KvEvictReply(worker="w1"), "w3": GenerateError(request_id="q1", code=ErrorCode.INTERNAL, message="boom")}

    async def request(nc, subject, payload, decoder, timeout):
        worker = subject.split(".")[3]
        if worker not in answers:
            raise bus.NoResponders(subject)
        return answers[worker]

    monkeypatch.setattr(bus, "request", request)
    command = KvEvict(blocks=["bad"], mode="exact", cause="verdict")
    assert await evict_on_bus(None, "w1", command) == KvEvictReply(worker="w1")
    for worker, raised, text in [("w2", WorkerGone, "w2"), ("w3", RuntimeError, "w3: boom")]:
        try:
            await evict_on_bus(None, worker, command)
        except raised as exc:
            assert str(exc) == text
        else:
            raise AssertionError(f"{worker}: no {raised.__name__}")
