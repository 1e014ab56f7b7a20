"""Inbound tool-result screening, in two layers here and an optional third on fak's engine.

    inline.py     rules for the shapes injections take (+ normalize.py: hidden text revealed)  ~0.1-0.8 ms
    model.py      a hashed n-gram classifier shipped with fak, window by window                ~0.1-0.7 ms
    probe.py      a linear probe of Gemma-3-270M's hidden states, on an engine worker          ~0.1-0.5 s
                  (FAK_SCREEN_JUDGE, method probe: the adjudicator's judge stage)
    judge.py      an instruct model asked over the bus (FAK_SCREEN_JUDGE_METHOD=ask)          ~seconds

`Screener.inline` gives the fast verdict every request waits for; `Screener.model_stage` the second
opinion, which the adjudicator runs either before answering (`screen_model=sync`) or after it
(`async`: a late quarantine, enforced by the gateways' context filters and the kvmmu's eviction).

What is screened is a tool result, or an MCP tool's description (`kind="tool_description"`). A description
is written to the model ("use this tool when you need…"), so it gets the inline rules plus those for tool
poisoning (inline.DESCRIPTION_RULES), and not the classifier: trained on tool results, it scores benign
descriptions up to 0.79 and poisoned ones as low as 0.14 (tests/data/mcp/tool_descriptions.jsonl), which
is no signal either way.

Spans: a quarantine says where, in character offsets of the content as given (`Verdict.spans`), so that a
policy with `quarantine: spans` can remove only those characters. The inline stage's come from the rules
that fired (`InlineResult.spans`); the model stage's are its windows at or above the threshold, mapped back
from the revealed text (`Revealed.origin`); text with no place in the original (a decoded payload) spans
all of it. Each span is widened to the sentence around it (at most WIDEN characters each way): a rule
matches the trigger ("ignore all previous instructions"), and the rest of that sentence is the payload.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass

from fakcore.protocol import WINDOW_CHARS, ContentKind, TextSpan
from fakcore.screening import fastmodel, inline
from fakcore.screening.model import DEFAULT_PATH, NgramModel
from fakcore.screening.normalize import Revealed, reveal

log = logging.getLogger("fak.screening")


@dataclass(frozen=True)
class Verdict:
    quarantine: bool
    detector: str  # the rule ("instruction_override", …) or "model:ngram-lr"; "" when clean
    score: float
    reason: str
    stage: str  # inline | model
    spans: tuple[TextSpan, ...] = ()  # a quarantine: where, in offsets of the content (sorted, disjoint)

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
        inline.prepare()  # the rules' first-use parsing, here rather than in the first long result's latency
        if self.model is not None:
            fastmodel.warm()  # compiled (or loaded from numba's cache) now, not in the first result's latency

    def inline(self, content: str, kind: ContentKind = "tool_result", threshold: float | None = None,
               revealed: Revealed | None = None) -> Verdict:
        """`threshold`: a key's own (policy `screening.inline_threshold`), else the screener's; `revealed`:
        `reveal(content)` if the caller has it already."""
        r = inline.screen(content, kind, revealed)
        hit = r.score >= (self.inline_threshold if threshold is None else threshold)
        return Verdict(hit, r.detector, r.score, r.reason, "inline", inline_spans(content, r) if hit else ())

    def model_stage(self, content: str, kind: ContentKind = "tool_result", threshold: float | None = None,
                    revealed: Revealed | None = None) -> Verdict:
        """The classifier's verdict; a tool description is never quarantined by it (see the module's docstring)."""
        if self.model is None or kind == "tool_description":
            return Verdict(False, "", 0.0, "", "model")
        t = self.model_threshold if threshold is None else threshold
        windows = self.model.window_scores(content, revealed)  # the score is the best window's
        p = max((w[0] for w in windows), default=0.0)
        if p < t:
            return Verdict(False, "", round(p, 4), "", "model")
        reason = "the classifier reads it as an injection"
        spans = model_spans(content, [w for w in windows if w[0] >= t], "model:ngram-lr", reason)
        return Verdict(True, "model:ngram-lr", round(p, 4), reason, "model", spans)

    def screen(self, content: str, kind: ContentKind = "tool_result", inline_threshold: float | None = None,
               model_threshold: float | None = None) -> Verdict:
        """Both stages: the inline verdict if it quarantines, else the model's."""
        revealed = reveal(content)  # once, for both stages
        v = self.inline(content, kind, inline_threshold, revealed)
        if v.quarantine or kind == "tool_description":
            return v
        m = self.model_stage(content, threshold=model_threshold, revealed=revealed)
        return m if m.quarantine else Verdict(False, "", max(v.score, m.score), "", "model" if self.model else "inline")


# ---------------------------------------------------------------------------------------------------------
# Spans: where a quarantine's offending characters are
# ---------------------------------------------------------------------------------------------------------

WIDEN = 240  # the most characters a span grows by on each side to cover its sentence
_SENTENCE_END = re.compile(r"[.!?\u3002\uff01\uff1f](?=\s|$)|\n")


def _sentence(text: str, start: int, end: int) -> tuple[int, int]:
    """[start, end) widened to the sentence(s) holding it, within WIDEN characters each way."""
    lo = max(0, start - WIDEN)
    cuts = [m.end() for m in _SENTENCE_END.finditer(text, lo, start)]
    s = cuts[-1] if cuts else lo
    while s < start and text[s].isspace():
        s += 1
    m = _SENTENCE_END.search(text, max(end - 1, start), min(len(text), end + WIDEN))
    e = m.end() if m else min(len(text), end + WIDEN)
    if e > end and text[e - 1] == "\n":
        e -= 1  # the line break stays: the next line is another sentence
    return s, max(e, end)


def merge(spans: Iterable[TextSpan], text: str, widen: bool = True) -> tuple[TextSpan, ...]:
    """Spans clipped to the text, widened to their sentences, sorted, and overlapping (or whitespace-apart)
    ones merged (the first one's detector names the merged span)."""
    out: list[TextSpan] = []
    cleaned = []
    for sp in spans:
        a, b = max(0, min(sp.start, len(text))), max(0, min(sp.end, len(text)))
        if b > a:
            cleaned.append(TextSpan(start=a, end=b, detector=sp.detector, reason=sp.reason))
    for sp in sorted(cleaned, key=lambda x: (x.start, x.end)):
        a, b = _sentence(text, sp.start, sp.end) if widen else (sp.start, sp.end)
        if out and (a <= out[-1].end or not text[out[-1].end:a].strip()):
            last = out[-1]
            out[-1] = TextSpan(start=last.start, end=max(last.end, b), detector=last.detector, reason=last.reason)
        else:
            out.append(TextSpan(start=a, end=b, detector=sp.detector, reason=sp.reason))
    return tuple(out)


def _as_span(item: object, detector: str, reason: str) -> TextSpan | None:
    """One of InlineResult.spans, a (start, end) pair (or anything with .start and .end), named by the
    verdict's detector: the rules' spans are merged across rules, so none is one rule's alone."""
    if isinstance(item, tuple | list) and len(item) == 2:
        a, b = item
    else:
        a, b = getattr(item, "start", None), getattr(item, "end", None)
    if isinstance(a, int) and isinstance(b, int):
        return TextSpan(start=a, end=b, detector=detector, reason=reason)
    return None


def inline_spans(content: str, r: inline.InlineResult) -> tuple[TextSpan, ...]:
    """The inline stage's spans (the rules that fired), or the whole text when the rules give none."""
    found = [sp for sp in (_as_span(x, r.detector, r.reason) for x in getattr(r, "spans", ()) or ()) if sp is not None]
    if not found:
        return (TextSpan(start=0, end=len(content), detector=r.detector, reason=r.reason),) if content else ()
    return merge(found, content)


def model_spans(content: str, windows: list[tuple[float, int, int]], detector: str, reason: str) -> tuple[TextSpan, ...]:
    """Windows (offsets in the revealed text) at or above the threshold, as spans of the content."""
    if not windows:
        return (TextSpan(start=0, end=len(content), detector=detector, reason=reason),) if content else ()
    r = reveal(content)
    return merge((TextSpan(start=a, end=e, detector=detector, reason=reason) for a, e in (r.span(w[1], w[2]) for w in windows)),
                 content)


def window(text: str, spans: list[TextSpan] | tuple[TextSpan, ...], limit: int = WINDOW_CHARS) -> str:
    """The text around the first span, at most `limit` characters (the span's start first when it is longer)."""
    if not spans:
        return ""
    a, b = spans[0].start, spans[0].end
    pad = max(0, (limit - (b - a)) // 2)
    lo = max(0, a - pad)
    return text[lo:min(len(text), b + pad)][:limit] if b - a < limit else text[a:a + limit]
