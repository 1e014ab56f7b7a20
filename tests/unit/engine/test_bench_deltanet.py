"""`python -m bench deltanet --quick`: the tiny shape end to end, kernel against reference, in a second or two."""

from __future__ import annotations

from bench import deltanet
from bench.engine import machine


def test_quick_run_agrees_and_reports(capsys):
    assert deltanet.main(["--quick"]) == 0
    out = capsys.readouterr().out
    assert "kernel / reference speed-up (medians): prefill " in out
    assert machine().split(",")[0] in out  # the CPU's name
    assert "FAIL" not in out
