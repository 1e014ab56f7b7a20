"""The whole server: fak's gateway + engine worker against llama.cpp's `llama-server`, same GGUF, same threads.

    python -m bench serve [--model smollm2-135m] [--threads 2] [--streams 1,4,16] [--tokens 128] [--rounds 2]

Both serve OpenAI chat completions over HTTP; the same client drives both: N concurrent streams, each sending
one chat request after another (a 40-word prompt, greedy, `--tokens` new tokens, streamed with usage), for
`--rounds` requests per stream after a warm-up. Reported per stream count: aggregate completion tokens/s
(the completion tokens of every request over the wall time of the whole batch) and the median time to the
first content token, fak / llama-server as ratios. llama-server runs with `-np` = the largest stream count
and continuous batching; fak as `fak up` starts it (embedded nats-server, gateway, adjudicator, kvmmu, one
engine-cpu worker, the numba backend), screening on, as users run it.

llama-server is built from the same llama-cpp-python sdist as llama-bench (bench/llamacpp.py), outside the
repository; FAK_LLAMA_SERVER names a binary instead. Nothing in fak calls it: it is the comparison bar.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench import llamacpp
from bench.engine import commit, machine
from bench.gateway import free_port

WORDS = ("Explain in a few sentences how a city library decides which new books to buy each year, who takes part "
         "in the choice, what data they look at, and how readers can suggest titles they would like to borrow.")


def llama_server_binary(log=print) -> Path:
    """FAK_LLAMA_SERVER if set, else the cached build's llama-server, else configure the cached llama.cpp
    tree with the server on and build that target (a few minutes on 2 cores, after llama-bench's build)."""
    if os.environ.get("FAK_LLAMA_SERVER"):
        return Path(os.environ["FAK_LLAMA_SERVER"])
    src = llamacpp.llama_bench_binary(log).parents[2]  # fetches and builds llama.cpp first if need be
    binary = src / "build" / "bin" / "llama-server"
    if binary.exists():
        return binary
    log("llama.cpp: building llama-server")
    flags = [f for f in llamacpp.cmake_flags() if not f.startswith("-DLLAMA_BUILD_SERVER=")]
    subprocess.run(["cmake", "-S", str(src), "-B", str(src / "build"), *flags, "-DLLAMA_BUILD_SERVER=ON",
                    "-DLLAMA_BUILD_UI=OFF"], check=True, stdout=subprocess.DEVNULL)
    subprocess.run(["cmake", "--build", str(src / "build"), "--target", "llama-server", "-j", str(os.cpu_count() or 2)],
                   check=True, stdout=subprocess.DEVNULL)
    return binary


@dataclass
class Round:
    streams: int
    tokens: int  # completion tokens of every request
    wall: float  # seconds for the whole batch
    ttft: list[float]  # per request, seconds to its first content token

    @property
    def tok_s(self) -> float:
        return self.tokens / self.wall


async def one_request(client, url: str, model: str, tokens: int) -> tuple[int, float]:
    body = {"model": model, "messages": [{"role": "user", "content": WORDS}], "max_tokens": tokens,
            "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}
    t0 = time.perf_counter()
    first, used = 0.0, 0
    async with client.stream("POST", url + "/v1/chat/completions", json=body) as r:
        r.raise_for_status()
        async for line in r.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if not first and any((c.get("delta") or {}).get("content") for c in chunk.get("choices") or []):
                first = time.perf_counter() - t0
            if chunk.get("usage"):
                used = int(chunk["usage"]["completion_tokens"])
    return used, first or (time.perf_counter() - t0)


async def drive(url: str, model: str, streams: int, tokens: int, rounds: int) -> Round:
    import httpx

    # A new connection per request, for both servers: llama-server closes an idle keep-alive connection between
    # requests now and then, and a request sent on it dies with "Server disconnected" (a loopback connect costs
    # well under a millisecond, nothing against a request's ~2 s).
    limits = httpx.Limits(max_connections=streams, max_keepalive_connections=0)
    async with httpx.AsyncClient(timeout=600, limits=limits) as client:
        await one_request(client, url, model, 8)  # warm-up: connection, compiled kernels
        results: list[tuple[int, float]] = []

        async def stream() -> None:
            for _ in range(rounds):
                results.append(await one_request(client, url, model, tokens))

        t0 = time.perf_counter()
        await asyncio.gather(*(stream() for _ in range(streams)))
        wall = time.perf_counter() - t0
    return Round(streams, sum(n for n, _ in results), wall, [t for _, t in results])


def wait_ready(url: str, proc: subprocess.Popen, what: str, timeout: float = 600) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode} before it was ready")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"{what} was not ready within {timeout:.0f} s")


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def run_llama_server(gguf: Path, threads: int, slots: int, tokens: int, counts: list[int], rounds: int) -> list[Round]:
    binary = llama_server_binary()
    port = free_port()
    env = {**os.environ, "LD_LIBRARY_PATH": f"{binary.parent}:{os.environ.get('LD_LIBRARY_PATH', '')}"}
    ctx = slots * 1024  # 1,024 tokens a slot: prompt + completion fit
    proc = subprocess.Popen([str(binary), "-m", str(gguf), "-t", str(threads), "-tb", str(threads), "-np", str(slots),
                             "-c", str(ctx), "--host", "127.0.0.1", "--port", str(port), "--cont-batching"],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_ready(url + "/health", proc, "llama-server")
        return [asyncio.run(drive(url, "model", n, tokens, rounds)) for n in counts]
    finally:
        stop(proc)


def run_fak(model: str, backend: str, threads: int, slots: int, tokens: int, counts: list[int], rounds: int) -> list[Round]:
    port = free_port()
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("FAK_")}, "FAK_PORT": str(port),
           "FAK_MODEL": model, "FAK_BACKEND": backend, "FAK_MAX_SESSIONS": str(slots),
           "FAK_THREADS": str(threads), "FAK_DATA_DIR": tempfile.mkdtemp(prefix="fak-bench-serve-")}
    if os.environ.get("FAK_CACHE_DIR"):
        env["FAK_CACHE_DIR"] = os.environ["FAK_CACHE_DIR"]
    proc = subprocess.Popen([sys.executable, "-m", "fakcore.cli", "up"], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_ready(url + "/healthz", proc, "fak up")
        return [asyncio.run(drive(url, model, n, tokens, rounds)) for n in counts]
    finally:
        stop(proc)


def table(fak: list[Round], ref: list[Round] | None) -> str:
    if ref is None:  # --skip-llama: fak's rows alone
        rows = ["| streams | fak tok/s | fak TTFT p50 ms | requests | completion tokens |", "|---|---|---|---|---|"]
        rows += [f"| {f.streams} | {f.tok_s:.1f} | {statistics.median(f.ttft) * 1e3:.0f} | {len(f.ttft)} | {f.tokens} |" for f in fak]
        return "\n".join(rows)
    rows = ["| streams | llama-server tok/s | fak tok/s | fak / llama-server | llama-server TTFT p50 ms | fak TTFT p50 ms |",
            "|---|---|---|---|---|---|"]
    for f, r in zip(fak, ref, strict=True):
        rows.append(f"| {f.streams} | {r.tok_s:.1f} | {f.tok_s:.1f} | {f.tok_s / r.tok_s:.2f} | "
                    f"{statistics.median(r.ttft) * 1e3:.0f} | {statistics.median(f.ttft) * 1e3:.0f} |")
    return "\n".join(rows)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench serve")
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--streams", default="1,4,16")
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=2, help="requests each stream sends one after another")
    ap.add_argument("--backend", default="numba", help="fak's engine backend (the comparison is numba's)")
    ap.add_argument("--skip-llama", action="store_true", help="fak alone (no llama-server build or run)")
    args = ap.parse_args(argv)
    from fakcore.models.sources import resolve

    counts = [int(n) for n in args.streams.split(",")]
    slots = max(counts)
    gguf = None if args.skip_llama else Path(resolve(args.model))
    print(f"machine: {machine()}, threads {args.threads}, commit {commit()}, model {args.model}"
          f"{f' ({gguf.name})' if gguf else ''}, load average at start {os.getloadavg()[0]:.2f}", flush=True)
    ref = None if gguf is None else run_llama_server(gguf, args.threads, slots, args.tokens, counts, args.rounds)
    fak = run_fak(args.model, args.backend, args.threads, slots, args.tokens, counts, args.rounds)
    print(table(fak, ref))
    print(f"load average at end {os.getloadavg()[0]:.2f}")
    return 0
