"""Inbound tool-result screening, in two layers.

    inline.py     rules for the shapes injections take (+ normalize.py: hidden text revealed)  ~1 ms
    model.py      a hashed n-gram classifier shipped with fak, window by window                ~1-3 ms

`Screener.inline` gives the fast verdict every request waits for; `Screener.model_stage` the second
opinion, which the adjudicator runs either before answering (`screen_model=sync`) or after it
(`async`: a late quarantine, enforced by the gateways' context filters and the kvmmu's eviction).

What is screened is a tool result, or an MCP tool's description (`kind="tool_description"`). A description
is written to the model ("use this tool when you need…"), so it gets the inline rules plus those for tool
poisoning (inline.DESCRIPTION_RULES), and not the classifier: trained on tool results, it scores benign
descriptions up to 0.79 and poisoned ones as low as 0.14 (tests/data/mcp/tool_descriptions.jsonl), which
is no signal either way.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from fakcore.protocol import ContentKind
from fakcore.screening import inline
from fakcore.screening.model import DEFAULT_PATH, NgramModel

log = logging.getLogger("fak.screening")


@dataclass(frozen=True)
class Verdict:
    quarantine: bool
    detector: str  # the rule ("instruction_override", …) or "model:ngram-lr"; "" when clean
    score: float
    reason: str
    stage: str  # inline | model

    @property
    def verdict(self) -> str:
        return "quarantine" if self.quarantine else "clean"


class Screener:
    def __init__(self, inline_threshold: float = 0.4, model_threshold: float = 0.0, model_path: str = ""):
        self.inline_threshold = inline_threshold
        self.model: NgramModel | None = None
        try:
            self.model = NgramModel.load(model_path or DEFAULT_PATH)
        except OSError as exc:
            log.warning("model stage disabled: cannot load %s: %s", model_path or DEFAULT_PATH, exc)
        # 0: the threshold the model was shipped with
        self.model_threshold = model_threshold or (self.model.threshold if self.model else 1.0)

    def inline(self, content: str, kind: ContentKind = "tool_result") -> Verdict:
        r = inline.screen(content, kind)
        return Verdict(r.score >= self.inline_threshold, r.detector, r.score, r.reason, "inline")

    def model_stage(self, content: str, kind: ContentKind = "tool_result") -> Verdict:
        """The classifier's verdict; a tool description is never quarantined by it (see the module's docstring)."""
        if self.model is None or kind == "tool_description":
            return Verdict(False, "", 0.0, "", "model")
        p = self.model.score(content)
        hit = p >= self.model_threshold
        return Verdict(hit, "model:ngram-lr" if hit else "", round(p, 4),
                       "the classifier reads it as an injection" if hit else "", "model")

    def screen(self, content: str, kind: ContentKind = "tool_result") -> Verdict:
        """Both stages: the inline verdict if it quarantines, else the model's."""
        v = self.inline(content, kind)
        if v.quarantine or kind == "tool_description":
            return v
        m = self.model_stage(content)
        return m if m.quarantine else Verdict(False, "", max(v.score, m.score), "", "model" if self.model else "inline")
