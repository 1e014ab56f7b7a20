"""What a rule is, and how the tables (rules_en.py, rules_intl.py, rules_cjk.py) write one.

A rule is (detector, score, pattern, reason, needles): `rule()` compiles the pattern for the lower-cased text
(inline.py matches it there) and splits the needles, so a table reads as one call per rule.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

M = re.M  # the tables' one flag: ^ and $ at every line


@dataclass(frozen=True)
class Rule:
    detector: str
    score: float
    pattern: re.Pattern[str]  # matched against the lower-cased text
    reason: str
    needles: tuple[tuple[str, ...], ...] = ()  # every group has a substring that every match contains
    cased: bool = False  # matched against the text as it is (a placeholder's capitals are the sign)
    lang: str = ""  # runs only on text that has signs of this language (inline.LANG_SIGNS)
    near: re.Pattern[str] | None = None  # must match too, on the same line within inline._NEAR characters of the match


def lower_pattern(src: str) -> str:
    """Lower-case a pattern's letters, not its escapes (\\S, \\W, \\B keep their meaning)."""
    out, i = [], 0
    while i < len(src):
        if src[i] == "\\" and i + 1 < len(src):
            out.append(src[i: i + 2])
            i += 2
        else:
            out.append(src[i].lower())
            i += 1
    return "".join(out)


def rule(detector: str, score: float, needles: str, pattern: str, reason: str, flags: int = 0, cased: bool = False,
         near: str = "") -> Rule:
    """`needles`: groups split by ' & ', alternatives by '|' ("ignor|forget & instruction"), lower case;
    '' always runs."""
    groups = tuple(tuple(n for n in g.split("|")) for g in needles.split(" & ")) if needles else ()
    compiled = re.compile(pattern if cased else lower_pattern(pattern), flags)
    second = re.compile(lower_pattern(near), flags) if near else None
    return Rule(detector, score, compiled, reason, groups, cased, near=second)


def in_lang(lang: str, rules: list[Rule]) -> list[Rule]:
    """The rules, run only on text that has signs of `lang` (inline.LANG_SIGNS)."""
    return [dataclasses.replace(r, lang=lang) for r in rules]
