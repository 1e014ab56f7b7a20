"""`python -m bench upstream` end to end with tiny counts: the upstreams and the topology come up, every row is
measured and printed, every request with a new tool result is screened, and the profile hook dumps. The
numbers themselves are the benchmark's business, not a test's."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_upstream_benchmark_runs_and_prints_its_table(tmp_path):
    out = tmp_path / "upstream.json"
    run = subprocess.run([sys.executable, "-m", "bench", "upstream", "--concurrency", "1", "4", "--requests", "4", "8",
                          "--rounds", "2", "--profile", "4", "--json", str(out)],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "| wire | measure | tool result | c |" in run.stdout and "Where the gateway's time goes" in run.stdout
    assert "Goal met" in run.stdout or "Goal not met" in run.stdout
    result = json.loads(out.read_text())
    rows = result["rows"]
    assert {(r["wire"], r["measure"], r["result"], r["c"]) for r in rows} == {
        (w, m, t, c) for w in ("anthropic", "openai") for m in ("total", "ttfb") for t in ("unique", "cached") for c in (1, 4)}
    for r in rows:
        assert len(r["direct_ms"]) == len(r["fak_ms"]) == len(r["added_ms"]) == 2
        # a new tool result on every request: each one screened; the same one every time: only until the first
        # verdict is in (at most one request per connection in flight)
        assert (r["screened"] == r["n"]) if r["result"] == "unique" else (r["screened"] <= r["c"]), r
    assert set(result["profile_ms_per_request"]) == {f"{w} c={c}" for w in ("anthropic", "openai") for c in (1, 4)}
    assert result["machine"]["cpu"] and result["machine"]["threads"] >= 1
