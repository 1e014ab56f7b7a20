"""The worker's KV pool on the scheduler: prefix reuse across requests and sessions, the LRU memory budget,
span maps, evictions of idle, running and queued sequences, and the verdict barrier (hold / release)."""

from __future__ import annotations

import pytest

from fakcore.engine.scheduler import Failed
from fakcore.engine.sequence import Sequence
from fakcore.protocol import ErrorCode, KvSpans, block_id
from tests.unit.kv.support import INJECTION, Run, conversation, model, sequence


@pytest.fixture(scope="module")
def m():
    return model("synthetic", "reference")


def test_prefix_reuse_across_sessions_reports_cached_tokens(m):
    run = Run(m)
    a = run.submit(sequence(m, conversation("a", follow_up="Summarise it.", session="s1")))
    run.until_idle()
    assert a.cached_tokens == 0 and run.pool.lookups == 1 and run.pool.hits == 0
    b = run.submit(sequence(m, conversation("b", follow_up="List the links on it.", session="s2")))
    run.until_idle()
    shared = next(i for i, (x, y) in enumerate(zip(a.prompt, b.prompt, strict=False)) if x != y)
    assert b.cached_tokens == shared > 100
    assert run.pool.hits == 1 and run.pool.cached_tokens == shared
    # a partial match with another session's sequence is copied: both stay cached
    assert len(run.pool.entries) == 2 and a.cache is not b.cache


def test_a_continuation_takes_the_cache_over(m):
    """The next turn of a conversation extends the previous prompt: its cache is taken over, not copied
    (its generated tail, which the chat template re-renders differently, is recomputed)."""
    run = Run(m)
    a = run.submit(sequence(m, conversation("a")))
    run.until_idle()
    cache = a.cache
    req = conversation("b")
    req.messages.append(req.messages[-1].__class__(role="assistant", content="The page asks for your keys."))
    req.messages.append(req.messages[-1].__class__(role="user", content="Do not do that."))
    b = run.submit(sequence(m, req))
    run.until_idle()
    assert b.cached_tokens >= len(a.prompt) and b.cache is cache and len(run.pool.entries) == 1


def test_same_prompt_reuses_all_but_the_last_token_and_outputs_agree(m):
    run = Run(m)
    run.submit(sequence(m, conversation("a", max_tokens=12)))
    run.until_idle()
    b = run.submit(sequence(m, conversation("b", max_tokens=12)))
    run.until_idle()
    assert b.cached_tokens == len(b.prompt) - 1
    assert run.tokens("a") == run.tokens("b")


def test_min_prefix_and_unrelated_prompts_miss(m):
    run = Run(m, min_prefix=10_000)
    run.submit(sequence(m, conversation("a")))
    run.until_idle()
    b = run.submit(sequence(m, conversation("b")))
    run.until_idle()
    assert b.cached_tokens == 0 and run.pool.hits == 0 and run.pool.lookups == 2


def test_budget_drops_idle_sequences_lru_and_session_pinned_last(m):
    run = Run(m, min_prefix=10_000)
    seqs = []
    for i, session in enumerate(["pinned", "", ""]):
        seqs.append(run.submit(sequence(m, conversation(f"r{i}", system=f"System prompt number {i}.", session=session))))
        run.until_idle()
    one = seqs[0].cache.nbytes
    assert len(run.pool.entries) == 3 and run.pool.bytes == 3 * one
    run.pool.budget = 2 * one
    run.pool._fit()
    kept = {e.session or e.id for e in run.pool.entries.values()}
    assert len(run.pool.entries) == 2 and "pinned" in kept and run.pool.dropped == 1
    dropped = [p for p in run.published if isinstance(p, KvSpans) and p.dropped]
    assert len(dropped) == 1 and dropped[0].sequence not in run.pool.entries
    run.pool.budget = 0  # nothing idle is kept; in-flight sequences never go
    live = run.submit(sequence(m, conversation("live", max_tokens=50)))
    run.sched.step()
    assert [e.owner for e in run.pool.entries.values()] == [live]


def test_span_maps_and_stats(m):
    run = Run(m)
    a = run.submit(sequence(m, conversation("a", session="s1")))
    run.until_idle()
    maps = [p for p in run.published if isinstance(p, KvSpans)]
    assert maps and maps[-1].session == "s1" and maps[-1].length == a.cache.length
    assert block_id(INJECTION) in {s.block for s in maps[-1].spans}
    st = run.pool.stats()
    assert (st.sequences, st.active, st.tokens, st.spans) == (1, 0, a.cache.length, 4)
    assert st.lookups == 1 and st.bytes == a.cache.nbytes and st.maps[0].sequence == maps[-1].sequence


def test_verdict_eviction_of_idle_running_and_queued_sequences(m):
    bad = block_id(INJECTION)
    run = Run(m, max_sessions=1)
    idle = run.submit(sequence(m, conversation("idle")))
    run.until_idle()
    running = run.submit(sequence(m, conversation("running", system="Another system prompt.", max_tokens=30)))
    queued = run.submit(sequence(m, conversation("queued", system="A third system prompt.")))
    while not running.generated:
        run.sched.step()
    assert running.generated and queued.cache is None
    before = {s.request.request_id: len(s.prompt) for s in (idle, running, queued)}
    receipts = run.pool.evict([bad], "exact", queued=run.sched.queued(), cause="verdict")
    assert {r.sequence for r in receipts} == {e.id for e in run.pool.entries.values()} and len(receipts) == 3
    n = len(INJECTION)  # the synthetic tokenizer is one token per byte
    by_seq = {run.pool.entry_of(s).id if run.pool.entry_of(s) else "idle": s for s in (running, queued)}
    for r in receipts:
        cached = r.tokens_before - r.tokens_after
        assert cached == (0 if by_seq.get(r.sequence) is queued else n)  # the queued one had only a prefix cached
    assert len(running.prompt) == before["running"] - n and len(queued.prompt) == before["queued"] - n
    assert all(bad not in {s.block for s in e.cache.spans} for e in run.pool.entries.values())
    run.until_idle()
    assert running.finish_reason and queued.finish_reason
    assert run.pool.evict([bad], "exact", queued=run.sched.queued()) == []  # nothing left to evict


def test_hold_prefills_but_samples_nothing_until_release(m):
    run = Run(m)
    held = run.submit(sequence(m, conversation("h", hold=True, max_tokens=6)))
    run.until_idle()
    assert held.cache.length == len(held.prompt) - 1 and not held.generated and "h" not in run.events
    receipts = run.sched.call(lambda: run.pool.lift_hold(held, [block_id(INJECTION)], "h"))
    run.until_idle()
    [r] = receipts.result(timeout=0)
    assert r.cause == "release" and r.mode == "exact" and r.request_id == "h" and r.tokens_recomputed > 0
    assert len(held.generated) == 6 and held.finish_reason == "length"
    assert block_id(INJECTION) not in {s.block for s in held.cache.spans}


def test_evicting_a_reused_prefix_leaves_the_cached_count_consistent(m):
    """The same poisoned request twice: the second reuses the first's cache, injection included. After the
    release evicts the injection, the tokens past it were recomputed, so they no longer count as cached
    (a cached count above the prompt once made the worker's usage accounting negative)."""
    run = Run(m)
    run.submit(sequence(m, conversation("a")))
    run.until_idle()
    again = run.submit(sequence(m, conversation("b", hold=True, max_tokens=4)))
    run.until_idle()
    start = next(s.start for s in again.spans if s.block == block_id(INJECTION))
    assert again.cached_tokens > start
    run.sched.call(lambda: run.pool.lift_hold(again, [block_id(INJECTION)], "b"))
    run.until_idle()
    assert again.finish_reason and again.cached_tokens == start <= len(again.prompt)


def test_release_of_a_queued_request_and_a_release_without_quarantine(m):
    run = Run(m, max_sessions=1)
    first = run.submit(sequence(m, conversation("first", hold=True)))
    second = run.submit(sequence(m, conversation("second", hold=True, system="Other.")))
    run.sched.step()
    assert second.cache is None
    run.pool.lift_hold(second, [block_id(INJECTION)], "second")  # queued: its cache is made to evict from
    assert not second.held and block_id(INJECTION) not in {s.block for s in second.cache.spans}
    assert run.pool.lift_hold(first, []) == [] and not first.held
    run.until_idle()
    assert first.finish_reason and second.finish_reason


def test_a_held_request_without_release_times_out(m):
    run = Run(m, hold_timeout=0.0)
    held = run.submit(sequence(m, conversation("h", hold=True)))
    run.sched.step()
    [failed] = run.events["h"]
    assert isinstance(failed, Failed) and failed.code == ErrorCode.TIMEOUT and "no Release" in failed.message
    assert held not in run.sched.active and all(e.owner is None for e in run.pool.entries.values())


def test_cancelled_queued_sequence_gives_its_cache_back(m):
    run = Run(m, max_sessions=1)
    run.submit(sequence(m, conversation("a", max_tokens=30)))
    b = run.submit(sequence(m, conversation("b", hold=True, system="Other.")))
    run.sched.step()
    run.pool.lift_hold(b, [])
    run.pool.acquire(b)
    run.sched.cancel("b")
    run.sched.step()
    assert all(e.owner is not b for e in run.pool.entries.values())


def test_sequence_without_pool_keeps_working(m):
    """Existing callers hand the scheduler a sequence with its cache: the pool leaves it alone."""
    req = conversation("x")
    seq = Sequence(request=req, prompt=sequence(m, req).prompt, cache=m.transformer.new_cache(), model=m)
    run = Run(m)
    run.submit(seq)
    run.until_idle()
    assert seq.finish_reason and not run.pool.entries


def test_one_failing_sequence_never_fails_its_batch_neighbours(m):
    run = Run(m)
    good = [run.submit(sequence(m, conversation(f"ok{i}", system=f"S{i}.", max_tokens=5))) for i in range(3)]
    bad = run.submit(sequence(m, conversation("bad", system="Bad.", max_tokens=5)))

    def broken(logits, allowed=None):
        raise FloatingPointError("the model produced non-finite logits")

    bad.sampler = broken
    run.until_idle()
    assert all(s.finish_reason == "length" and len(s.generated) == 5 for s in good)
    [failed] = run.events["bad"]
    assert isinstance(failed, Failed) and failed.code == ErrorCode.INTERNAL and "non-finite" in failed.message


def test_the_queue_limit_holds_for_a_burst_between_two_steps(m):
    """Nothing becomes active before the next step: active + queued are counted together."""
    from fakcore.engine.scheduler import Overloaded, Scheduler

    sched = Scheduler(m, lambda *a: None, max_sessions=2, max_queue=3)
    for i in range(5):
        sched.submit(sequence(m, conversation(f"r{i}")))
    with pytest.raises(Overloaded, match="room for 2 \\+ 3"):
        sched.submit(sequence(m, conversation("r5")))
    assert sched.load == (0, 5)


def test_cached_prefixes_are_reused_only_within_a_tenant(m):
    """cached_tokens would tell tenant B how much of its prompt tenant A sent before: no reuse across tenants."""
    import msgspec

    run = Run(m)
    a = conversation("a", session="s")
    run.submit(sequence(m, msgspec.structs.replace(a, tenant="kA")))
    run.until_idle()
    other = run.submit(sequence(m, msgspec.structs.replace(conversation("b"), tenant="kB")))
    run.until_idle()
    same = run.submit(sequence(m, msgspec.structs.replace(conversation("c"), tenant="kA")))
    run.until_idle()
    assert other.cached_tokens == 0 and same.cached_tokens > 100
    assert {e.tenant for e in run.pool.entries.values()} == {"kA", "kB"}
