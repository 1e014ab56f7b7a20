"""Tool-result screening: detection quality and latency; the gateway's added latency with adjudication.

    python -m bench screening                 quality + latency on fak's own corpus (bench/screening_corpus.py)
    python -m bench screening --train         retrain the model stage on the corpus's training split and
                                              write libs/fakcore/data/screening/ngram-lr.npz
    python -m bench screening --gateway N     also: N chat requests carrying a tool result through a real
                                              topology, adjudication on vs off (added latency per request)
    python -m bench screening --dump FILE     write the labeled corpus as JSON lines
    python -m bench screening --write         also put the report into bench/RESULTS.md
    python -m bench screening --judge         only the judge stage asked (an instruct model on fak's engine),
                                              reported apart: bench/screening_judge.py
    python -m bench screening --probe         only the probe (a linear probe of gemma3-270m's hidden states on
                                              fak's engine), alone and layered: bench/screening_probe.py
                                              (--probe-train fits it; --agentdojo DIR adds AgentDojo)

Quality is measured on the held-out split: whole templates (attack and hard-negative) that the model stage
never saw in training, in eleven languages (the inline rules were written by hand alongside the corpus,
so their numbers on it are optimistic; the held-out split and an independent benchmark are the honest
ones). Printed, for the inline rules, the model stage and the Screener (both): TPR and FPR at the
configured thresholds, TPR at 1% FPR (the model's threshold moved until 1% of the held-out negatives
pass it; for the Screener with the inline rules at theirs), by language, carrier, style and form with 95%
Wilson intervals; FPR on all negatives and on hard negatives; latency p50/p99 per tool result by length
(up to 512, 1k, 4k characters) per layer (reveal, rules, model, the three together, and the Screener as the
gateway calls it), CPU time and wall, on clean and on all held-out outputs, on the CPU named in the output,
with a line saying whether the issue-14 target (p99 <= 5 ms at 4k, the inline layers together) is met.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import statistics
import sys
import time
from collections import defaultdict

import numpy as np

from bench import screening_corpus as corpus

ENCODED = {"unicode_tags", "base64", "hex"}  # forms whose visible text is no sentence (the decoded layer is)


def _pct(xs, q: float) -> float:
    return float(np.percentile(np.asarray(xs), q)) if len(xs) else float("nan")


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson score interval of a proportion k/n."""
    if n == 0:
        return float("nan"), float("nan")
    p = k / n
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return c - h, c + h


def tpr_at_fpr(scores: list[float], labels: list[int], fpr: float = 0.01) -> tuple[float, float]:
    """(TPR, threshold) at the lowest threshold whose false-positive rate is <= fpr."""
    s = np.asarray(scores)
    y = np.asarray(labels)
    neg = np.sort(s[y == 0])[::-1]
    k = int(np.floor(fpr * len(neg)))  # negatives allowed at or above the threshold
    thr = np.nextafter(neg[k], np.inf) if k < len(neg) else -np.inf  # strictly above the (k+1)-th highest negative
    return float((s[y == 1] >= thr).mean()), float(thr)


# ---------------------------------------------------------------------------------------------------------
# Training
# ---------------------------------------------------------------------------------------------------------

def _locate(text: str, piece: str) -> tuple[int, int] | None:
    """Where a piece sits in the revealed text (probes from its start, middle and end: YAML folds lines)."""
    n = len(piece)
    for at in (0, max(0, n // 2 - 12), max(0, n - 24)):
        probe = piece[at:at + 24]
        if len(probe) >= 8 and (i := text.find(probe)) >= 0:
            return max(0, i - at), i - at + n
    return None


def training_windows(examples: list) -> tuple[list, list[int]]:
    """Window feature vectors and labels. Positive: each injected piece on its own (its decoded layer for an
    encoded form), the goal alone (a bare instruction is an injection too), and every window of the tool result that holds at least half of a piece (or 80 chars of
    it). Negative: every window of clean and hard-negative results, each hard-negative piece on its own,
    and the windows of injected results that hold none of the injection."""
    from fakcore.screening.model import windows
    from fakcore.screening.normalize import reveal

    rows, labels = [], []
    for e in examples:
        pieces = e.span.split("\n") if e.form == "split" else [e.span] if e.span else []
        for p in pieces + ([e.goal] if e.goal else []):
            ws = windows(p)
            if e.label and e.form in ENCODED:
                ws = [w for w in ws if w[4] > 0] or ws  # the decoded layer's windows
            rows += [w[:2] for w in ws]
            labels += [e.label] * len(ws)
        ws = windows(e.text)
        if not e.label:
            rows += [w[:2] for w in ws]
            labels += [0] * len(ws)
            continue
        if e.form in ENCODED:  # the decoded layer is the injection; the visible text holds an opaque blob
            rows += [w[:2] for w in ws if w[4] > 0]
            labels += [1] * sum(w[4] > 0 for w in ws)
            continue
        text = reveal(e.text).text
        where = [_locate(text, reveal(p).text) for p in pieces]
        if None in where:
            continue
        need = min(0.5 * min(z - a for a, z in where), 80)
        for idx, v, a, b, seg in ws:
            if seg:
                continue  # a decoded layer of the whole text (ROT13): where the injection is in it is unknown
            overlap = max(min(b, z) - max(a, s0) for s0, z in where)
            if overlap >= need or overlap <= 0:
                rows.append((idx, v))
                labels.append(int(overlap > 0))
    return rows, labels


# ---------------------------------------------------------------------------------------------------------
# Real text: the installed packages' documentation
# ---------------------------------------------------------------------------------------------------------
# fak's corpus is synthetic; the documentation of the packages installed beside fak (the npm clients' READMEs,
# the venv's Markdown files: pinned by clients/package-lock.json and the pins of pyproject.toml) is real
# prose, code and configuration written by others, with its imperatives ("run this", "use this when"), and
# no injection. Half of its files (by a hash of the path) calibrate the model's threshold, the other half
# measure the false-positive rate: a check of precision on text nobody wrote for fak.
DOC_GLOBS = ("clients/node_modules/**/README.md", ".venv/lib/python3*/site-packages/**/*.md")
DOC_THRESHOLD_FPR = 0.0025  # of calibration paragraphs the shipped model threshold lets through at most


def real_documents(half: str) -> list[str]:
    """Paragraphs (200-2000 characters) of the installed packages' Markdown, from the `half` ("calibrate"
    or "measure") of the files a hash of their path assigns it; deterministic for the same installs."""
    import glob
    import hashlib

    paras = []
    for pattern in DOC_GLOBS:
        for path in sorted(glob.glob(pattern, recursive=True)):
            side = "calibrate" if hashlib.sha1(path.encode()).digest()[0] % 2 == 0 else "measure"
            if side != half:
                continue
            try:
                text = open(path, encoding="utf-8", errors="ignore").read()
            except OSError:
                continue
            paras += [p for p in re.split(r"\n\s*\n", text) if 200 <= len(p) <= 2000]
    return paras


def calibrated_threshold(model, floor: float) -> float:
    """The model's threshold: `floor` (from fak's validation split) unless the calibration half of the real
    documents needs a stricter one to keep DOC_THRESHOLD_FPR of them below it."""
    docs = real_documents("calibrate")
    if not docs:
        raise SystemExit("no package documentation found to calibrate on: run `make test-deps` first")
    scores = np.array([model.score(p) for p in docs])
    threshold = float(max(floor, np.quantile(scores, 1 - DOC_THRESHOLD_FPR)))
    print(f"calibration on {len(docs)} documentation paragraphs: threshold {threshold:.4f} "
          f"({(scores >= threshold).mean() * 100:.2f}% of them at or above)")
    return threshold


def calibrate(path: str) -> None:
    """Set the shipped model's threshold from the real documents (`--calibrate`), keeping its weights."""
    from pathlib import Path

    from fakcore.screening.model import NgramModel

    model = NgramModel.load(path)
    model.threshold = calibrated_threshold(model, model.threshold)
    model.save(Path(path))


def train_model(out: str) -> None:
    """Fit on 75% of the training split's families, choose the threshold on the other 25% (at least 0.5,
    stricter if their negatives need it for 1% FPR), refit on the whole training split. The test split is
    never looked at."""
    from pathlib import Path

    from fakcore.screening.model import NgramModel, train

    tr, _ = corpus.split(corpus.build())
    fit, val = corpus.split(tr, holdout=0.25, seed=5)
    t0 = time.perf_counter()
    w, b = train(*training_windows(fit))
    probe = NgramModel(w=w, b=b, threshold=0.5)
    neg = np.array([probe.score(e.text) for e in val if not e.label])
    pos = np.array([probe.score(e.text) for e in val if e.label])
    # The class-balanced boundary (0.5) unless validation needs a stricter one (1% of its negatives at or
    # above): fak's corpus is synthetic and narrower than real tool output, so a threshold below 0.5
    # fitted on it does not transfer.
    threshold = float(max(0.5, np.quantile(neg, 0.99)))
    print(f"validation ({len(val)} outputs, unseen families): threshold {threshold:.3f} -> "
          f"TPR {(pos >= threshold).mean() * 100:.2f}%  FPR {(neg >= threshold).mean() * 100:.2f}%")
    rows, labels = training_windows(tr)
    w, b = train(rows, labels)
    model = NgramModel(w=w, b=b, threshold=threshold, version=f"ngram-lr corpus-seed7 train-split windows={len(rows)}")
    model.threshold = calibrated_threshold(model, threshold)
    model.save(Path(out))
    print(f"trained on {len(rows)} windows ({sum(labels)} injected) in {time.perf_counter() - t0:.1f}s; "
          f"threshold {model.threshold:.3f}; wrote {out} ({os.path.getsize(out) / 1e6:.2f} MB)")


# ---------------------------------------------------------------------------------------------------------
# Quality and latency
# ---------------------------------------------------------------------------------------------------------

def _rate(hits: np.ndarray) -> str:
    k, n = int(hits.sum()), len(hits)
    if n == 0:
        return f"{'-':>22s}"
    lo, hi = wilson(k, n)
    return f"{k / n * 100:6.1f}% [{lo * 100:5.1f}, {hi * 100:5.1f}]"


LATENCY_TARGET_MS = 5.0  # issue 14: the synchronous layers' p99 on tool results up to 4k characters
LATENCY_TEXTS = 300  # per pool and length bucket
LATENCY_REPEAT = 3  # runs per text; a text's time is the median of its runs (the machine is shared)


def _latency_texts(pool: list[str], rng: np.random.Generator, n: int = LATENCY_TEXTS) -> dict[str, list[str]]:
    """Outputs of the pool joined and cut to lengths in each bucket (the corpus's own are mostly < 2k)."""
    buckets = {"<=512": (64, 512), "<=1k": (513, 1024), "<=4k": (1025, 4096)}
    out = {}
    for name, (lo, hi) in buckets.items():
        texts = []
        for _ in range(n):
            k = int(rng.integers(lo, hi + 1))
            t = ""
            while len(t) < k:
                t += pool[int(rng.integers(len(pool)))] + "\n"
            texts.append(t[:k])
        out[name] = texts
    return out


def _layer_times(texts: list[str], screener, repeat: int = LATENCY_REPEAT) -> tuple[np.ndarray, np.ndarray]:
    """(CPU, wall) ms per text and layer, each the median of `repeat` runs (passes over all the texts, so
    a burst of load on the shared machine hits one run of many texts, not every run of one). Layers: reveal
    (normalize.py), rules (inline.py, given the revealed text), model (given it too), and `Screener.screen`
    as the gateway calls it (one reveal; the model skipped when the rules quarantine)."""
    from fakcore.screening.inline import screen as inline_screen
    from fakcore.screening.normalize import reveal

    cpu, wall = np.zeros((repeat, len(texts), 4)), np.zeros((repeat, len(texts), 4))
    clock = time.thread_time  # this thread's CPU time: what the other jobs on the machine do not inflate
    for r in range(repeat):
        for i, t in enumerate(texts):
            c0, w0 = clock(), time.perf_counter()
            revealed = reveal(t)
            c1, w1 = clock(), time.perf_counter()
            inline_screen(t, "tool_result", revealed)
            c2, w2 = clock(), time.perf_counter()
            if screener.model:
                screener.model.window_scores(t, revealed)
            c3, w3 = clock(), time.perf_counter()
            screener.screen(t)
            c4, w4 = clock(), time.perf_counter()
            cpu[r, i] = (c1 - c0, c2 - c1, c3 - c2, c4 - c3)
            wall[r, i] = (w1 - w0, w2 - w1, w3 - w2, w4 - w3)
    return np.median(cpu, 0) * 1e3, np.median(wall, 0) * 1e3


def by_group(examples: list, y: np.ndarray, key) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """The examples' indices grouped by key(example), as (group, injected indices, clean indices), the groups
    with the most injected examples first (ties by name): the per-language/carrier/style tables' rows."""
    by = defaultdict(list)
    for i, e in enumerate(examples):
        by[key(e)].append(i)
    rows = []
    for g in sorted(by, key=lambda g: (-sum(y[i] for i in by[g]), g)):
        ix = np.asarray(by[g])
        rows.append((g, ix[y[ix] == 1], ix[y[ix] == 0]))
    return rows


def latency_report(test: list, screener, say) -> None:
    """p50 / p99 per tool result by length, per layer, CPU time and wall, on clean held-out outputs (the
    common case: every rule runs to the end, the model too) and on all of them (injected ones fire rules,
    decode layers, and are the slow tail); then the issue-14 target as a line (met or not)."""
    from bench.engine import machine

    pools = {"clean": [e.text for e in test if not e.label], "all": [e.text for e in test]}
    rng = np.random.default_rng(0)
    for t in _latency_texts(pools["all"], rng, 20)["<=4k"]:
        screener.screen(t)  # warm-up (first-use parsing, numba's cache)
    say("")
    say(f"latency per tool result, ms (p50 / p99 of {LATENCY_TEXTS} texts per row, each the median of {LATENCY_REPEAT} runs), "
        f"{machine()}")
    say("   reveal = normalize.reveal, rules = inline rules on the revealed text, model = the model stage on it, "
        "sync = the three in sequence (the inline layers), screen = Screener.screen (model skipped on an inline quarantine)")
    worst: dict[str, float] = {}
    for pool, texts in pools.items():
        for name, batch in _latency_texts(texts, rng).items():
            cpu, wall = _layer_times(batch, screener)
            for clock, ms in (("cpu", cpu), ("wall", wall)):
                cols = {"reveal": ms[:, 0], "rules": ms[:, 1], "model": ms[:, 2], "sync": ms[:, :3].sum(1), "screen": ms[:, 3]}
                say(f"   {pool:5s} {name:6s} {clock:4s} " + "  ".join(f"{k} {_pct(v, 50):5.2f} / {_pct(v, 99):5.2f}" for k, v in cols.items()))
                if name == "<=4k":
                    worst[clock] = max(worst.get(clock, 0.0), _pct(cols["sync"], 99))
    met = worst["cpu"] <= LATENCY_TARGET_MS
    say(f"target (issue 14): inline layers (reveal + rules + model) p99 <= {LATENCY_TARGET_MS:g} ms at <=4k characters: "
        f"CPU {worst['cpu']:.2f} ms, wall {worst['wall']:.2f} ms (worse pool) -> {'MET' if met else 'NOT MET'} (on CPU time"
        f"{'' if worst['wall'] <= LATENCY_TARGET_MS else '; wall-clock, on this shared machine, is over'})")


def quality_and_latency(write: bool = False) -> None:
    from bench.engine import machine
    from fakcore.screening import Screener
    from fakcore.screening.inline import screen as inline_screen

    _, test = corpus.split(corpus.build())
    screener = Screener()
    lines: list[str] = []
    say = lines.append
    s_inline, s_model, v_inline, v_both = [], [], [], []
    for e in test:
        r = inline_screen(e.text)
        s_inline.append(r.score)
        s_model.append(screener.model.score(e.text) if screener.model else 0.0)
        v_both.append(screener.screen(e.text).quarantine)
    s_inline, s_model = np.asarray(s_inline), np.asarray(s_model)
    v_inline = s_inline >= screener.inline_threshold
    v_model = s_model >= screener.model_threshold
    v_both = np.asarray(v_both)
    y = np.asarray([e.label for e in test])
    hard = np.asarray([e.kind == "hard" for e in test])
    langs_inj = sorted({e.language for e in test if e.label})
    say(f"held-out split: {len(test)} tool results ({int(y.sum())} injected in {len(langs_inj)} languages, {int((y == 0).sum())} clean "
        f"of which {int(hard.sum())} hard negatives); {len({e.family for e in test if e.label})} attack and "
        f"{len({e.family for e in test if e.kind == 'hard'})} hard-negative templates unseen in training")
    say(f"machine: {machine()}; model {screener.model.version if screener.model else 'absent'}")
    # 1% FPR: the model's threshold moved; the Screener keeps the inline rules at theirs and moves the model's
    tpr_m, thr_m = tpr_at_fpr(list(s_model), list(y))
    allowed = int(np.floor(0.01 * (y == 0).sum())) - int((v_inline & (y == 0)).sum())
    neg_model = np.sort(s_model[(y == 0) & ~v_inline])[::-1]
    thr_b = float(np.nextafter(neg_model[allowed], np.inf)) if 0 <= allowed < len(neg_model) else (np.inf if allowed < 0 else -np.inf)
    v_both_1 = v_inline | (s_model >= thr_b)
    v_model_1 = s_model >= thr_m
    say("")
    say(f"{'stage':34s} {'TPR':>22s} {'FPR all':>8s} {'FPR hard':>9s}")
    rows = [(f"inline (>= {screener.inline_threshold})", v_inline), (f"model (>= {screener.model_threshold:.3f}, shipped)", v_model),
            ("Screener (both, configured)", v_both), (f"model at 1% FPR (>= {thr_m:.3f})", v_model_1),
            (f"Screener at 1% FPR (model >= {thr_b:.3f})", v_both_1)]
    for name, v in rows:
        say(f"{name:34s} {_rate(v[y == 1])} {v[y == 0].mean() * 100:7.2f}% {v[hard].mean() * 100:8.2f}%")
    groups = {"language": lambda e: e.language, "carrier": lambda e: e.carrier, "style": lambda e: e.style,
              "form": lambda e: e.form, "render": lambda e: e.render}
    for gname, key in groups.items():
        say("")
        say(f"by {gname:10s} {'n':>5s}  {'Screener, configured':>22s}  {'model at 1% FPR':>22s}  {'Screener at 1% FPR':>22s}  "
            f"{'FPR (n neg)':>12s}")
        for g, pos, neg in by_group(test, y, key):
            if len(pos) == 0 and gname in ("style", "form"):
                continue
            fpr = f"{v_both[neg].mean() * 100:5.2f}% ({len(neg)})" if len(neg) else "-"
            say(f"   {g:14s} {len(pos):5d}  {_rate(v_both[pos])}  {_rate(v_model_1[pos])}  {_rate(v_both_1[pos])}  {fpr:>12s}")
    latency_report(test, screener, say)
    missed = defaultdict(int)
    flagged = defaultdict(int)
    for e, v in zip(test, v_both, strict=True):
        if e.label and not v:
            missed[e.family] += 1
        if not e.label and v:
            flagged[e.family] += 1
    say("")
    say("most missed templates (Screener, configured): " + ", ".join(f"{f} ({n})" for f, n in sorted(missed.items(), key=lambda x: -x[1])[:15]))
    say("flagged negative templates (Screener, configured): " + ", ".join(f"{f} ({n})" for f, n in sorted(flagged.items(), key=lambda x: -x[1])[:15]))
    text = "\n".join(lines)
    print(text)
    if write:
        from bench.results import write_section

        path = write_section("# Screening benchmark results", "Written by `python -m bench screening --write`.\n\n```\n" + text + "\n```")
        print(f"wrote {path}")


def gateway_overhead(n: int) -> None:
    """Chat requests carrying a tool result, through a real topology: adjudication off, on with a new
    tool result each time (screened, verdict barrier), on with a repeated one (verdict from the cache)."""
    import tempfile
    from pathlib import Path

    import openai

    from bench.gateway import free_port
    from fakcore.launcher import Topology
    from fakcore.settings import Settings

    def chat(client: openai.OpenAI, result: str) -> float:
        msgs = [{"role": "user", "content": "What is the weather?"},
                {"role": "assistant", "tool_calls": [{"id": "call_1", "type": "function",
                                                      "function": {"name": "get_weather", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "call_1", "content": result}]
        t = time.perf_counter()
        client.chat.completions.create(model="synthetic", messages=msgs, max_tokens=4, temperature=0)
        return (time.perf_counter() - t) * 1e3

    results: dict[str, list[float]] = {}
    for mode in ("off", "on"):
        settings = Settings.load(env={}, port=free_port(), announce_interval_s=0.2, adjudicate=mode == "on",
                                 data_dir=tempfile.mkdtemp(prefix="fak-bench-"))
        topo = Topology(settings, log_dir=Path(tempfile.mkdtemp(prefix="fak-bench-logs-"))).start()
        try:
            client = openai.OpenAI(base_url=topo.gateway_url + "/v1", api_key="-", max_retries=0)
            for i in range(3):
                chat(client, f"warm-up {i}")
            results[mode] = [chat(client, f"Sunny, {i % 30} degrees, request {i} {mode}") for i in range(n)]
            if mode == "on":
                results["on, repeated result"] = [chat(client, "Sunny, 21 degrees (the same result every time)") for _ in range(n)]
                import urllib.request

                with urllib.request.urlopen(topo.gateway_url + "/metrics", timeout=5) as r:
                    metrics = r.read().decode()
                for name in ("fak_gateway_verdict_barrier_seconds", "fak_gateway_screening_seconds"):
                    total = float(re.search(rf"^{name}_sum (\S+)", metrics, re.M).group(1))
                    count = float(re.search(rf"^{name}_count (\S+)", metrics, re.M).group(1))
                    print(f"  {name}: mean {total / max(count, 1) * 1e3:.2f} ms over {count:.0f}")
        finally:
            topo.stop()
    print(f"gateway: {n} chat requests per row, each carrying one tool result (synthetic model, 4 tokens):")
    for name, ts in results.items():
        print(f"  adjudication {name:20s} p50 {statistics.median(ts):7.2f} ms   p99 {_pct(ts, 99):7.2f} ms")
    for name in ("on", "on, repeated result"):
        print(f"  added ({name}): p50 {statistics.median(results[name]) - statistics.median(results['off']):+.2f} ms")


def documents_fpr() -> None:
    """False positives on the measuring half of the real documents, by stage."""
    from fakcore.screening import Screener
    from fakcore.screening.inline import screen as inline_screen

    docs = real_documents("measure")
    screener = Screener()
    inline = sum(inline_screen(p).score >= screener.inline_threshold for p in docs)
    model = sum(screener.model_stage(p).quarantine for p in docs)
    both = sum(screener.screen(p).quarantine for p in docs)
    n = max(1, len(docs))
    print(f"real documentation ({len(docs)} paragraphs of installed packages' Markdown, never trained or calibrated on): "
          f"flagged inline {inline} ({inline / n * 100:.2f}%), model {model} ({model / n * 100:.2f}%), "
          f"both {both} ({both / n * 100:.2f}%)")


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench screening")
    ap.add_argument("--train", action="store_true", help="retrain the model stage and write its weights")
    ap.add_argument("--out", default="libs/fakcore/data/screening/ngram-lr.npz")
    ap.add_argument("--gateway", type=int, default=0, metavar="N", help="also measure the gateway with N requests")
    ap.add_argument("--dump", metavar="FILE", help="write the labeled corpus as JSON lines and exit")
    ap.add_argument("--write", action="store_true", help="also put the quality and latency report into bench/RESULTS.md")
    ap.add_argument("--calibrate", action="store_true", help="reset the shipped model's threshold on real documentation")
    ap.add_argument("--judge", action="store_true", help="only the judge stage: calibrate on the training split, measure held out")
    ap.add_argument("--judge-n", type=int, default=100, metavar="N", help="judge: texts per class and split")
    ap.add_argument("--probe", action="store_true", help="only the probe: measured on the held-out split")
    ap.add_argument("--probe-train", action="store_true", help="fit the probe's head on the training split and write it")
    ap.add_argument("--probe-n", type=int, default=0, metavar="N", help="probe: tool results of the split read (0: all)")
    ap.add_argument("--agentdojo", default="", metavar="DIR", help="probe: also AgentDojo's records (the unpacked package)")
    args = ap.parse_args(argv)
    if args.probe or args.probe_train:
        from bench import screening_probe

        if args.probe_train:
            screening_probe.train(args.probe_n or screening_probe.TRAIN_N)
        if args.probe:
            screening_probe.report(args.probe_n, args.agentdojo)
        return 0
    if args.judge:
        from bench.screening_judge import judge_report

        judge_report(args.judge_n)
        return 0
    if args.dump:
        corpus.dump(args.dump, corpus.build())
        return 0
    if args.train:
        train_model(args.out)
    elif args.calibrate:
        calibrate(args.out)
    quality_and_latency(args.write)
    documents_fpr()
    if args.gateway:
        gateway_overhead(args.gateway)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
