"""Where in a text a rule's match can be, read off its pattern (the engine's own parse, once per pattern):
how long a match gets (`_width`: inline.py runs a rule only in windows that wide around its needles), the
strings every match starts with (`_starts`: it is tried only where one is), and, for a pattern that opens
on a clause's start, the words after it (`_lead`: tried only at those and just before them).

Each answer must hold for every match (a rule is never tried where it could match): the analysis gives up
(None, or the window's full width) on whatever it does not know, and tests/unit/screening/
test_inline_shortcuts.py checks the shortcuts against the plain scan.
"""

from __future__ import annotations

import functools
import re

_WINDOW = 600  # the most characters either side of a needle that a match can reach
_RUN = 40  # what a real unbounded run (\s*, \w+, [^)\s]+) stays within


@functools.cache
def _width(pattern: re.Pattern[str]) -> int:
    """The longest string the pattern matches in practice (a match lies within this of its needle): an
    unbounded repeat (\\s*, \\w+) counted as _RUN characters; _WINDOW if the parser is not there."""
    try:
        import re._parser as sre  # the engine's own parser (what re.compile runs)

        tree = sre.parse(pattern.pattern, pattern.flags)
    except (ImportError, AttributeError, re.error):
        return _WINDOW

    def width(items) -> int:
        total = 0
        for op, av in items:
            name = str(op)
            if name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
                lo, hi, sub = av
                total += (hi if hi != sre.MAXREPEAT else max(lo, _RUN)) * width(sub)
            elif name == "BRANCH":
                total += max(width(alt) for alt in av[1])
            elif name in ("SUBPATTERN", "ATOMIC_GROUP"):
                total += width(av if name == "ATOMIC_GROUP" else av[-1])
            elif name in ("AT", "ASSERT", "ASSERT_NOT"):
                pass
            else:
                total += 1
        return total

    return min(width(tree), _WINDOW)


def _first_strings(items: list, i: int = 0) -> set[str] | None:
    """The strings one of which every match of the parsed sequence items[i:] starts with (a character each
    where a set starts it), or None where a match may start with anything."""
    if i == len(items):
        return None  # the rest may match nothing: the match may start anywhere
    op, av = items[i]
    name = str(op)
    if name == "LITERAL":
        run, j = "", i
        while j < len(items) and str(items[j][0]) == "LITERAL":
            run += chr(items[j][1])
            j += 1
        after = _first_strings(items, j) if len(run) < 4 else None  # "th" + (is|e) reads better as "thi", "the"
        return {run + a for a in after} if after is not None and len(after) <= 32 else {run}
    if name == "IN":
        return _chars(av)
    if name == "BRANCH":  # (?:a|b)c starts as ac or as bc
        out: set[str] = set()
        for alt in av[1]:
            sub = _first_strings(list(alt) + list(items[i + 1:]))
            if sub is None:
                return None
            out |= sub
        return out
    if name in ("SUBPATTERN", "ATOMIC_GROUP"):
        return _first_strings(list(av if name == "ATOMIC_GROUP" else av[-1]) + list(items[i + 1:]))
    if name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
        body = _first_strings(list(av[2]))  # alone: what follows a repeat depends on how often it ran
        if body is None or av[0] >= 1:
            return body
        rest = _first_strings(items, i + 1)
        return None if rest is None else body | rest
    if (name == "AT" and str(av) in ("AT_BOUNDARY", "AT_NON_BOUNDARY")) or name in ("ASSERT", "ASSERT_NOT"):
        return _first_strings(items, i + 1)  # looks without moving: the match starts with what follows
    return None  # ^, \w, a negated set…: anywhere


def _chars(av) -> set[str] | None:
    """The characters of a parsed set ([…]), if it lists them (not negated, no category, no large range)."""
    chars: set[str] = set()
    for kind, value in av:
        if str(kind) == "LITERAL":
            chars.add(chr(value))
        elif str(kind) == "RANGE" and value[1] - value[0] < 16:
            chars.update(chr(c) for c in range(value[0], value[1] + 1))
        else:
            return None  # negated, a category (\s), or large
    return chars


def _parsed(pattern: re.Pattern[str]) -> list | None:
    """The pattern's parse, if the engine cannot skip ahead in it (no literal or set it must start with)."""
    try:
        import re._compiler as sre_compile
        import re._parser as sre

        tree = sre.parse(pattern.pattern, pattern.flags)
        if pattern.flags & re.IGNORECASE or sre_compile._get_literal_prefix(tree, pattern.flags)[0] \
                or sre_compile._get_charset_prefix(tree, pattern.flags):
            return None
    except (ImportError, AttributeError, re.error):
        return None
    return list(tree)


@functools.cache
def _starts(pattern: re.Pattern[str]) -> tuple[str, ...] | None:
    """The strings (two characters or more) one of which every match of the pattern starts with, for a
    pattern the engine cannot skip ahead in; else None. The engine skips only to a leading literal or set of
    them: before a group of alternatives that each start with a group ("(?:send|forward)… |(?:reveal|print)…")
    it tries a match at every place, which `_search` avoids by trying only where one of these is."""
    items = _parsed(pattern)
    found = _first_strings(items) if items is not None else None
    if found is None or min(map(len, found)) < 2:  # a single character ("." or a newline) is in too many places
        return None
    return tuple(sorted(found))


def _is_spaces(item) -> bool:
    r"""The parsed item is \s* (or \s+: any repeat of \s without an upper bound)."""
    import re._parser as sre

    op, av = item
    return str(op) in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT") and av[1] == sre.MAXREPEAT and len(av[2]) == 1 \
        and str(av[2][0][0]) == "IN" and [(str(k), str(v)) for k, v in av[2][0][1]] == [("CATEGORY", "CATEGORY_SPACE")]


Lead = tuple[frozenset[str] | None, tuple[str, ...]]  # (characters a clause may start after, start strings)


def _lead_of(items: list) -> Lead | None:
    """(the lead's characters, the start strings of what follows) of a sequence that opens on a clause's
    start, (None, its start strings) of one that has them, else None."""
    if items and str(items[0][0]) == "BRANCH":
        chars: set[str] | None = set()
        for alt in items[0][1][1]:
            alt = list(alt)
            if len(alt) == 1 and str(alt[0][0]) == "AT" and str(alt[0][1]) in ("AT_BEGINNING", "AT_BEGINNING_STRING"):
                continue  # ^ (a line start, under re.M)
            c = _chars(alt[0][1]) if str(alt[0][0]) == "IN" else None
            if c is None or len(alt) > 2 or not all(_is_spaces(x) for x in alt[1:]):
                chars = None
                break
            chars |= c
        if chars:
            rest = 2 if len(items) > 1 and _is_spaces(items[1]) else 1
            words = _first_strings(items, rest)
            return (frozenset(chars), tuple(sorted(words))) if words and min(map(len, words)) >= 2 else None
    words = _first_strings(items)
    return (None, tuple(sorted(words))) if words and min(map(len, words)) >= 2 else None


@functools.cache
def _lead(pattern: re.Pattern[str]) -> tuple[Lead, ...] | None:
    """For a pattern without start strings (`_starts`) because it opens on a clause's start,
    `(?:^|[\\n.!?:]\\s*)words…` or `(?:^|[\\"':])\\s*words…` (a line start, or one of a few characters, then
    spaces, then words), alone or as one of its alternatives: each alternative's `Lead`; else None. A
    newline or a '.' is everywhere, but the words' start strings are not, and every match starts at one of
    them or just before it: in the spaces before it, or at the character before those (`_led_candidates`)."""
    items = _parsed(pattern)
    if not items:
        return None
    alts = [list(alt) for alt in items[0][1][1]] if len(items) == 1 and str(items[0][0]) == "BRANCH" else [items]
    leads = [_lead_of(alt) for alt in alts]
    if any(lead is None for lead in leads) and len(alts) > 1:
        leads = [_lead_of(items)]  # a branch of clause starts, not of alternatives
    if any(lead is None for lead in leads) or all(chars is None for chars, _ in leads):
        return None
    return tuple(leads)
