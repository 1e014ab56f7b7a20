"""Inbound tool-result screening, inline stage: rules for the shapes prompt injections take.

Each detector returns a score in [0, 1]; the highest wins and a result at or above the threshold is
quarantined. These are cheap (microseconds to a millisecond per result) so they run on every tool result.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

THRESHOLD = 0.5


@dataclass(frozen=True)
class Screen:
    verdict: str  # clean | quarantine
    detector: str
    score: float
    reason: str


_DETECTORS: list[tuple[str, float, re.Pattern[str], str]] = [
    ("instruction_override", 0.95, re.compile(
        r"\b(ignore|disregard|forget|override)\b[^.\n]{0,40}\b(previous|prior|above|earlier|all|your)\b[^.\n]{0,30}"
        r"\b(instructions?|prompts?|rules|directions|guidelines)\b", re.I), "asks the model to drop its instructions"),
    ("role_marker", 0.9, re.compile(
        r"(<\|im_start\|>|<\|im_end\|>|<\|start_header_id\|>|<\|system\|>|\[INST\]|<<SYS>>|^\s*(system|assistant)\s*:)",
        re.I | re.M), "contains chat-template role markers"),
    ("addressed_to_model", 0.8, re.compile(
        r"\b(AI|assistant|language model|LLM|chatbot|agent)\b[^.\n]{0,20}\b(must|should|now|instead)\b[^.\n]{0,60}"
        r"\b(send|email|forward|transfer|execute|run|call|reveal|print|output|delete)\b", re.I),
     "addresses instructions to the model"),
    ("hidden_text", 0.9, re.compile(r"[\u200b-\u200f\u2060-\u2064\ufeff\U000e0000-\U000e007f]"),
     "carries zero-width or tag characters"),
    ("exfiltration_url", 0.85, re.compile(
        r"!\[[^\]]*\]\(https?://[^)]*[?&][^)]*=\{?[^)]*\)|https?://\S+[?&](data|q|secret|token|key|payload)=\{", re.I),
     "links that would carry data out"),
]


def screen(content: str) -> Screen:
    best = Screen("clean", "", 0.0, "")
    for name, score, pattern, reason in _DETECTORS:
        if score > best.score and pattern.search(content):
            best = Screen("quarantine" if score >= THRESHOLD else "clean", name, score, reason)
    return best
