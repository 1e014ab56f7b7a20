"""fak's engine against llama.cpp and HF transformers, in a matched envelope.

    python -m bench engine [--model smollm2-135m] [--threads 2] [--reps 3] [--skip-hf] [--skip-llama] [--write]

Same GGUF, same thread count, same lengths: pp512 (prefill 512 tokens in one batch into an empty cache)
and tg128 (128 single-token decode steps from an empty cache), tokens/s; then fak's aggregate decode
throughput with 1, 4 and 16 concurrent streams through the continuous-batching scheduler. The ratio
fak/llama.cpp is printed; --write puts the table into bench/RESULTS.md with machine, threads and commit.
Prompt tokens are random ids (as llama-bench's are); the same for every system.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from bench import llamacpp
from bench.results import write_section

# --cpu: numba's target (NUMBA_CPU_NAME, NUMBA_CPU_FEATURES) for each older CPU of llamacpp.CPUS
CODE_FOR = {"avx2": ("haswell", "+avx,+avx2,+fma,+f16c")}


def fak_pp_tg(model, pp: int, tg: int, reps: int) -> dict[str, float]:
    from fakcore.engine.backend import Segment

    tf = model.transformer
    rng = np.random.default_rng(0)
    vocab = model.config.vocab_size
    prompt = rng.integers(0, vocab, pp).astype(np.int64)
    # warm-up: compile every kernel shape once
    c = tf.new_cache()
    tf.forward(prompt[:8], [Segment(c, slice(0, 8))], np.array([7]))
    tf.forward(prompt[8:9], [Segment(c, slice(0, 1))], np.array([0]))
    pp_times, tg_times = [], []
    for _ in range(reps):
        c = tf.new_cache()
        c.reserve(pp)
        t0 = time.perf_counter()
        tf.forward(prompt, [Segment(c, slice(0, pp))], np.array([pp - 1]))
        pp_times.append(time.perf_counter() - t0)
        c = tf.new_cache()
        c.reserve(tg)
        token = np.array([int(prompt[0])])
        t0 = time.perf_counter()
        for _ in range(tg):
            logits = tf.forward(token, [Segment(c, slice(0, 1))], np.array([0]))
            token = np.array([int(np.argmax(logits[0]))])
        tg_times.append(time.perf_counter() - t0)
    return {f"pp{pp}": pp / float(np.mean(pp_times)), f"tg{tg}": tg / float(np.mean(tg_times))}


def hf_pp_tg(gguf: Path, threads: int, pp: int, tg: int, reps: int) -> dict[str, float]:
    import torch
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(threads)
    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, torch_dtype=torch.float32)
    model.eval()
    rng = np.random.default_rng(0)
    prompt = torch.tensor(rng.integers(0, model.config.vocab_size, (1, pp)))
    pp_times, tg_times = [], []
    with torch.inference_mode():
        model(prompt[:, :8])
        for _ in range(reps):
            t0 = time.perf_counter()
            model(prompt, use_cache=True)
            pp_times.append(time.perf_counter() - t0)
            token = prompt[:, :1]
            past = None
            t0 = time.perf_counter()
            for _ in range(tg):
                out = model(token, past_key_values=past, use_cache=True)
                past = out.past_key_values
                token = out.logits[:, -1:].argmax(-1)
            tg_times.append(time.perf_counter() - t0)
    return {f"pp{pp}": pp / float(np.mean(pp_times)), f"tg{tg}": tg / float(np.mean(tg_times))}


def fak_streams(model, streams: int, tokens: int = 32) -> float:
    """Aggregate generated tokens/s with `streams` concurrent greedy generations through the scheduler."""
    from fakcore.engine.scheduler import Scheduler
    from fakcore.engine.sequence import Sequence
    from fakcore.protocol import GenerateRequest, Sampling

    sched = Scheduler(model, lambda *a: None, max_sessions=streams, max_queue=streams)
    seqs = []
    for i in range(streams):
        req = GenerateRequest(request_id=f"s{i}", model=model.name, prompt=f"Stream {i}: once upon a time",
                              sampling=Sampling(max_tokens=tokens, temperature=0.0))
        ids = model.tokenizer.encode(req.prompt, add_bos=model.tokenizer.add_bos)
        seqs.append(Sequence(request=req, prompt=ids, cache=model.transformer.new_cache(), model=model))
    for s in seqs:
        sched.submit(s)
    # prefill everything first so that the timing measures decode steps only
    while any(s.pending_prompt for s in seqs) or sched.waiting:
        sched.step()
    t0 = time.perf_counter()
    produced0 = sum(len(s.generated) for s in seqs)
    while sched.active:
        sched.step()
    dt = time.perf_counter() - t0
    return (sum(len(s.generated) for s in seqs) - produced0) / dt


def start_times(model: str, backend: str, threads: int, activations: str = "f32") -> tuple[float, float]:
    """Seconds for a fresh process to load the model and run its first forward pass: with an empty numba
    cache (cold: every kernel compiles), then again with that cache (warm)."""
    import tempfile

    code = ("import time,numpy as np;t=time.perf_counter();"
            "import fak_engine_cpu.backend;from fakcore.engine.loader import load_model,make_backend;"
            "from fakcore.engine.backend import Segment;"
            f"m=load_model({model!r},make_backend({backend!r},threads={threads},activations={activations!r}) "
            f"if {backend!r}=='numba' else make_backend({backend!r}));"
            "c=m.transformer.new_cache();m.transformer.forward(np.arange(8),[Segment(c,slice(0,8))],np.array([7]));"
            "m.transformer.forward(np.arange(1),[Segment(c,slice(0,1))],np.array([0]));print(time.perf_counter()-t)")
    with tempfile.TemporaryDirectory(prefix="fak-numba-cache-") as cache:
        env = {**os.environ, "NUMBA_CACHE_DIR": cache}
        times = []
        for _ in range(2):
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True)
            times.append(time.perf_counter() - t0)
    return times[0], times[1]


def machine() -> str:
    cpu = "unknown CPU"
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                   if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{cpu}, {os.cpu_count()} cores, {platform.system()} {platform.machine()}"


def commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench engine")
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--pp", type=int, default=512)
    ap.add_argument("--tg", type=int, default=128)
    ap.add_argument("--backend", default="numba")
    ap.add_argument("--activations", default="f32,int8", help="numba activation modes to run (comma separated)")
    ap.add_argument("--skip-hf", action="store_true")
    ap.add_argument("--skip-llama", action="store_true")
    ap.add_argument("--streams", default="1,4,16")
    ap.add_argument("--write", action="store_true", help="write the table into bench/RESULTS.md")
    ap.add_argument("--cpu", default="host", choices=["host", *CODE_FOR],
                    help="compile for an older CPU on this one: fak's kernels through numba's NUMBA_CPU_NAME / "
                         "NUMBA_CPU_FEATURES (its paths follow them), llama.cpp in a build of its own for the same")
    args = ap.parse_args(argv)
    if args.cpu != "host":
        if "numba" in sys.modules:
            raise SystemExit("--cpu: numba was imported before the bench could set its target")
        os.environ["NUMBA_CPU_NAME"], os.environ["NUMBA_CPU_FEATURES"] = CODE_FOR[args.cpu]

    import fak_engine_cpu.backend  # noqa: F401  registers "numba"
    from fakcore.engine.loader import load_model, make_backend
    from fakcore.models.sources import resolve

    gguf = Path(resolve(args.model))
    pp, tg = f"pp{args.pp}", f"tg{args.tg}"
    rows: list[tuple[str, dict[str, float]]] = []
    if not args.skip_llama:
        rows.append(("llama.cpp", llamacpp.run_llama_bench(gguf, args.threads, args.pp, args.tg, args.reps, cpu=args.cpu)))
        print("llama.cpp: " + ", ".join(f"{k} {v:.1f} tok/s" for k, v in rows[-1][1].items()), flush=True)
    modes = args.activations.split(",") if args.backend == "numba" else [""]
    models, loads = {}, {}
    for mode in modes:
        name = f"fak ({args.backend}{', ' + mode + ' activations' if mode else ''})"
        backend = (make_backend("numba", threads=args.threads, activations=mode) if mode else make_backend(args.backend))
        t0 = time.perf_counter()
        models[name] = load_model(args.model, backend)
        loads[name] = time.perf_counter() - t0
        rows.append((name, fak_pp_tg(models[name], args.pp, args.tg, args.reps)))
        print(f"{name}: " + ", ".join(f"{k} {v:.1f} tok/s" for k, v in rows[-1][1].items()), flush=True)
    if not args.skip_hf:
        rows.append(("HF transformers (f32)", hf_pp_tg(gguf, args.threads, args.pp, args.tg, args.reps)))
    streams = {name: {int(n): fak_streams(model, int(n)) for n in args.streams.split(",")} for name, model in models.items()}
    agreement = {name: greedy_agreement(models[name], model_ref=load_model(args.model, make_backend("reference")))
                 for name in models if "int8" in name}
    starts = {mode: start_times(args.model, args.backend, args.threads, mode) for mode in modes if mode}

    ref = dict(rows).get("llama.cpp")
    code = "" if args.cpu == "host" else f", code for {args.cpu} (NUMBA_CPU_NAME={CODE_FOR[args.cpu][0]}; llama.cpp built for it)"
    lines = [f"model {args.model} ({gguf.name}), threads {args.threads}, machine: {machine()}{code}, commit {commit()}",
             "fak load time: " + ", ".join(f"{n} {s:.2f} s" for n, s in loads.items()),
             "process start to first token, cold (empty numba cache) / warm: "
             + ", ".join(f"{mode} activations {c:.1f} s / {w:.1f} s" for mode, (c, w) in starts.items()), "",
             f"| system | {pp} tok/s | {tg} tok/s | {pp} fak/llama.cpp | {tg} fak/llama.cpp |", "|---|---|---|---|---|"]
    for name, r in rows:
        ratio = (f"{r[pp] / ref[pp]:.2f} | {r[tg] / ref[tg]:.2f}") if ref else "- | -"
        lines.append(f"| {name} | {r[pp]:.1f} | {r[tg]:.1f} | {ratio} |")
    for name, by_n in streams.items():
        lines += ["", f"{name}: aggregate decode throughput with concurrent streams", "",
                  "| streams | tok/s | vs 1 stream |", "|---|---|---|"]
        lines += [f"| {n} | {v:.1f} | {v / by_n[min(by_n)]:.2f}x |" for n, v in by_n.items()]
    for name, (same, forced, total) in agreement.items():
        lines += ["", f"{name} against the f32 reference, 3 prompts x 64 greedy tokens: identical up to the first "
                      f"divergence {same}/{total} ({100 * same / total:.1f}%); same argmax given the same context "
                      f"(teacher forcing) {forced}/{total} ({100 * forced / total:.1f}%)"]
    text = "\n".join(lines)
    print(text)
    if args.write:
        path = write_section("# Engine benchmark results", "Written by `python -m bench engine --write`.\n\n" + text)
        print(f"wrote {path}")
    return 0


def greedy_agreement(model, model_ref, prompts=("What is the capital of France?", "Write a haiku about the sea.",
                                                "Explain in two sentences what a hash table is."),
                     n: int = 64) -> tuple[int, int, int]:
    """(tokens generated identically to the reference before the first difference, positions of the
    reference's continuation where `model`, fed the same context (teacher forcing), picks the same argmax,
    total positions), summed over prompts."""
    from bench.quality import fak_greedy  # here: bench.quality imports this module
    from fakcore.engine.backend import Segment
    from fakcore.engine.prompt import build_prompt
    from fakcore.protocol import ChatMessage, GenerateRequest

    same = forced = 0
    for p in prompts:
        if model_ref.template is None:  # raw prompts only (Gemma-3-270M's GGUF ships no chat template)
            ids = model_ref.tokenizer.encode(p, add_bos=model_ref.tokenizer.add_bos)
        else:
            ids = build_prompt(model_ref, GenerateRequest(request_id="b", model="m", messages=[ChatMessage(role="user", content=p)])).ids
        a, b = fak_greedy(model_ref, ids, n), fak_greedy(model, ids, n)
        same += next((i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y), n)
        seq = ids + a[:-1]
        tf = model.transformer
        logits = tf.forward(np.array(seq), [Segment(tf.new_cache(), slice(0, len(seq)))])
        forced += int((logits[len(ids) - 1:].argmax(-1) == np.array(a)).sum())
    return same, forced, n * len(prompts)
