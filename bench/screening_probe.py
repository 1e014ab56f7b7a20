"""Screening's probe (layer 2 on fak's engine, screening/probe.py): a linear probe of a multilingual model's
hidden states, trained on fak's own corpus and measured apart from the inline and n-gram layers.

    python -m bench screening --probe-train            fit the head on the training split and write
                                                       libs/fakcore/data/screening/probe-gemma3-270m.npz
    python -m bench screening --probe                  measure it on the held-out split
    python -m bench screening --probe --agentdojo DIR  ... and on AgentDojo's records (bench/agentdojo_eval.py)
    --probe-n N                                        tool results of each split read (default: all; training
                                                       on all of them takes ~25 min on 2 cores)

The hidden states are read in-process with the engine's own code (engine/probe.py, Transformer.hidden on the
numba backend, the activation path `auto` picks, pieces of PROBE_CHUNK tokens from their own BOS) and pooled
with the head's own windows (Head.window_scores), so a served probe gives these scores; the latency is the
model's time, without the bus's ~1 ms.

Training (the training split only; nothing of the held-out templates or of AgentDojo): four fifths of its
templates (whole families, by a hash of the name) fit, the other fifth calibrates. Every window of `window`
tokens at `stride` of a fitting tool result is an example, positive when at least half of its tokens are the
injection's, negative when none are (those in between are left out); each injected piece and its goal alone
are positives, each hard-negative piece alone a negative; every window of the calibration half of real
documentation (bench/screening.py's `real_documents`: paragraphs of the installed packages' Markdown, their
imperatives written by no one for fak) is a negative too: without them the probe flagged 26% of the other
half's paragraphs. Features are the window's mean hidden state, standardised; the head is an L2-regularised
logistic regression with balanced class weights, fitted by Newton's method. Its threshold is the lowest
score that lets at most THRESHOLD_FPR of the calibrating templates' negative tool results through (a
result's score is its best window's): templates the fit never saw, as the held-out split's are. The
documentation's measuring half is reported.
"""

from __future__ import annotations

import random
import time
import zlib
from collections import defaultdict

import numpy as np

from bench import screening_corpus as corpus
from bench.screening import (
    ENCODED,
    _locate,
    _pct,
    _rate,
    by_group,
    real_documents,
    tpr_at_fpr,
    wilson,
)

MODEL = "gemma3-270m"
LAYER = 6  # hidden state after this many of the model's 18 layers (of 4, 6, 8, 10, 12 tried: 6 separated best)
WINDOW, STRIDE = 32, 16  # tokens per window, tokens between window starts
LAMBDA = 10.0  # L2 penalty on the standardised features
THRESHOLD_FPR = 0.01  # of the calibration templates' negative tool results the shipped threshold lets through
BATCH_TOKENS = 1024  # tokens read in one forward pass (several texts' pieces)
TRAIN_N = 0  # training-split tool results read by default (0: all 8,607, each with its pieces: ~2M tokens, ~20 min)


class Reader:
    """The engine's probe code in-process: the hidden states a worker would project."""

    def __init__(self, model_ref: str = MODEL, threads: int = 0):
        import fak_engine_cpu.backend  # noqa: F401  registers "numba"
        from fakcore.engine.loader import load_model, make_backend

        self.model = load_model(model_ref, make_backend("numba", threads=threads, activations="auto"))

    def hidden(self, texts: list[str], layer: int) -> list[tuple[np.ndarray, list[tuple[int, int]]]]:
        """Each text's tokens' hidden states after `layer` (T, dim) and their character offsets, its pieces
        read in batches of about BATCH_TOKENS tokens."""
        from fakcore.engine.probe import pieces

        lead = 1 if self.model.tokenizer.bos_id is not None else 0
        parts = [(i, ids, offs) for i, t in enumerate(texts) for ids, offs in pieces(self.model, t)]
        got: dict[int, list[np.ndarray]] = defaultdict(list)
        batch: list[tuple[int, np.ndarray]] = []

        def flush() -> None:
            if not batch:
                return
            for (i, _), h in zip(batch, self.model.transformer.hidden([ids for _, ids in batch], layer), strict=True):
                got[i].append(h[lead:])
            batch.clear()

        for i, ids, _ in parts:
            batch.append((i, ids))
            if sum(len(x) for _, x in batch) >= BATCH_TOKENS:
                flush()
        flush()
        offsets: dict[int, list[tuple[int, int]]] = defaultdict(list)
        for i, _, offs in parts:
            offsets[i] += offs
        dim = self.model.config.dim
        return [(np.concatenate(got[i]) if got[i] else np.zeros((0, dim), np.float32), offsets[i]) for i in range(len(texts))]


def starts(n: int) -> range:
    from fakcore.screening.probe import window_starts

    return window_starts(n, WINDOW, STRIDE)


def window_means(h: np.ndarray) -> np.ndarray:
    """(n_windows, dim): the mean hidden state of each window (Head.window_scores' windows)."""
    return np.stack([h[a:min(len(h), a + WINDOW)].mean(0) for a in starts(len(h))]) if len(h) else np.zeros((0, h.shape[1]))


def _inside(e, text: str, offsets: list[tuple[int, int]]) -> np.ndarray | None:
    """Per token: 1 where it is part of the injection. None when the injection cannot be located."""
    inside = np.zeros(len(offsets))
    if not e.label:
        return inside
    from fakcore.screening.normalize import reveal

    pieces = e.span.split("\n") if e.form == "split" else [e.span]
    where = [_locate(text, reveal(p).text) for p in pieces]
    if None in where:
        return None
    for a, z in where:
        inside[[j for j, (s0, s1) in enumerate(offsets) if s0 < z and s1 > a]] = 1
    return inside


def fit(x: np.ndarray, y: np.ndarray, lam: float = LAMBDA, iters: int = 12) -> tuple[np.ndarray, float]:
    """L2-regularised logistic regression, classes weighted to equal total weight, by Newton's method."""
    n, d = x.shape
    xb = np.hstack([x, np.ones((n, 1))])
    w = np.zeros(d + 1)
    cw = np.where(y == 1, 0.5 / y.mean(), 0.5 / (1 - y.mean()))
    reg = lam * np.eye(d + 1)
    reg[-1, -1] = 0.0  # the bias is not penalised
    for _ in range(iters):
        p = 1.0 / (1.0 + np.exp(-(xb @ w)))
        grad = xb.T @ (cw * (p - y)) + reg @ w
        hess = (xb * (cw * p * (1 - p))[:, None]).T @ xb + reg
        w -= np.linalg.solve(hess, grad)
    return w[:-1], float(w[-1])


def validation(e) -> bool:
    """Whether a training-split example calibrates rather than fits: a fifth of the templates (whole families,
    by a hash of the name, as the held-out split is drawn) and a fifth of the clean examples."""
    fam = e.family.split("+")[-1]
    return zlib.crc32(fam.encode()) % 5 == 0 if fam != "clean" else e.id % 5 == 0


def windows_of(reader: Reader, examples: list, say) -> tuple[list[np.ndarray], list[int], list[int]]:
    """Training windows of tool results (mean hidden state, label, the example's index; pieces alone: -1)."""
    from fakcore.screening.normalize import reveal

    t0 = time.perf_counter()
    texts = [reveal(e.text).text for e in examples]
    feats, labels, owner = [], [], []
    for k in range(0, len(examples), 200):
        chunk = examples[k:k + 200]
        for j, (e, (h, offs)) in enumerate(zip(chunk, reader.hidden(texts[k:k + 200], LAYER), strict=True)):
            inside = _inside(e, texts[k + j], offs)
            if inside is None:
                continue
            for a, m in zip(starts(len(h)), window_means(h), strict=False):
                c = inside[a:a + WINDOW].mean() if len(inside) else 0.0
                if c >= 0.5 or c == 0:
                    feats.append(m)
                    labels.append(int(c >= 0.5))
                    owner.append(k + j)
        alone = [(e, p) for e in chunk for p in ((e.span.split("\n") if e.form == "split" else [e.span] if e.span else [])
                                                 + ([e.goal] if e.goal else []))]
        for (e, _), (h, _) in zip(alone, reader.hidden([reveal(p).text for _, p in alone], LAYER), strict=True):
            for m in window_means(h):
                feats.append(m)
                labels.append(e.label)
                owner.append(-1)
        say(f"  read {k + len(chunk)}/{len(examples)} tool results, {len(feats)} windows, {time.perf_counter() - t0:.0f} s")
    return feats, labels, owner


def train(n: int = TRAIN_N, out: str = "", say=print):
    """Fit on four fifths of the training templates and the calibration half of the documentation (negatives:
    real imperatives no one wrote for fak), set the threshold on the other fifth of the templates."""
    from fakcore.screening.probe import Head, head_path

    rng = random.Random(0)
    train_split, _ = corpus.split(corpus.build())
    rng.shuffle(train_split)
    examples = [e for e in train_split[:n or None] if not (e.label and e.form in ENCODED)]  # an encoded form's text holds no sentence
    fitting = [e for e in examples if not validation(e)]
    calibrating = [e for e in examples if validation(e)]
    reader = Reader()
    feats, labels, _ = windows_of(reader, fitting, say)
    docs = real_documents("calibrate")
    if not docs:
        raise SystemExit("no package documentation found to train on: run `make test-deps` first")
    doc_windows = [m for h, _ in reader.hidden(docs, LAYER) for m in window_means(h)]
    x = np.asarray(feats + doc_windows, np.float64)
    y = np.asarray(labels + [0] * len(doc_windows), np.float64)
    mean, scale = x.mean(0), x.std(0) + 1e-3
    w, b = fit((x - mean) / scale, y)
    direction = (w / scale).astype(np.float32)
    bias = b - float(mean @ (w / scale))
    probe = Head(model=MODEL, weights_digest=reader.model.weights_digest, layer=LAYER, direction=direction, bias=bias,
                 window=WINDOW, stride=STRIDE, threshold=1.0)
    scores = score_texts(reader, probe, [e.text for e in calibrating])
    ys = [e.label for e in calibrating]
    tpr, thr = tpr_at_fpr(scores, ys, THRESHOLD_FPR)
    head = Head(model=MODEL, weights_digest=reader.model.weights_digest, layer=LAYER, direction=direction, bias=bias,
                window=WINDOW, stride=STRIDE, threshold=round(float(thr), 4),
                version=f"probe-{MODEL}-L{LAYER}-w{WINDOW}s{STRIDE}-fit{len(fitting)}+docs{len(docs)}-cal{len(calibrating)}")
    path = out or str(head_path(MODEL))
    head.save(path)
    say(f"head: {int(y.sum())} positive and {int((1 - y).sum())} negative windows ({len(doc_windows)} of them from {len(docs)} "
        f"documentation paragraphs) from {len(fitting)} training tool results; threshold {head.threshold}: "
        f"{THRESHOLD_FPR * 100:.1f}% FPR on {ys.count(0)} negatives of {len(calibrating)} tool results of templates held out "
        f"of the fit, TPR there {tpr * 100:.1f}% of {sum(ys)}; wrote {path}")
    return head


def score_texts(reader: Reader, head, texts: list[str]) -> list[float]:
    """Each text's probe score (its best window's), the texts read in batches."""
    from fakcore.screening.normalize import reveal

    return [max((s for s, _, _ in head.window_scores(offs, h @ head.direction)), default=0.0)
            for h, offs in reader.hidden([reveal(t).text for t in texts], head.layer)]


def latency(reader: Reader, head, texts: list[str], say) -> None:
    """Per tool result read alone, as a worker reads one request: p50/p99 by length."""
    from fakcore.screening.normalize import reveal

    buckets = {"<=512": (0, 512), "<=1k": (513, 1024), "<=4k": (1025, 4096)}
    for name, (lo, hi) in buckets.items():
        xs = [t for t in texts if lo <= len(t) <= hi][:60]
        lat = []
        for t in xs:
            t0 = time.perf_counter()
            (h, offs), = reader.hidden([reveal(t).text], head.layer)
            head.window_scores(offs, h @ head.direction)
            lat.append(time.perf_counter() - t0)
        if lat:
            say(f"  latency {name:>5s} chars (n={len(lat):3d}): p50 {_pct(lat, 50) * 1e3:6.0f} ms   p99 {_pct(lat, 99) * 1e3:6.0f} ms")


def report(n: int = 0, agentdojo: str = "", say=print) -> None:
    from bench.engine import machine
    from fakcore.screening import Screener
    from fakcore.screening.probe import Head, head_path

    head = Head.load(head_path(MODEL))
    reader = Reader()
    if reader.model.weights_digest != head.weights_digest:
        raise SystemExit(f"the shipped head was trained on other {MODEL} weights than these")
    _, test = corpus.split(corpus.build())
    if n:
        test = random.Random(1).sample(test, min(n, len(test)))
    say(f"probe: {head.version}, threshold {head.threshold}; {MODEL} on fak's engine (numba, in-process); machine: {machine()}")
    scores = score_texts(reader, head, [e.text for e in test])
    s, y = np.asarray(scores), np.asarray([e.label for e in test])
    hit = s >= head.threshold
    screener = Screener()
    both = np.asarray([screener.screen(e.text).quarantine for e in test])
    layered = both | hit
    hard = np.asarray([e.kind == "hard" for e in test])
    say(f"held-out split: {len(test)} tool results ({int(y.sum())} injected), templates unseen in training")
    say(f"  {'':34s} {'TPR':>22s} {'FPR all':>8s} {'FPR hard':>9s}")
    tpr1, thr1 = tpr_at_fpr(list(s), list(y), 0.01)
    for name, v in ((f"probe (>= {head.threshold})", hit), ("Screener (inline + n-gram)", both),
                    ("Screener + probe (layered)", layered), (f"probe at 1% FPR (>= {thr1:.4f})", s >= thr1)):
        say(f"  {name:34s} {_rate(v[y == 1])} {v[y == 0].mean() * 100:7.2f}% {v[hard].mean() * 100:8.2f}%")
    for gname, key in (("language", lambda e: e.language), ("carrier", lambda e: e.carrier), ("style", lambda e: e.style),
                       ("form", lambda e: e.form)):
        say(f"  by {gname:10s} {'n':>5s}  {'probe':>22s}  {'Screener':>22s}  {'layered':>22s}  {'FPR layered':>12s}")
        for g, pos, neg in by_group(test, y, key):
            if not len(pos):
                continue
            fpr = f"{layered[neg].mean() * 100:5.2f}% ({len(neg)})" if len(neg) else "-"
            say(f"     {g:14s} {len(pos):5d}  {_rate(hit[pos])}  {_rate(both[pos])}  {_rate(layered[pos])}  {fpr:>12s}")
    docs = real_documents("measure")
    if docs:
        doc_scores = score_texts(reader, head, docs)
        k = int((np.asarray(doc_scores) >= head.threshold).sum())
        say(f"real documentation ({len(docs)} paragraphs of installed packages' Markdown, never trained or calibrated on): "
            f"the probe flags {k} ({k / len(docs) * 100:.2f}%)")
    latency(reader, head, [e.text for e in test], say)
    if agentdojo:
        from bench.agentdojo_eval import records

        rows = records(agentdojo)
        ad = score_texts(reader, head, [r[3] for r in rows])
        ad_s, ad_y = np.asarray(ad), np.asarray([r[2] for r in rows])
        ad_hit = ad_s >= head.threshold
        ad_both = np.asarray([screener.screen(r[3]).quarantine for r in rows])
        ad_layered = ad_hit | ad_both
        say(f"AgentDojo (never trained on): {int(ad_y.sum())} injected, {int((ad_y == 0).sum())} clean records")
        for name, v in (("probe", ad_hit), ("Screener", ad_both), ("Screener + probe", ad_layered)):
            say(f"  {name:18s} TPR {_rate(v[ad_y == 1])}  FPR {_rate(v[ad_y == 0])}")
        for attack in sorted({r[1] for r in rows if r[2]}):
            ix = np.asarray([i for i, r in enumerate(rows) if r[1] == attack])
            say(f"    {attack:24s} n={len(ix):4d}  probe {_rate(ad_hit[ix])}  layered {_rate(ad_layered[ix])}")
    lo, hi = wilson(int(layered[y == 1].sum()), int((y == 1).sum()))
    say(f"summary: layered TPR {layered[y == 1].mean() * 100:.1f}% [{lo * 100:.1f}, {hi * 100:.1f}] at FPR {layered[y == 0].mean() * 100:.2f}%; "
        f"probe alone {hit[y == 1].mean() * 100:.1f}% at {hit[y == 0].mean() * 100:.2f}%")
