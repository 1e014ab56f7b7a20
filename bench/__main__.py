"""Run a benchmark: `python -m bench gateway`, `python -m bench screening` (more arrive with their issues)."""

from __future__ import annotations

import importlib
import sys

BENCHES = {"gateway": "bench.gateway", "screening": "bench.screening", "agentdojo": "bench.agentdojo_eval", "kv": "bench.kv"}


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in BENCHES:
        print(f"usage: python -m bench {{{'|'.join(BENCHES)}}} [options]", file=sys.stderr)
        return 2
    return importlib.import_module(BENCHES[argv[0]]).main(argv[1:]) or 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
