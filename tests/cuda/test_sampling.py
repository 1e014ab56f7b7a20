"""The device sampler (engine-cuda/sampler.py) makes engine/sampling.Sampler's choices from device logits.

- greedy rows: the argmax, exactly; sampled rows: the same token as Sampler on the same seed, step after step,
  with the generator left in the same state (every combination of temperature, top_k, top_p; ties; -inf
  logits; rows longer than numpy's 128-element pairwise block; a subset of a batch's rows);
- the top-k select: the k first of the stable order, bit for bit, for every kind of k (1, a power of two and
  either side of one, V - 1) and row (ties across the k-th place, -0.0 beside 0.0, -inf, logits an ulp apart,
  rows of one value, vocabularies not a power of two, indexes of one byte and of two); a top k at or past the
  vocabulary sorts the whole row; sampled rows with a top k choose as Sampler does for every k;
- numpy's pairwise float64 sum, bit for bit, for every length the sampler sums;
- a row of only -inf logits: the argmax and no draw (the generator given back); NaN / +inf: FloatingPointError;
- the scheduler, given a transformer that leaves its logits on the device, samples there (but the rows that
  need host logits) and generates the tokens it generates sampling on the host, seeds and all.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from numba import cuda

from fak_engine_cuda.backend import CudaBackend
from fak_engine_cuda.sampler import RADIX, STACK, bitonic, select_top, sum_pairwise
from fakcore.engine.loader import load_model
from fakcore.engine.reference import ReferenceBackend
from fakcore.engine.sampling import NO_DRAW, NON_FINITE, SAMPLED, Draw, Sampler
from fakcore.engine.scheduler import Scheduler
from fakcore.engine.sequence import Sequence
from fakcore.protocol import GenerateRequest, Sampling
from tests.cuda.support import TINY, cuda_backend, tiny

# (temperature, top_k, top_p): greedy, plain, top-k, nucleus, both, extreme temperatures, k past the vocabulary
SETTINGS = [(0.0, 0, 1.0), (1.0, 1, 1.0), (1.0, 0, 1.0), (0.7, 5, 1.0), (1.3, 0, 0.9), (0.8, 12, 0.6), (1.0, 0, 0.0),
            (100.0, 0, 0.95), (1e-300, 0, 1.0), (0.5, 4000, 0.999999)]
STEPS = 3  # draws per sampler: the generator's stream must stay aligned


def logits_rows(rng, n_rows: int, vocab: int) -> np.ndarray:
    x = (rng.standard_normal((n_rows, vocab)) * rng.uniform(0.5, 6.0, (n_rows, 1))).astype(np.float32)
    x[::3, : vocab // 4] = np.round(x[::3, : vocab // 4])  # ties: the stable order decides
    x[1::4, rng.integers(0, vocab, vocab // 5)] = -np.inf  # masked tokens
    return x


def device_choices(be, logits: np.ndarray, rows: list[int], samplers: list[Sampler]) -> list[int]:
    draws = [s.draw() for s in samplers]
    tokens, status = be.sample(be.cuda.to_device(logits), np.asarray(rows), draws)
    return [s.finish_draw(t, st) for s, t, st in zip(samplers, tokens, status, strict=True)]


@pytest.mark.parametrize("vocab", [48, 37, 300])
def test_device_choices_are_the_samplers_on_the_same_seeds(vocab):
    be = cuda_backend()
    rng = np.random.default_rng(vocab)
    cases = [(t, k, p, seed) for t, k, p in SETTINGS for seed in (1, 2)]
    cpu = [Sampler(Sampling(temperature=t, top_k=k, top_p=p, seed=seed)) for t, k, p, seed in cases]
    dev = [Sampler(Sampling(temperature=t, top_k=k, top_p=p, seed=seed)) for t, k, p, seed in cases]
    for _ in range(STEPS):
        logits = logits_rows(rng, len(cases) + 3, vocab)
        rows = list(rng.permutation(len(cases) + 3)[: len(cases)])  # some rows of the batch, in any order
        want = [s(logits[r]) for s, r in zip(cpu, rows, strict=True)]
        assert device_choices(be, logits, rows, dev) == want
    for a, b in zip(cpu, dev, strict=True):
        assert a.rng.bit_generator.state == b.rng.bit_generator.state


def test_many_random_settings_choose_as_the_sampler():
    be = cuda_backend()
    rng = np.random.default_rng(5)
    vocab, n = 64, 24
    params = [(float(rng.choice([0.0, 0.3, 1.0, 2.0])), int(rng.choice([0, 1, 2, 7, 63, 64, 100])),
               float(rng.choice([1.0, 0.95, 0.5, 0.05])), int(rng.integers(0, 2**63))) for _ in range(n)]
    cpu = [Sampler(Sampling(temperature=t, top_k=k, top_p=p, seed=s)) for t, k, p, s in params]
    dev = [Sampler(Sampling(temperature=t, top_k=k, top_p=p, seed=s)) for t, k, p, s in params]
    logits = logits_rows(rng, n, vocab)
    want = [s(logits[i]) for i, s in enumerate(cpu)]
    assert device_choices(be, logits, list(range(n)), dev) == want
    assert [a.rng.bit_generator.state for a in cpu] == [b.rng.bit_generator.state for b in dev]


@cuda.jit
def _sums(a, lengths, out):
    st_lo = cuda.local.array(STACK, np.int64)
    st_n = cuda.local.array(STACK, np.int64)
    st_phase = cuda.local.array(STACK, np.int32)
    st_left = cuda.local.array(STACK, np.float64)
    for r in range(cuda.grid(1), lengths.shape[0], cuda.gridsize(1)):
        out[r] = sum_pairwise(a, r, lengths[r], st_lo, st_n, st_phase, st_left)


def test_the_pairwise_sum_is_numpys_bit_for_bit():
    rng = np.random.default_rng(9)
    lengths = np.array([1, 2, 7, 8, 9, 15, 16, 127, 128, 129, 130, 136, 255, 256, 257, 300, 513, 1000, 1031])
    a = np.exp(rng.standard_normal((len(lengths), 1031)) * 4)
    out = cuda.device_array(len(lengths), np.float64)
    _sums[2, 1](cuda.to_device(a), cuda.to_device(lengths), out)
    got = out.copy_to_host()
    want = np.array([a[i, :n].sum() for i, n in enumerate(lengths)])
    assert got.tobytes() == want.tobytes()
    naive = np.array([sum(a[i, :n].tolist()) for i, n in enumerate(lengths)])
    assert (naive != want).any()  # (the order matters: a plain loop would not do)


def test_a_row_of_minus_infinity_draws_nothing_and_non_finite_logits_fail():
    be = cuda_backend()
    logits = np.full((3, 40), -np.inf, np.float32)
    logits[1, 7] = np.nan
    logits[2, 3] = np.inf
    cpu, dev = Sampler(Sampling(temperature=1.0, seed=4)), Sampler(Sampling(temperature=1.0, seed=4))
    assert cpu(logits[0]) == 0
    draws = [dev.draw(), Sampler(Sampling(temperature=0.0)).draw(), Sampler(Sampling(temperature=1.0)).draw()]
    tokens, status = be.sample(be.cuda.to_device(logits), np.arange(3), draws)
    assert tokens[0] == 0 and list(status) == [NO_DRAW, NON_FINITE, NON_FINITE]
    assert dev.finish_draw(tokens[0], status[0]) == 0
    assert dev.rng.bit_generator.state == cpu.rng.bit_generator.state  # the draw was given back
    with pytest.raises(FloatingPointError, match="non-finite"):
        dev.finish_draw(tokens[1], status[1])


def top_rows(rng, vocab: int) -> np.ndarray:
    """Rows that put the select's every digit to work: random, rounded (ties, -0.0 beside 0.0), one value (the
    index decides alone), half -inf, an ulp apart (the logit's last byte), tiny of either sign (subnormals)."""
    one = np.full(vocab, 1.5, np.float32)
    zeros = np.where(rng.random(vocab) < 0.5, np.float32(-0.0), np.float32(0.0)).astype(np.float32)
    masked = rng.standard_normal(vocab).astype(np.float32)
    masked[rng.permutation(vocab)[: vocab // 2]] = -np.inf
    ulps = np.nextafter(np.float32(1.0), np.float32(2.0)) - np.float32(1.0)
    apart = (np.float32(1.0) + rng.integers(0, 5, vocab).astype(np.float32) * ulps).astype(np.float32)
    tiny_ = (rng.choice([-1e-40, -0.0, 0.0, 1e-40, 1e-45, -1e-45], vocab)).astype(np.float32)
    return np.stack([rng.standard_normal(vocab).astype(np.float32) * 3, np.round(rng.standard_normal(vocab) * 2),
                     one, zeros, masked, apart, tiny_]).astype(np.float32)


@cuda.jit
def _top(logits, bits, cases, keys, ids, sizes):
    hist = cuda.shared.array(RADIX, np.int32)
    ctl = cuda.shared.array(4, np.int64)
    tid, nt = cuda.threadIdx.x, cuda.blockDim.x
    for c in range(cuda.blockIdx.x, cases.shape[0], cuda.gridDim.x):
        m = select_top(logits, bits, cases[c, 0], cases[c, 1], keys, ids, c, hist, ctl, tid, nt)
        bitonic(keys, ids, c, m, tid, nt)
        if tid == 0:
            sizes[c] = m
        cuda.syncthreads()


@pytest.mark.parametrize("vocab, ks", [(37, [1, 2, 3, 5, 8, 9, 17, 36]), (300, [1, 7, 16, 64, 65, 255, 299])])
def test_the_top_k_select_takes_the_first_k_of_the_stable_order(vocab, ks):
    x = top_rows(np.random.default_rng(vocab), vocab)
    cases = np.array([(r, k) for r in range(len(x)) for k in ks], np.int64)
    width = 1 << (max(ks) - 1).bit_length()
    keys, ids = cuda.device_array((len(cases), width), np.float64), cuda.device_array((len(cases), width), np.int64)
    sizes = cuda.device_array(len(cases), np.int64)
    d = cuda.to_device(x)
    _top[2, 8](d, d.view(np.uint32), cuda.to_device(cases), keys, ids, sizes)
    keys, ids, sizes = keys.copy_to_host(), ids.copy_to_host(), sizes.copy_to_host()
    for c, (r, k) in enumerate(cases):
        m = 1 << (int(k) - 1).bit_length()
        want = np.argsort(-x[r].astype(np.float64), kind="stable")[:k]
        assert sizes[c] == m
        assert list(ids[c, :k]) == list(want), (r, k)
        assert keys[c, :k].tobytes() == x[r, want].astype(np.float64).tobytes()  # (-0.0 stays -0.0)
        assert list(ids[c, k:m]) == list(range(vocab + k, vocab + m)) and (keys[c, k:m] == -np.inf).all()


@pytest.mark.parametrize("vocab", [37, 300])
def test_top_k_rows_choose_as_the_sampler_for_every_k(vocab):
    be = cuda_backend()
    rng = np.random.default_rng(vocab + 1)
    x = top_rows(rng, vocab)
    ks = [2, 3, 8, 9, vocab // 2, vocab - 1, vocab, vocab + 5] if vocab < 64 else [9, vocab // 2, vocab - 1, vocab]
    cases = [(r, float(rng.choice([0.4, 1.0, 3.0])), k, float(rng.choice([1.0, 0.9, 0.3])), seed)
             for r in range(len(x)) for k, seed in zip(ks, rng.integers(0, 2**63, len(ks)), strict=True)]
    cpu = [Sampler(Sampling(temperature=t, top_k=k, top_p=p, seed=int(s))) for _, t, k, p, s in cases]
    dev = [Sampler(Sampling(temperature=t, top_k=k, top_p=p, seed=int(s))) for _, t, k, p, s in cases]
    rows = [r for r, *_ in cases]
    want = [s(x[r]) for s, r in zip(cpu, rows, strict=True)]
    assert device_choices(be, x, rows, dev) == want
    assert [a.rng.bit_generator.state for a in cpu] == [b.rng.bit_generator.state for b in dev]


def test_a_top_k_row_of_non_finite_or_minus_infinity_logits():
    be = cuda_backend()
    logits = np.full((4, 40), -np.inf, np.float32)
    logits[1, 7] = np.nan
    logits[2, 3] = np.inf
    logits[3, [5, 9]] = [1.0, 2.0]  # 2 finite logits, k = 6: four -inf ones (by index) get probability 0
    draws = [Draw(False, 1.0, 5, 1.0, 0.5), Draw(False, 1.0, 5, 1.0, 0.5), Draw(False, 1.0, 5, 0.9, 0.5),
             Draw(False, 1.0, 6, 1.0, 0.9)]
    tokens, status = be.sample(be.cuda.to_device(logits), np.arange(4), draws)
    assert list(status) == [NO_DRAW, NON_FINITE, NON_FINITE, SAMPLED] and tokens[0] == 0
    assert tokens[3] == 5  # probabilities 0.73 (9), 0.27 (5), 0 ...: u = 0.9 falls in 5's


def run(model, requests, *, device_sampling: bool):
    sched = Scheduler(model, lambda event: None, max_sessions=len(requests), device_sampling=device_sampling)
    assert sched.device_sampling == device_sampling
    seqs = [Sequence(request=r, prompt=PROMPT, cache=model.transformer.new_cache(), model=model) for r in requests]
    for s in seqs:
        sched.submit(s)
    while sched.active or sched.waiting:
        sched.step()
    return seqs


PROMPT = [3, 14, 15, 9, 26, 5]


def test_the_scheduler_samples_on_the_device_as_on_the_host():
    plain = dataclasses.replace(load_model("synthetic", ReferenceBackend()), config=TINY, transformer=tiny("cuda"))
    be = plain.transformer.be
    calls = []
    be.sample = lambda logits, rows, draws: calls.append(list(rows)) or CudaBackend.sample(be, logits, rows, draws)
    try:
        requests = [GenerateRequest(request_id=f"r{i}", model="tiny", prompt="-", sampling=Sampling(max_tokens=3, **knobs))
                    for i, knobs in enumerate([dict(temperature=0.9, top_k=20, top_p=0.9, seed=11), dict(temperature=0.0),
                                               dict(temperature=1.0, seed=3, logprobs=True),  # logprobs: a host row
                                               dict(temperature=1.5, top_k=0, top_p=1.0, seed=5)])]
        got = run(plain, requests, device_sampling=True)
        assert calls and all(2 not in rows for rows in calls)  # the logprobs row is sampled on the host
        calls.clear()
        want = run(plain, requests, device_sampling=False)  # every row's logits to the host, the host sampler
        assert not calls
    finally:
        del be.sample
    assert [s.generated for s in got] == [s.generated for s in want]
    assert [len(s.generated) for s in got] == [3, 3, 3, 3]
