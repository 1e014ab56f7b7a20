"""The engine on the synthetic model: cached decode, batching, stop strings, sampling, scheduling."""

from __future__ import annotations

import numpy as np
import pytest

from fakcore.engine.backend import Segment
from fakcore.engine.loader import load_model, make_backend
from fakcore.engine.prompt import build_prompt
from fakcore.engine.sampling import Sampler
from fakcore.engine.scheduler import Chunk, Overloaded, Scheduler
from fakcore.engine.sequence import Sequence, StopMatcher
from fakcore.protocol import ChatMessage, GenerateRequest, Sampling


@pytest.fixture(scope="module")
def model():
    return load_model("synthetic", make_backend("reference"))


def request(text: str, rid: str = "r", **sampling) -> GenerateRequest:
    sampling.setdefault("temperature", 0.0)
    return GenerateRequest(request_id=rid, model="synthetic", messages=[ChatMessage(role="user", content=text)],
                           sampling=Sampling(**sampling))


def run(model, requests, **kw):
    out: dict[str, list] = {r.request_id: [] for r in requests}
    sched = Scheduler(model, lambda ev: out[ev.seq.request.request_id].append(ev), **kw)
    seqs = [Sequence(request=r, prompt=build_prompt(model, r).ids, cache=model.transformer.new_cache(), model=model) for r in requests]
    for s in seqs:
        sched.submit(s)
    while sched.active or sched.waiting:
        sched.step()
    return seqs, out


def text_of(events) -> str:
    return "".join(e.text for e in events if isinstance(e, Chunk))


def test_cached_decode_equals_full_recompute(model):
    ids = build_prompt(model, request("The quick brown fox jumps")).ids
    tf = model.transformer
    full = tf.forward(np.array(ids), [Segment(tf.new_cache(), slice(0, len(ids)))])
    cache = tf.new_cache()
    tf.forward(np.array(ids[:4]), [Segment(cache, slice(0, 4))])
    step = np.stack([tf.forward(np.array([t]), [Segment(cache, slice(0, 1))])[0] for t in ids[4:]])
    np.testing.assert_allclose(step, full[4:], atol=1e-4, rtol=0)
    assert (step.argmax(-1) == full[4:].argmax(-1)).all()


def test_weights_are_deterministic(model):
    again = load_model("synthetic", make_backend("reference"))
    assert again.weights_digest == model.weights_digest


def test_batched_generation_equals_one_at_a_time(model):
    reqs = [request(f"prompt number {i} " * (i + 1), rid=f"r{i}", max_tokens=10) for i in range(5)]
    _, together = run(model, reqs, max_sessions=5, prefill_chunk=16)
    for r in reqs:
        _, alone = run(model, [r], max_sessions=1)
        assert text_of(together[r.request_id]) == text_of(alone[r.request_id])


def test_queueing_beyond_max_sessions_and_overload(model):
    reqs = [request("x", rid=f"r{i}", max_tokens=3) for i in range(4)]
    seqs, out = run(model, reqs, max_sessions=2, max_queue=2)
    assert all(s.finish_reason == "length" and len(s.generated) == 3 for s in seqs)
    sched = Scheduler(model, lambda *a: None, max_sessions=1, max_queue=1)
    mk = lambda r: Sequence(request=r, prompt=build_prompt(model, r).ids, cache=model.transformer.new_cache(), model=model)  # noqa: E731
    sched.submit(mk(reqs[0]))
    sched.step()  # r0 becomes active
    sched.submit(mk(reqs[1]))  # queued
    with pytest.raises(Overloaded):
        sched.submit(mk(reqs[2]))


def test_cancel_drops_a_sequence(model):
    sched = Scheduler(model, lambda *a: None, max_sessions=2)
    r = request("cancel me", max_tokens=50)
    seq = Sequence(request=r, prompt=build_prompt(model, r).ids, cache=model.transformer.new_cache(), model=model)
    sched.submit(seq)
    sched.step()
    assert sched.active == [seq]
    sched.cancel(r.request_id)
    sched.step()
    assert sched.active == [] and not sched.waiting


def test_stop_matcher_holds_back_prefixes_and_cuts_at_first_match():
    m = StopMatcher(["END", "xy"])
    assert m.push("abcE") == ("abc", False)
    assert m.push("N") == ("", False)
    assert m.push("Dtail") == ("", True) and m.matched == "END"
    m = StopMatcher(["xy"])
    assert m.push("ax") == ("a", False)
    assert m.push("b") == ("xb", False)
    assert m.flush() == ""


def test_stop_string_through_the_engine(model):
    r = request("Hello", max_tokens=30)
    [seq], out = run(model, [r])
    full = text_of(out["r"])
    stop = full[6:8]
    [seq2], out2 = run(model, [request("Hello", max_tokens=30, stop=[stop])])
    assert seq2.finish_reason == "stop" and seq2.stops.matched == stop
    assert text_of(out2["r"]) == full[: full.index(stop)]


def test_sampler_greedy_seeded_top_k_top_p():
    logits = np.array([0.0, 3.0, 1.0, 2.0, -1.0], np.float32)
    assert Sampler(Sampling(temperature=0))(logits) == 1
    draws = lambda p: [Sampler(p)(logits) for _ in range(1)]  # noqa: E731
    assert draws(Sampling(temperature=1.0, seed=5)) == draws(Sampling(temperature=1.0, seed=5))
    s = Sampler(Sampling(temperature=5.0, top_k=2, seed=1))
    assert {s(logits) for _ in range(200)} <= {1, 3}
    s = Sampler(Sampling(temperature=1.0, top_p=0.5, seed=1))
    assert {s(logits) for _ in range(200)} == {1}
    allowed = np.array([True, False, True, False, False])
    assert Sampler(Sampling(temperature=0))(logits, allowed) == 2


def test_context_length_is_enforced_in_the_scheduler(model):
    r = request("x", max_tokens=10_000)
    seq = Sequence(request=r, prompt=build_prompt(model, r).ids, cache=model.transformer.new_cache(), model=model)
    object.__setattr__(model.config, "context_length", len(seq.prompt) + 5)
    try:
        [s], _ = run(model, [r])
    finally:
        object.__setattr__(model.config, "context_length", 4096)
    assert s.finish_reason == "length" and len(s.prompt) + len(s.generated) == len(s.prompt) + 5
