"""Tool-result screening: detection quality and latency; the gateway's added latency with adjudication.

    python -m bench screening                 quality + latency on fak's own corpus (bench/screening_corpus.py)
    python -m bench screening --train         retrain the model stage on the corpus's training split and
                                              write libs/fakcore/data/screening/ngram-lr.npz
    python -m bench screening --gateway N     also: N chat requests carrying a tool result through a real
                                              topology, adjudication on vs off (added latency per request)
    python -m bench screening --dump FILE     write the labeled corpus as JSON lines

Quality is measured on the held-out split: whole attack templates and hard-negative sentences that the
model stage never saw in training (the inline rules were written by hand alongside the corpus, so their
numbers on it are optimistic; the held-out split and an independent benchmark are the honest ones).
Printed: true-positive rate at 1% false-positive rate (ROC over the score), the TPR/FPR at the configured
thresholds, latency p50/p99 per tool result of the inline stage, the model stage, and both.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import time

import numpy as np

from bench import screening_corpus as corpus


def _pct(xs: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(xs), q)) if xs else float("nan")


def tpr_at_fpr(scores: list[float], labels: list[int], fpr: float = 0.01) -> tuple[float, float]:
    """(TPR, threshold) at the lowest threshold whose false-positive rate is <= fpr."""
    s = np.asarray(scores)
    y = np.asarray(labels)
    neg = np.sort(s[y == 0])[::-1]
    k = int(np.floor(fpr * len(neg)))  # negatives allowed at or above the threshold
    thr = np.nextafter(neg[k], np.inf) if k < len(neg) else -np.inf  # strictly above the (k+1)-th highest negative
    return float((s[y == 1] >= thr).mean()), float(thr)


def _chunks(text: str, size: int = 300) -> list[str]:
    return [text[i:i + size] for i in range(0, max(1, len(text)), size // 2)] or [text]


def _windows_of(examples: list) -> tuple[list[str], list[int]]:
    """Training windows: each injected span (positive); chunks of clean outputs and hard-negative spans."""
    texts, labels = [], []
    for e in examples:
        if e.label:
            texts.append(e.span)
            labels.append(1)
        else:
            for c in _chunks(e.text):
                texts.append(c)
                labels.append(0)
            if e.span:
                texts.append(e.span)
                labels.append(0)
    return texts, labels


def train_model(out: str) -> None:
    """Fit on 75% of the training split's families, check the threshold on the other 25% (at least 0.5,
    stricter if their clean outputs need it for 0.5% FPR), refit on the whole training split. The test
    split is never looked at."""
    from pathlib import Path

    from fakcore.screening.model import NgramModel, train, windows

    tr, _ = corpus.split(corpus.build())
    fit, val = corpus.split(tr, holdout=0.25, seed=5)
    t0 = time.perf_counter()
    texts, labels = _windows_of(fit)
    w, b = train([windows(t)[0][:2] if windows(t) else (np.zeros(0, np.int64), np.zeros(0, np.float32)) for t in texts], labels)
    probe = NgramModel(w=w, b=b, threshold=0.5)
    neg = np.array([probe.score(e.text) for e in val if not e.label])
    pos = np.array([probe.score(e.text) for e in val if e.label])
    # The class-balanced boundary (0.5) unless validation needs a stricter one: fak's clean corpus is
    # synthetic and narrower than real tool output, so a threshold below 0.5 fitted on it does not transfer.
    threshold = float(max(0.5, np.quantile(neg, 0.995)))
    print(f"validation ({len(val)} outputs, unseen families): threshold {threshold:.3f} -> "
          f"TPR {(pos >= threshold).mean() * 100:.2f}%  FPR {(neg >= threshold).mean() * 100:.2f}%")
    texts, labels = _windows_of(tr)
    w, b = train([windows(t)[0][:2] if windows(t) else (np.zeros(0, np.int64), np.zeros(0, np.float32)) for t in texts], labels)
    model = NgramModel(w=w, b=b, threshold=threshold, version=f"ngram-lr corpus-seed7 train-split n={len(texts)}")
    model.save(Path(out))
    print(f"trained on {len(texts)} windows ({sum(labels)} injected) in {time.perf_counter() - t0:.1f}s; "
          f"threshold {model.threshold:.3f}; wrote {out} ({os.path.getsize(out) / 1e6:.2f} MB)")


def quality_and_latency() -> None:
    from fakcore.screening import Screener
    from fakcore.screening.inline import screen as inline_screen

    examples = corpus.build()
    _, test = corpus.split(examples)
    screener = Screener()
    for e in test[:50]:  # warm-up (regex compilation, numpy)
        screener.screen(e.text)
    t_inline, t_model, t_both = [], [], []
    s_inline, s_model, s_both, labels, verdicts = [], [], [], [], []
    for e in test:
        t0 = time.perf_counter()
        r = inline_screen(e.text)
        t1 = time.perf_counter()
        m = screener.model.score(e.text) if screener.model else 0.0
        t2 = time.perf_counter()
        v = screener.screen(e.text)
        t3 = time.perf_counter()
        t_inline.append((t1 - t0) * 1e3)
        t_model.append((t2 - t1) * 1e3)
        t_both.append((t3 - t2) * 1e3)
        s_inline.append(r.score)
        s_model.append(m)
        s_both.append(max(r.score, m))
        labels.append(e.label)
        verdicts.append(v.quarantine)
    y = np.asarray(labels)
    pos, neg = int(y.sum()), int((1 - y).sum())
    hard = sum(1 for e in test if e.family.startswith("hard/"))
    print(f"held-out corpus: {len(test)} tool results ({pos} injected, {neg} clean of which {hard} hard negatives), "
          f"{len({e.family for e in test if e.label})} attack templates unseen in training")
    for name, s in (("inline", s_inline), ("model", s_model), ("inline+model", s_both)):
        tpr, thr = tpr_at_fpr(s, labels)
        print(f"  {name:13s} TPR at 1% FPR: {tpr * 100:6.2f}%   (score threshold {thr:.3f})")
    v = np.asarray(verdicts)
    print(f"  configured thresholds (inline {screener.inline_threshold}, model {screener.model_threshold:.3f}): "
          f"TPR {v[y == 1].mean() * 100:.2f}%  FPR {v[y == 0].mean() * 100:.2f}%")
    for name, ts in (("inline", t_inline), ("model", t_model), ("both", t_both)):
        print(f"  latency {name:7s} p50 {_pct(ts, 50):.3f} ms   p99 {_pct(ts, 99):.3f} ms   max {max(ts):.3f} ms")
    missed = sorted({e.family for e, vv in zip(test, verdicts, strict=True) if e.label and not vv})
    flagged = sorted({e.family for e, vv in zip(test, verdicts, strict=True) if not e.label and vv})
    print(f"  missed templates: {', '.join(missed) or '-'}")
    print(f"  flagged clean families: {', '.join(flagged) or '-'}")


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


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench screening")
    ap.add_argument("--train", action="store_true", help="retrain the model stage and write its weights")
    ap.add_argument("--out", default="libs/fakcore/data/screening/ngram-lr.npz")
    ap.add_argument("--gateway", type=int, default=0, metavar="N", help="also measure the gateway with N requests")
    ap.add_argument("--dump", metavar="FILE", help="write the labeled corpus as JSON lines and exit")
    args = ap.parse_args(argv)
    if args.dump:
        corpus.dump(args.dump, corpus.build())
        return 0
    if args.train:
        train_model(args.out)
    quality_and_latency()
    if args.gateway:
        gateway_overhead(args.gateway)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
