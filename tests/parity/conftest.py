"""Prints the measured parity numbers (fak vs HuggingFace) at the end of the run."""

from __future__ import annotations

from .support import RESULTS, SMOLLM2_NOTES, table


def pytest_terminal_summary(terminalreporter) -> None:
    if RESULTS:
        terminalreporter.section("fak vs HuggingFace: logits parity")
        terminalreporter.write_line(table())
    if SMOLLM2_NOTES:
        terminalreporter.section("fak vs HuggingFace: SmolLM2-135M-Instruct Q4_1")
        for line in SMOLLM2_NOTES:
            terminalreporter.write_line(line)
