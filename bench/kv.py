"""KV-MMU costs: exact eviction against a full re-prefill, and time to first token with a prefix hit.

    python -m bench kv [--model smollm2-135m] [--backend numba] [--context 1024] [--span 128] [--reps 3]

Eviction: a `--context`-token cache (random token ids, as llama-bench's prompts are) loses a `--span`-token
span at its start, middle or end. `exact` truncates at the span and recomputes the suffix; `shift` moves
the survivors and re-rotates their keys; `re-prefill` is the alternative without a KV-MMU: prefill the
surviving tokens into an empty cache. Times are medians of --reps: the eviction itself (the receipt's
`seconds`), without the receipt's digests (printed apart) and verification (FAK_KV_VERIFY).

Time to first token: a `--context`-token prompt through the scheduler with a KV pool, cold (empty pool) and
with a hit (a cached sequence shares all but the last 32 tokens), one sampled token each.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np


def _median(fn, reps: int) -> float:
    times = []
    for _ in range(reps):
        times.append(fn())
    return statistics.median(times)


def eviction(model, context: int, span: int, reps: int) -> tuple[list[tuple[str, int, float, float, float]], float]:
    from fakcore.engine.eviction import evict_cache, prefill

    tf = model.transformer
    ids = [int(t) for t in np.random.default_rng(0).integers(0, model.config.vocab_size, context)]
    starts = {"start": 8, "middle": (context - span) // 2, "end": context - span - 8}
    rows, digests = [], []
    for where, s in starts.items():
        survivors = ids[:s] + ids[s + span:]

        def timed(mode: str, s: int = s) -> float:
            cache = tf.new_cache()
            prefill(tf, cache, ids)
            t0 = time.perf_counter()
            r = evict_cache(tf, cache, [(s, s + span)], mode, verify=False)
            digests.append(time.perf_counter() - t0 - r.seconds)
            return r.seconds

        def reprefill(survivors: list[int] = survivors) -> float:
            cache = tf.new_cache()
            t0 = time.perf_counter()
            prefill(tf, cache, survivors)
            return time.perf_counter() - t0

        rows.append((where, len(survivors) - s, _median(lambda: timed("exact"), reps), _median(lambda: timed("shift"), reps),
                     _median(reprefill, reps)))
    return rows, statistics.median(digests)


def ttft(model, context: int, reps: int) -> tuple[float, float, int]:
    from fakcore.engine.kvpool import KVPool
    from fakcore.engine.scheduler import Scheduler
    from fakcore.engine.sequence import Sequence
    from fakcore.protocol import GenerateRequest, Sampling

    rng = np.random.default_rng(1)
    vocab = model.config.vocab_size

    def first_token(pool: KVPool, prompt: list[int]) -> tuple[float, int]:
        sched = Scheduler(model, lambda *a: None, kv=pool)
        req = GenerateRequest(request_id="b", model=model.name, sampling=Sampling(temperature=0.0, max_tokens=1))
        seq = Sequence(request=req, prompt=prompt, cache=None, model=model)
        t0 = time.perf_counter()
        sched.submit(seq)
        while not seq.done:
            sched.step()
        return time.perf_counter() - t0, seq.cached_tokens

    cold, hit, cached = [], [], 0
    for _ in range(reps):
        shared = [int(t) for t in rng.integers(0, vocab, context - 32)]
        a = shared + [int(t) for t in rng.integers(0, vocab, 32)]
        b = shared + [int(t) for t in rng.integers(0, vocab, 32)]
        pool = KVPool(model.transformer, min_prefix=16, verify=False)
        cold.append(first_token(pool, a)[0])
        t, cached = first_token(pool, b)
        hit.append(t)
    return statistics.median(cold), statistics.median(hit), cached


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench kv")
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--backend", default="numba")
    ap.add_argument("--context", type=int, default=1024)
    ap.add_argument("--span", type=int, default=128)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args(argv)
    import fak_engine_cpu.backend  # noqa: F401  registers "numba"
    from fakcore.engine.eviction import prefill
    from fakcore.engine.loader import load_model, make_backend

    model = load_model(args.model, make_backend(args.backend))
    prefill(model.transformer, model.transformer.new_cache(), list(range(40)), 16)  # warm-up: compile every kernel
    print(f"# KV-MMU on {args.model} / {args.backend} (batch-invariant: {model.backend.batch_invariant}); "
          f"{args.context}-token context, {args.span}-token span, median of {args.reps}")
    print("| span at | tokens recomputed | exact evict | shift evict | full re-prefill | exact / re-prefill |")
    print("|---|---|---|---|---|---|")
    rows, digests = eviction(model, args.context, args.span, args.reps)
    for where, recomputed, exact, shift, full in rows:
        print(f"| {where} | {recomputed} | {exact * 1e3:.1f} ms | {shift * 1e3:.1f} ms | {full * 1e3:.1f} ms | {exact / full:.2f} |")
    print(f"\nreceipt digests (sha256 of the K/V before and after): {digests * 1e3:.1f} ms per eviction")
    cold, hit, cached = ttft(model, args.context, args.reps)
    print(f"\ntime to first token, {args.context}-token prompt: cold {cold * 1e3:.1f} ms, prefix hit ({cached} cached tokens) "
          f"{hit * 1e3:.1f} ms: {cold / hit:.1f}x faster")
    return 0
