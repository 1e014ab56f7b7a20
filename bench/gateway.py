"""Cold start of `fak up` and end-to-end latency of small completions through the gateway.

    python -m bench gateway [--requests 50] [--tokens 16] [--model synthetic]

Cold start: from launching `fak up` (embedded nats-server, every service) to its readiness line. Latency:
non-streamed chat completions of --tokens tokens through the OpenAI SDK, sequential, after two warm-ups.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench gateway")
    ap.add_argument("--requests", type=int, default=50)
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--model", default="synthetic")
    args = ap.parse_args(argv)
    import openai

    port = free_port()
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("FAK_")}, "FAK_PORT": str(port),
           "FAK_MODEL": args.model, "FAK_DATA_DIR": tempfile.mkdtemp(prefix="fak-bench-")}
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "fakcore.cli", "up"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, start_new_session=True)
    try:
        for line in proc.stdout:
            if "fak is up" in line:
                break
        else:
            print("fak up did not start", file=sys.stderr)
            return 1
        cold = time.perf_counter() - t0
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="-", max_retries=0)
        kw = dict(model=args.model, messages=[{"role": "user", "content": "Benchmark prompt, please answer."}],
                  max_tokens=args.tokens, temperature=0)
        for _ in range(2):
            client.chat.completions.create(**kw)
        times = []
        for _ in range(args.requests):
            t = time.perf_counter()
            r = client.chat.completions.create(**kw)
            times.append(time.perf_counter() - t)
            assert r.usage.completion_tokens == args.tokens
        times.sort()
        p50 = statistics.median(times)
        p90 = times[int(0.9 * (len(times) - 1))]
        print(f"model={args.model} tokens={args.tokens} requests={args.requests}")
        print(f"fak up cold start: {cold:.2f} s")
        print(f"completion latency: p50 {p50 * 1000:.1f} ms  p90 {p90 * 1000:.1f} ms  "
              f"({args.tokens / p50:.0f} tokens/s end to end at p50)")
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(30)
    return 0
