"""Run a benchmark: `python -m bench NAME [options]`.

    gateway    cold start of `fak up`, end-to-end latency of small completions
    upstream   upstream mode: the latency fak adds over a direct upstream call, one tool result screened per request
    engine     fak's CPU engine vs llama.cpp and HF transformers (pp512, tg128, concurrent streams)
    kv         exact/shift eviction cost vs re-prefill; time to first token with a prefix hit vs cold
    deltanet   Gated DeltaNet's recurrence: the numba kernel vs the numpy reference, prefill and decode
    screening  tool-result screening: TPR at 1% FPR, latency; gateway added latency
    agentdojo  screening on AgentDojo's data (independent evaluation; needs the agentdojo package)
    sessions   200 concurrent sessions (both wires, streaming, tool results) through the gateway: errors, p50/p90/p99
    quality    greedy continuations against HF transformers on chat prompts, fak's paths beside llama.cpp's
    serve      the whole server vs llama.cpp's llama-server: aggregate tok/s and time to first token at 1/4/16 streams
"""

from __future__ import annotations

import importlib
import sys

BENCHES = {"gateway": "bench.gateway", "upstream": "bench.upstream", "engine": "bench.engine", "kv": "bench.kv",
           "deltanet": "bench.deltanet", "screening": "bench.screening", "agentdojo": "bench.agentdojo_eval",
           "sessions": "bench.sessions", "serve": "bench.serve", "quality": "bench.quality"}


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in BENCHES:
        print(f"usage: python -m bench {{{'|'.join(BENCHES)}}} [options]", file=sys.stderr)
        return 2
    return importlib.import_module(BENCHES[argv[0]]).main(argv[1:]) or 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
