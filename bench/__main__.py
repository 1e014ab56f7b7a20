"""Run a benchmark: `python -m bench gateway` (more arrive with their issues)."""

from __future__ import annotations

import importlib
import sys

BENCHES = {"gateway": "bench.gateway"}


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in BENCHES:
        print(f"usage: python -m bench {{{'|'.join(BENCHES)}}} [options]", file=sys.stderr)
        return 2
    return importlib.import_module(BENCHES[argv[0]]).main(argv[1:]) or 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
