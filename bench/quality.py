"""The quality envelope: fak's greedy continuations against HuggingFace transformers', beside llama.cpp's own.

    python -m bench quality [--model smollm2-135m] [--tokens 64] [--activations f32,int8] [--skip-llama]

Every system gets the same prompt token ids (fak renders the chat template; llama-server's /completion takes
ids) and decodes greedily. The oracle is transformers on the same GGUF, dequantized to f32 (`gguf_file=`). Per
system: how many prompts' continuations are identical to the oracle's (up to the end of turn, at most `--tokens`),
the tokens matched before the first difference, and the teacher-forced agreement (fed the oracle's continuation as context, the
same argmax at every position). The issue's bar: fak identical on at least as many prompts as llama.cpp.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
from pathlib import Path

import numpy as np

from bench.engine import commit, machine
from bench.gateway import free_port
from bench.serve import llama_server_binary, stop, wait_ready

PROMPTS = (  # chat prompts of many kinds; --prompts N takes the first N
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "Explain in two sentences what a hash table is.",
    "Give me three tips for sleeping better.",
    "Translate 'good morning, how are you?' into Spanish.",
    "What is 17 times 23? Show your working.",
    "Write a Python function that reverses a string.",
    "Summarise the plot of Romeo and Juliet in one paragraph.",
    "What are the primary colours?",
    "Name four planets of the solar system and one fact about each.",
    "How do I make a cup of green tea?",
    "Why is the sky blue? Answer briefly.",
)


def prompt_ids(model, text: str) -> list[int]:
    from fakcore.engine.prompt import build_prompt
    from fakcore.protocol import ChatMessage, GenerateRequest

    return build_prompt(model, GenerateRequest(request_id="q", model="m", messages=[ChatMessage(role="user", content=text)])).ids


def fak_greedy(model, ids: list[int], n: int) -> list[int]:
    from fakcore.engine.backend import Segment

    tf, out = model.transformer, []
    cache = tf.new_cache()
    logits = tf.forward(np.array(ids), [Segment(cache, slice(0, len(ids)))], np.array([len(ids) - 1]))
    for _ in range(n):
        out.append(int(np.argmax(logits[0])))
        logits = tf.forward(np.array(out[-1:]), [Segment(cache, slice(0, 1))], np.array([0]))
    return out


def fak_forced(model, ids: list[int], oracle: list[int]) -> np.ndarray:
    from fakcore.engine.backend import Segment

    seq = ids + oracle[:-1]
    tf = model.transformer
    logits = tf.forward(np.array(seq), [Segment(tf.new_cache(), slice(0, len(seq)))])
    return logits[len(ids) - 1:].argmax(-1)


def hf_runs(gguf: Path, prompts: list[list[int]], n: int) -> list[list[int]]:
    """The oracle: plain argmax steps over transformers' KV cache (no generate() logits processors)."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(2)
    hf = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32).eval()
    outs = []
    with torch.inference_mode():
        for ids in prompts:
            out = hf(torch.tensor([ids]), use_cache=True)
            tokens: list[int] = []
            for _ in range(n):
                tokens.append(int(out.logits[0, -1].argmax()))
                out = hf(torch.tensor([tokens[-1:]]), past_key_values=out.past_key_values, use_cache=True)
            outs.append(tokens)
    return outs


def until_eos(tokens: list[int], eos: tuple[int, ...]) -> list[int]:
    """A continuation up to (not including) its first end-of-generation token: what a client is shown."""
    return next((tokens[:i] for i, t in enumerate(tokens) if t in eos), tokens)


async def llama_runs(url: str, prompts: list[list[int]], n: int) -> list[list[int]]:
    import httpx

    outs = []
    async with httpx.AsyncClient(timeout=600) as client:
        for ids in prompts:
            r = await client.post(url + "/completion", json={"prompt": ids, "n_predict": n, "temperature": 0, "top_k": 1,
                                                             "return_tokens": True, "cache_prompt": False})
            r.raise_for_status()
            outs.append([int(t) for t in r.json()["tokens"]][:n])
    return outs


def run_llama(gguf: Path, prompts: list[list[int]], n: int) -> list[list[int]]:
    binary = llama_server_binary()
    port = free_port()
    env = {**os.environ, "LD_LIBRARY_PATH": f"{binary.parent}:{os.environ.get('LD_LIBRARY_PATH', '')}"}
    proc = subprocess.Popen([str(binary), "-m", str(gguf), "-t", "2", "-np", "1", "-c", "2048", "--host", "127.0.0.1",
                             "--port", str(port)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_ready(url + "/health", proc, "llama-server")
        return asyncio.run(llama_runs(url, prompts, n))
    finally:
        stop(proc)


def first_difference(a: list[int], b: list[int]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench quality")
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--activations", default="f32,int8", help="numba activation paths to run (comma separated)")
    ap.add_argument("--prompts", type=int, default=len(PROMPTS), help=f"how many of the {len(PROMPTS)} prompts")
    ap.add_argument("--skip-llama", action="store_true")
    args = ap.parse_args(argv)
    import fak_engine_cpu.backend  # noqa: F401  (registers numba)
    from fakcore.engine.loader import load_model, make_backend
    from fakcore.models.sources import resolve

    gguf = Path(resolve(args.model))
    n = args.tokens
    ref = load_model(args.model, make_backend("reference"))
    prompts = [prompt_ids(ref, p) for p in PROMPTS[:args.prompts]]
    print(f"machine: {machine()}, commit {commit()}, model {args.model} ({gguf.name}), {len(prompts)} chat prompts x {n} "
          f"greedy tokens, oracle: HF transformers on the GGUF dequantized to f32", flush=True)
    oracle = hf_runs(gguf, prompts, n)
    systems: dict[str, list[list[int]]] = {}
    forced: dict[str, int] = {}
    for mode in filter(None, args.activations.split(",")):
        m = load_model(args.model, make_backend("numba", activations=mode))
        name = f"fak (numba, {mode} activations)"
        systems[name] = [fak_greedy(m, ids, n) for ids in prompts]
        forced[name] = sum(int((fak_forced(m, ids, o) == np.array(o)).sum()) for ids, o in zip(prompts, oracle, strict=True))
    systems["fak (reference, f32)"] = [fak_greedy(ref, ids, n) for ids in prompts]
    forced["fak (reference, f32)"] = sum(int((fak_forced(ref, ids, o) == np.array(o)).sum()) for ids, o in zip(prompts, oracle, strict=True))
    if not args.skip_llama:
        systems["llama.cpp (llama-server)"] = run_llama(gguf, prompts, n)
    eos = ref.config.eos_ids
    oracle_shown = [until_eos(o, eos) for o in oracle]
    shown_total = sum(map(len, oracle_shown))  # the oracle's tokens a client sees (up to its end of turn)
    total = n * len(prompts)
    rows = ["| system | prompts identical to HF | tokens before the first difference | teacher-forced argmax agreement |",
            "|---|---|---|---|"]
    for name, outs in systems.items():
        shown = [until_eos(o, eos) for o in outs]
        same = sum(int(o == h) for o, h in zip(shown, oracle_shown, strict=True))
        prefix = sum(first_difference(o, h) for o, h in zip(shown, oracle_shown, strict=True))
        tf = f"{forced[name]}/{total} ({100 * forced[name] / total:.1f}%)" if name in forced else "n/a (tokens only)"
        rows.append(f"| {name} | {same}/{len(prompts)} | {prefix}/{shown_total} ({100 * prefix / shown_total:.1f}%) | {tf} |")
    print("\n".join(rows))
    return 0
