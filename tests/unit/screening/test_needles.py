"""The one pass that looks every needle up (needles.py) finds what str.find finds: for every string the
inline rules look up (needles, the strings their matches start with, languages' signs), how often it is in a
text (overlaps counted), where first, and its first places; and which rules it rules out is what looking
each needle up gives."""

from __future__ import annotations

import random

from bench import screening_corpus as corpus
from fakcore.screening import inline
from fakcore.screening.needles import SPOTS, Vocabulary


def _places(low: str, s: str) -> list[int]:
    out, i = [], low.find(s)
    while i >= 0:
        out.append(i)
        i = low.find(s, i + 1)
    return out


def _texts() -> list[str]:
    pool = [e.text for e in corpus.build(clean=150, hard=150, injected=150, notes=30)]
    rng = random.Random(4)
    strings = inline._plan(inline._FOR_KIND["tool_result"]).vocabulary.strings
    # the strings themselves, run together and overlapping, at the start and the end of a text
    packed = ["".join(rng.choice(strings) for _ in range(200)) for _ in range(20)]
    odd = ["", "a", "ai", "aaaa" * 50, "ai" * 300, "\U0001f600ai\U0001f600", "a\udc80i ignore", "ignor", "ignore", "ｉｇｎｏｒｅ"]
    return [inline._lower(t) for t in pool + packed + odd + ["\n".join(rng.sample(pool, 8)) for _ in range(20)]]


def test_every_string_is_found_where_str_find_finds_it():
    vocabulary = inline._plan(inline._FOR_KIND["tool_description"]).vocabulary
    for low in _texts():
        counts, first, spots = vocabulary.scan(low)
        for i, s in enumerate(vocabulary.strings):
            want = _places(low, s)
            assert (counts[i], first[i]) == (len(want), want[0] if want else -1), (s, low[:60])
            assert spots[i, :min(len(want), SPOTS)].tolist() == want[:SPOTS], (s, low[:60])


def test_the_rules_ruled_out_are_those_a_group_of_whose_needles_is_not_there():
    for rules in inline._FOR_KIND.values():
        plan = inline._plan(rules)
        for low in _texts():
            fires, _ = plan.may_fire(low)
            want = [all(any(n in low for n in g) for g in r.needles) for r in rules]
            assert fires == want, low[:60]


def test_a_vocabulary_of_odd_strings():
    v = Vocabulary(["x", "xy", "xyz", "xyzw", "xyzwv", "é", "日本", "\U0001f600"], [(("x",), ("日本", "é")), ()])
    counts, first, _ = v.scan("xyzwv xy 日本 \U0001f600")
    assert counts.tolist() == [2, 2, 1, 1, 1, 0, 1, 1] and first.tolist() == [0, 0, 0, 0, 0, -1, 9, 12]
    assert v.fires(counts).tolist() == [True, True]
    assert v.fires(v.scan("x y")[0]).tolist() == [False, True]
