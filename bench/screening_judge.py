"""Screening's judge stage (layer 3): an instruct model asked whether a tool result holds instructions aimed
at the assistant, reported apart from the inline and n-gram layers.

    python -m bench screening --judge                  calibrate on the training split, measure on the held-out one
    python -m bench screening --judge --judge-n 150    texts per class and split (default 100)

The judge runs here in-process, on the numba backend with the engine worker's own prompt and scoring
(screening/judge.py: `question`, `windows`, `yes_share`; the top-20 logprobs as the worker reports them),
so the scores equal the bus path's; the latency is the model's time, without the bus's ~1 ms.

Calibration: the threshold is the lowest one that lets at most 1% of a sample of the training split's
negatives (clean and hard) through; measured on a sample of the held-out split (whole templates unseen in
training): TPR and FPR at that threshold with 95% Wilson intervals, the injections the inline rules and
the n-gram model both miss and the judge catches, and latency p50/p99 per tool result by length.
"""

from __future__ import annotations

import random
import time

import numpy as np

from bench import screening_corpus as corpus
from bench.screening import _pct, _rate, tpr_at_fpr, wilson


class InProcessJudge:
    """The judge's scoring without the bus: the worker's prompt, one forward pass, the reported top-20."""

    def __init__(self, model_ref: str = "smollm2-135m", threads: int = 0):
        import fak_engine_cpu.backend  # noqa: F401  registers "numba"
        from fakcore.engine.loader import load_model, make_backend

        self.model = load_model(model_ref, make_backend("numba", threads=threads))
        self.ref = model_ref

    def ask(self, text: str) -> float:
        from fakcore.engine.backend import Segment
        from fakcore.engine.prompt import build_prompt
        from fakcore.engine.sampling import token_logprobs
        from fakcore.protocol import TokenLogprob
        from fakcore.screening.judge import TOP_LOGPROBS, question, yes_share

        m = self.model
        ids = build_prompt(m, question(self.ref, text)).ids
        tf = m.transformer
        logits = tf.forward(np.array(ids), [Segment(tf.new_cache(), slice(0, len(ids)))], np.array([len(ids) - 1]))[0]
        _, top = token_logprobs(logits, int(np.argmax(logits)), TOP_LOGPROBS)
        share = yes_share([TokenLogprob(id=i, text=m.tokenizer.decode([i]), logprob=lp) for i, lp in top])
        return 0.0 if share is None else share

    def score(self, content: str) -> float:
        from fakcore.screening.judge import windows
        from fakcore.screening.normalize import reveal

        text = reveal(content).text
        return max(self.ask(text[a:b]) for a, b in windows(text)) if text.strip() else 0.0


def _sample(examples: list, n: int, rng: random.Random) -> tuple[list, list]:
    pos = [e for e in examples if e.label]
    neg = [e for e in examples if not e.label]
    return rng.sample(pos, min(n, len(pos))), rng.sample(neg, min(n, len(neg)))


def judge_report(n: int = 100, model_ref: str = "smollm2-135m", train_neg: int = 0) -> list[str]:
    from bench.engine import machine
    from fakcore.screening import Screener

    rng = random.Random(59)
    train, test = corpus.split(corpus.build())
    judge = InProcessJudge(model_ref)
    lines: list[str] = []
    say = lambda s: (lines.append(s), print(s, flush=True))  # noqa: E731  (a long run: show progress)
    say(f"judge stage: {model_ref} on fak's engine (numba, in-process); machine: {machine()}")
    judge.score("warm-up: compile the kernels")

    tr_pos, tr_neg = _sample(train, n, rng)
    tr_neg = tr_neg if not train_neg else rng.sample([e for e in train if not e.label], train_neg)
    s_tr = [judge.score(e.text) for e in tr_pos + tr_neg]
    y_tr = [1] * len(tr_pos) + [0] * len(tr_neg)
    tpr_tr, thr = tpr_at_fpr(s_tr, y_tr, 0.01)
    auc_tr = _auc(s_tr, y_tr)
    say(f"calibration (training split, {len(tr_pos)} injected, {len(tr_neg)} clean+hard): threshold {thr:.4f} at 1% FPR, "
        f"TPR there {tpr_tr * 100:.1f}%, ROC AUC {auc_tr:.3f}")

    te_pos, te_neg = _sample(test, n, rng)
    screener = Screener()
    s_te, lat, lens = [], [], []
    for e in te_pos + te_neg:
        t0 = time.perf_counter()
        s_te.append(judge.score(e.text))
        lat.append(time.perf_counter() - t0)
        lens.append(len(e.text))
    y = np.asarray([1] * len(te_pos) + [0] * len(te_neg))
    hit = np.asarray(s_te) >= thr
    missed = np.asarray([not screener.screen(e.text).quarantine for e in te_pos + te_neg])
    hard = np.asarray([e.kind == "hard" for e in te_pos + te_neg])
    say(f"held-out split ({len(te_pos)} injected, {len(te_neg)} clean+hard, templates unseen in training), threshold {thr:.4f}:")
    say(f"  TPR {_rate(hit[y == 1])}   FPR {_rate(hit[y == 0])}   (hard negatives {_rate(hit[(y == 0) & hard])})   "
        f"ROC AUC {_auc(s_te, list(y)):.3f}")
    tpr_te, thr_te = tpr_at_fpr(s_te, list(y), 0.01)
    say(f"  TPR at 1% FPR with the threshold chosen on this split itself (an upper bound): {tpr_te * 100:.1f}% (threshold {thr_te:.4f})")
    k = int((hit & missed & (y == 1)).sum())
    say(f"  injections inline+n-gram miss: {int((missed & (y == 1)).sum())}; of those the judge catches {k}")
    buckets = {"<=512": (0, 512), "<=1k": (513, 1024), "<=4k": (1025, 4096), ">4k": (4097, 10**9)}
    for name, (lo, hi) in buckets.items():
        xs = [t for t, n_ in zip(lat, lens, strict=True) if lo <= n_ <= hi]
        if xs:
            say(f"  latency {name:>5s} chars (n={len(xs):3d}): p50 {_pct(xs, 50) * 1e3:7.0f} ms   p99 {_pct(xs, 99) * 1e3:7.0f} ms")
    lo, hi = wilson(int(hit[y == 1].sum()), int((y == 1).sum()))
    say(f"summary: TPR {hit[y == 1].mean() * 100:.1f}% [{lo * 100:.1f}, {hi * 100:.1f}] at FPR {hit[y == 0].mean() * 100:.1f}%, "
        f"p50 {_pct(lat, 50) * 1e3:.0f} ms, p99 {_pct(lat, 99) * 1e3:.0f} ms")
    return lines


def _auc(scores: list[float], labels: list[int]) -> float:
    s, y = np.asarray(scores), np.asarray(labels)
    pos, neg = s[y == 1], s[y == 0]
    if not len(pos) or not len(neg):
        return float("nan")
    return float((pos[:, None] > neg[None, :]).mean() + 0.5 * (pos[:, None] == neg[None, :]).mean())
