"""`python -m bench serve` end to end with tiny counts, fak's half (llama-server is a ~10-minute build, the
benchmark's business, not CI's): `fak up` comes up, every stream's requests are served and counted, the table
prints. How fast is bench/RESULTS.md's business, not a test's."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_serve_benchmark_drives_fak_up_and_prints_its_rows(tmp_path):
    run = subprocess.run([sys.executable, "-m", "bench", "serve", "--model", "synthetic", "--backend", "reference", "--skip-llama", "--streams", "1,3",
                          "--tokens", "8", "--rounds", "2"], cwd=ROOT, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "FAK_CACHE_DIR": str(tmp_path / "cache")})
    assert run.returncode == 0, run.stderr[-3000:]
    rows = [line.split("|")[1:-1] for line in run.stdout.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert [int(r[0]) for r in rows] == [1, 3]
    for streams, row in zip((1, 3), rows, strict=True):
        assert int(row[3]) == 2 * streams and int(row[4]) > 0 and float(row[1]) > 0  # every request answered, tokens counted
