"""The kvmmu's state and verdict handling without a bus: which workers it commands, what it does with
their answers (receipts, a worker gone, a failure to retry)."""

from __future__ import annotations

from fak_kvmmu.spans import SpanMap
from fak_kvmmu.verdicts import WorkerGone, apply_verdict
from fakcore.protocol import KvEvict, KvEvicted, KvEvictReply, KvSpans, QuarantineVerdict, Span


def test_span_map_targets_holders_and_live_workers():
    spans = SpanMap()
    spans.update(KvSpans(worker="w1", sequence="s1", length=50, spans=[Span(block="bad", start=10, end=20)]))
    spans.update(KvSpans(worker="w2", sequence="s2", length=30, spans=[Span(block="ok", start=0, end=5)]))
    spans.heard("w3", now=0.0)  # heard long ago: stale
    assert spans.holders("bad") == [("w1", "s1", Span(block="bad", start=10, end=20))]
    assert spans.targets("bad", stale_s=5.0) == ["w1", "w2"]
    spans.update(KvSpans(worker="w1", sequence="s1", dropped=True))
    assert spans.holders("bad") == [] and spans.stats().blocks == 1
    st = spans.stats("w2")
    assert [(w.worker, w.sequences, w.tokens, w.spans) for w in st.workers] == [("w2", 1, 30, 1)]


async def test_apply_verdict_collects_receipts_forgets_gone_workers_and_reports_failures():
    spans = SpanMap()
    for w in ("w1", "w2", "w3"):
        spans.update(KvSpans(worker=w, sequence="s", spans=[Span(block="bad", start=0, end=4)]))
    sent: list[tuple[str, KvEvict]] = []

    async def evict(worker: str, cmd: KvEvict) -> KvEvictReply:
        sent.append((worker, cmd))
        if worker == "w2":
            raise WorkerGone(worker)
        if worker == "w3":
            raise TimeoutError("no reply")
        return KvEvictReply(worker=worker, receipts=[KvEvicted(worker=worker, sequence="s", blocks=["bad"])])

    out = await apply_verdict(QuarantineVerdict(block="bad", detector="d", score=1.0, request_id="q1"), spans, evict,
                              mode="shift", stale_s=5.0)
    assert [w for w, _ in sent] == ["w1", "w2", "w3"]
    assert all(c.blocks == ["bad"] and c.mode == "shift" and c.cause == "verdict" and c.request_id == "q1" for _, c in sent)
    assert [r.worker for r in out.receipts] == ["w1"] and list(out.failed) == ["w3"]
    assert "w2" not in spans.workers and all(w != "w2" for w, _ in spans.sequences) and spans.evictions == 1


def test_kv_messages_round_trip():
    from fakcore import protocol as p

    receipt = p.KvEvicted(worker="w", sequence="s", blocks=["b"], spans=[p.Span(block="b", start=3, end=9)], mode="shift",
                          tokens_before=20, tokens_after=14, layer_dev=[0.0, 0.5], max_abs_dev=0.5, note="n")
    stats = p.KvStats(workers=[p.KvWorkerStats(worker="w", sequences=1, tokens=14, spans=0, bytes=10, budget=20, hits=1,
                                               lookups=2, maps=[p.KvSpans(worker="w", sequence="s", length=14)])])
    for msg, decoder in [(p.KvEvict(blocks=["b"], mode="exact", request_id="r"), p.Decoders.kv_evict),
                         (receipt, p.Decoders.kv_evicted), (p.KvEvictReply(worker="w", receipts=[receipt]), p.Decoders.kv_evict_reply),
                         (p.KvSync(reason="start"), p.Decoders.kv_sync), (stats, p.Decoders.kvmmu_reply)]:
        assert decoder.decode(p.encode(msg)) == msg
    old = p.Decoders.kvmmu_reply.decode(p.encode(p.KvStats(workers=[p.KvWorkerStats(worker="w", sequences=0, tokens=0, spans=0)])))
    assert old.workers[0].maps == [] and old.workers[0].budget == 0  # fields added at the end have defaults
