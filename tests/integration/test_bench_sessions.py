"""`python -m bench sessions` at its full size (issue 10): 200 concurrent sessions on both wires, streamed and not,
with clean and poisoned tool results and calls the model makes, through a real topology on the synthetic model.
Zero errors, every session through all its turns, every poisoned result quarantined (a placeholder, not an error),
every call the model made adjudicated, p99 reported. How fast is the benchmark's business (bench/RESULTS.md), not
this test's: no wall-clock bound here."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SESSIONS, TURNS = 200, 3

pytestmark = pytest.mark.slow  # ~2 minutes on 2 cores (the one engine worker is the bottleneck)


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench-sessions") / "sessions.json"
    run = subprocess.run([sys.executable, "-m", "bench", "sessions", "--sessions", str(SESSIONS), "--turns", str(TURNS),
                          "--json", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.exists(), run.stdout[-3000:] + run.stderr[-3000:]
    return run, json.loads(out.read_text())


def test_every_session_completes_every_turn_without_an_error(result):
    run, r = result
    assert r["errors"] == {}, r["error_samples"]
    assert r["completed_sessions"] == SESSIONS and r["requests"] == SESSIONS * TURNS
    assert run.returncode == 0, run.stderr[-3000:]
    assert "**errors 0**" in run.stdout


def test_poisoned_tool_results_are_quarantined_and_clean_ones_pass(result):
    _, r = result
    q, v = r["quarantine"], r["verdicts"]
    poisoned = q["poisoned_sessions"]
    assert poisoned == SESSIONS // 5  # one block of four sessions (one per wire) in five
    # turn 2 screens each poisoned result (quarantined there), turn 3 finds it in the context filter: in the
    # gateway's record of every such request, the injection never went to the engine
    assert q.get("poisoned screened") == poisoned and q.get("poisoned filtered") == poisoned * (TURNS - 2)
    assert q.get("clean passed") == (SESSIONS - poisoned) * (TURNS - 1)
    assert not {k for k in q if k.endswith(("leaked", "unchecked"))}, q
    # and by the gateway's own counters: each result screened once, then answered from its verdict cache
    assert v.get("result quarantine adjudicator") == poisoned and v.get("result quarantine cache") == poisoned * (TURNS - 2)
    assert v.get("result clean adjudicator") == SESSIONS - poisoned
    assert r["eviction_receipts"] >= poisoned  # each quarantined span evicted from the engine's cache, with a receipt


def test_the_calls_the_model_makes_are_adjudicated_and_answered(result):
    _, r = result
    calls = r["model_calls"]
    assert calls["sessions"] == SESSIONS // 10 and calls["calls"] == calls["sessions"]  # one block of four in ten
    assert r["verdicts"].get("call allow adjudicator") == calls["sessions"]
    assert not any(k.startswith("call deny") for k in r["verdicts"])  # get_weather is no sink


def test_p99_is_reported_per_wire_and_overall(result):
    run, r = result
    wires = ("openai", "openai-stream", "anthropic", "anthropic-stream")
    for w in (*wires, "overall"):
        p = r["latency_ms"][w]
        assert p["n"] == (SESSIONS * TURNS if w == "overall" else SESSIONS * TURNS // 4)
        assert all(isinstance(p[k], float) and math.isfinite(p[k]) and p[k] > 0 for k in ("p50", "p90", "p99"))
        assert p["p50"] <= p["p90"] <= p["p99"]
    assert all(math.isfinite(r["ttft_ms"][w]["p99"]) for w in ("openai-stream", "anthropic-stream", "streams"))
    assert r["requests_per_s"] > 0 and r["machine"]["cpu"]
    assert f"| overall | {SESSIONS * TURNS} |" in run.stdout and "p99 ms" in run.stdout
