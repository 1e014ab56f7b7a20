"""The inline stage: rules for the shapes prompt injections take. Microseconds to a millisecond a result.

Each rule is (detector, score, pattern, reason, needles) (rules.py). A result's score combines the rules that
fire as a noisy-OR (1 - Π(1 - sᵢ)); disguises found while revealing the text (normalize.py) count as rules of
their own. Strong rules score 0.7-0.97; borderline ones (a fake "system message" header, money sent to an
account, text hidden in markup) 0.45-0.5: at the default threshold (0.4) they quarantine on their own, at
0.5 they need a second sign. On fak's corpus (training split) 0.4 costs 0.9% FPR for +3% TPR. Rules run on
the revealed text and on every decoded layer (a base64 payload that decodes to an instruction scores as the
instruction).

What the rules look for, in words, in English, German, Spanish, French, Italian, Portuguese, Dutch,
Russian, Japanese, Chinese and Korean:
- instructions to drop instructions ("ignore previous instructions");
- instructions addressed to the model: "note to the AI", "if you are a language model", vocatives
  ("Assistant, …", "Hi assistant, could you also forward…", "Automated payment assistant: please pay…");
- claims that the action was approved already, said to the model ("already approved by Anna, assistant
  please go ahead");
- chat-template role and turn markers that would open a turn of their own; fake tool calls;
- fake completions and new tasks ("Task complete. New task: …");
- concealment from the user ("do not mention this", "without asking for confirmation");
- exfiltration links: images or links whose query carries a placeholder for data or is left empty for
  it, instructions to append data to a URL; shell pipes;
- hidden text: Unicode tags, zero-width characters inside words, bidi overrides, look-alike letters,
  encoded payloads with an instruction to decode them.

The tables, by script: rules_en.py (English, and DESCRIPTION_RULES for tool descriptions), rules_intl.py
(seven languages, each built from one table of its words), rules_cjk.py (Japanese, Chinese, Korean). A
rule's score means the same in all of them; this file is how they run.

How they run, for speed (a 4k-character result in a few milliseconds):
- patterns are written in lower case and run without re.IGNORECASE on the lower-cased text (IGNORECASE
  makes Python's engine try every position); a leading word boundary is checked after the match, so a
  pattern can start with a literal the engine skips to;
- a rule runs only if its needles (substrings every match contains) are in the text, and a language's rules
  only if the text has signs of the language (LANG_SIGNS: its script, its commonest short words); on a long
  text, one numpy pass (a bitmap of its character triples) first rules out every rule whose needles cannot be
  there, and most needles with them, instead of a str.find per needle (`_Plan`);
- on a long text a rule runs only in windows around its needles (as wide as its longest match);
- where the engine cannot skip ahead (a pattern that opens with a group of alternatives, each a group of
  words: "(?:send|forward)…|(?:reveal|print)…"), a rule is tried only where one of the strings its matches
  start with is (`_starts`);
- a decoded layer needs only its strongest detector: its rules run strongest first, each to its first
  match, and stop once that is settled (`_strongest`);
- a claim that needs two parts ("already approved" … "assistant,") matches the rarer part and looks for
  the other near it (`near`), instead of one pattern that would try both at every position;
- repeats are bounded ({0,40}) and runs of URL characters possessive ({1,300}+), so no input makes a rule
  backtrack for long (tests/unit/screening/test_inline_multilingual.py has the adversarial inputs).

Where: `InlineResult.spans` are the (start, end) in the content, as it arrived, of every match that fired
(through `Revealed.origin`), of a disguise's characters, and of the payload a decoded layer came from.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import re
from dataclasses import dataclass

import numpy as np

from fakcore.screening import rules_cjk, rules_en, rules_intl
from fakcore.screening.normalize import Revealed, reveal
from fakcore.screening.rules import Rule

RULES: list[Rule] = rules_en.RULES + rules_intl.RULES + rules_cjk.RULES  # in this order: ties go to the first
DESCRIPTION_RULES: list[Rule] = rules_en.DESCRIPTION_RULES
LANG_SIGNS: dict[str, re.Pattern[str] | tuple[str, ...]] = {**rules_intl.SIGNS, **rules_cjk.SIGNS}

_ASCII_SIGNS = {lang: tuple(n for n in signs if n.isascii()) for lang, signs in LANG_SIGNS.items() if isinstance(signs, tuple)}

_WINDOW = 600  # the most characters either side of a needle that a match can reach
_NEAR = 100  # how far apart the two halves of a `near` rule may be
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


@functools.cache
def _starts(pattern: re.Pattern[str]) -> tuple[str, ...] | None:
    """The strings (two characters or more) one of which every match of the pattern starts with, for a
    pattern the engine cannot skip ahead in; else None. The engine skips only to a leading literal or set of
    them: before a group of alternatives that each start with a group ("(?:send|forward)… |(?:reveal|print)…")
    it tries a match at every place, which `_search` avoids by trying only where one of these is."""
    try:
        import re._compiler as sre_compile
        import re._parser as sre

        tree = sre.parse(pattern.pattern, pattern.flags)
        if pattern.flags & re.IGNORECASE or sre_compile._get_literal_prefix(tree, pattern.flags)[0] \
                or sre_compile._get_charset_prefix(tree, pattern.flags):
            return None
    except (ImportError, AttributeError, re.error):
        return None

    def first(items: list, i: int = 0) -> set[str] | None:
        if i == len(items):
            return None  # the rest may match nothing: the match may start anywhere
        op, av = items[i]
        name = str(op)
        if name == "LITERAL":
            run, j = "", i
            while j < len(items) and str(items[j][0]) == "LITERAL":
                run += chr(items[j][1])
                j += 1
            after = first(items, j) if len(run) < 4 else None  # "th" + (is|e) reads better as "thi", "the"
            return {run + a for a in after} if after is not None and len(after) <= 32 else {run}
        if name == "IN":
            chars: set[str] = set()
            for kind, value in av:
                if str(kind) == "LITERAL":
                    chars.add(chr(value))
                elif str(kind) == "RANGE" and value[1] - value[0] < 16:
                    chars.update(chr(c) for c in range(value[0], value[1] + 1))
                else:
                    return None  # negated, a category (\s), or large
            return chars
        if name == "BRANCH":  # (?:a|b)c starts as ac or as bc
            out: set[str] = set()
            for alt in av[1]:
                sub = first(list(alt) + list(items[i + 1:]))
                if sub is None:
                    return None
                out |= sub
            return out
        if name in ("SUBPATTERN", "ATOMIC_GROUP"):
            return first(list(av if name == "ATOMIC_GROUP" else av[-1]) + list(items[i + 1:]))
        if name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
            body = first(list(av[2]))  # alone: what follows a repeat depends on how often it ran
            if body is None or av[0] >= 1:
                return body
            rest = first(items, i + 1)
            return None if rest is None else body | rest
        if (name == "AT" and str(av) in ("AT_BOUNDARY", "AT_NON_BOUNDARY")) or name in ("ASSERT", "ASSERT_NOT"):
            return first(items, i + 1)  # looks without moving: the match starts with what follows
        return None  # ^, \w, a negated set…: anywhere

    found = first(list(tree))
    if found is None or min(map(len, found)) < 2:  # a single character ("." or a newline) is in too many places
        return None
    return tuple(sorted(found))


def _candidates(subject: str, tokens: tuple[str, ...], a: int, b: int) -> list[int] | None:
    """Where in subject[a:b] a match may start (one of `tokens` is there), sorted; None if in more than one
    place in 8 (the engine's own scan is as fast then)."""
    limit, out = (b - a) // 8, set()
    for token in tokens:
        i = subject.find(token, a, b)
        while i >= 0:
            out.add(i)
            if len(out) > limit:
                return None
            i = subject.find(token, i + 1, b)
    return sorted(out)


@dataclass(frozen=True)
class InlineResult:
    score: float
    detector: str  # the strongest rule that fired ("" when none)
    reason: str
    fired: tuple[str, ...] = ()  # every detector that fired, strongest first
    spans: tuple[tuple[int, int], ...] = ()  # (start, end) in the content of what fired, sorted, overlaps merged


def _combine(hits: dict[str, tuple[float, str]]) -> tuple[float, str, str, tuple[str, ...]]:
    if not hits:
        return 0.0, "", "", ()
    order = sorted(hits, key=lambda d: -hits[d][0])
    clean = 1.0
    for d in order:
        clean *= 1.0 - hits[d][0]
    return 1.0 - clean, order[0], hits[order[0]][1], tuple(order)


# -- matching --------------------------------------------------------------------------------------------

_FOLD = (("\u2019", "'"), ("\u2018", "'"), ("\u02bc", "'"), ("\u201c", '"'), ("\u201d", '"'), ("\u201e", '"'))
# quotation marks that say which way they face (in the text as it is); ASCII " and ' are guessed from their neighbours
_PAIRS = {"\u00ab": "\u00bb", "\u2039": "\u203a", "\u300c": "\u300d", "\u300e": "\u300f", "\u201c": "\u201d", "\u201e": "\u201c",
          "\u2018": "\u2019", "\u201a": "\u2018"}
_MENTION = re.compile(
    r"(?:such as|for example|e\.g\.|like|phrases?|called|words?|text|strings?|means|translation|sentences?|lines?|prompts?|commands?|"
    r"instructions?|message|reading|saying|wie|etwa|z\. ?b\.|zum beispiel|sätze?|formulierungen?|befehle?|namens|heißt|bedeutet|como|por ejemplo|frases?|"
    r"llamad[oa]|significa|del tipo|comme|par exemple|appelée?|signifie|du type|tel(?:le)?s? que|come|ad esempio|per esempio|frasi?|"
    r"chiamat[oa]|por exemplo|chamad[oa]|do tipo|zoals|bijvoorbeeld|bijv\.|zinnen|zin|als|genaamd|betekent|как|например|фраз[аыу]?|типа|"
    r"вроде|означает|под названием|例えば|たとえば|例如|比如|诸如|諸如|像是|像|예를 들어|예컨대)[\s,:'\"]*$")
_POST_MENTION = re.compile(r"[\s'\"]*(?:といった|のような|などの|などと|という|之类|之類|等|这样的|這樣的|这样|這樣|와 같은|과 같은|같은|라는|이라는|등의"
                           r"|(?:is|was|are|were) (?:a |an |the )?(?:classic|common|typical|known|well-known|famous|textbook))")
_LEAD = " \t\n.,;:?¡¿«»\"'(<>#*|-–—「」『』"  # what a pattern may anchor on before the words it matches
# a warning about what is quoted: phishing, fraud, an attack (within 150 characters before the quotation)
_WARNING = re.compile(r"phishing|scam|fraud|fake|attack|injection|malicious|suspicious|hijack|golpe|golpista|estafa|fraude|arnaque|escroquer|"
                      r"example|exemple|ejemplo|esempio|exemplo|voorbeeld|beispiel|пример|test case|contains|containing|do not (?:act on|follow)|"
                      r"à ne pas suivre|no (?:lo )?sigas|non seguire|não siga|niet volgen|nicht befolgen|не выполняй|"
                      r"truffa|betrug|betrüger|gefälscht|oplichting|мошенни|фишинг|атак|诈骗|詐騙|欺诈|伪造|偽造|詐欺|偽の|사기|가짜|피싱")
_FIELD = re.compile(r"[\w-]+[\"']?\s*[:=]\s*['\"]?$")  # a key before its value ("text": "…", text: '…'), not a mention
_CLOSING = {m: re.compile(f"(?<=\\S){m}(?![^\\W_])") for m in "\"'"}  # an ASCII mark after a word, not before one


def _enclosing_quote(text: str, s: int) -> tuple[int, int] | None:
    """(opening, closing) of the quotation that text[s] is inside (up to 400 characters either way), if any;
    closing is -1 when it is not found."""
    lo, best = max(0, s - 400), None
    for opener, closer in _PAIRS.items():
        q = text.rfind(opener, lo, s)
        if q >= 0 and (best is None or q > best[0]) and text.find(closer, q + 1, s) < 0:
            best = (q, text.find(closer, s, s + 400))
    for mark in "\"'":  # the nearest one before s that opens (not after a letter, not before a space) and is not closed
        q = text.rfind(mark, lo, s)
        while q >= 0 and ((q and text[q - 1].isalnum()) or text[q + 1].isspace()):
            q = text.rfind(mark, lo, q)
        if q >= 0 and (best is None or q > best[0]):
            close = _CLOSING[mark].search(text, q + 1, s + 400)
            if close is None or close.start() >= s:
                best = (q, close.start() if close else -1)
    return best


def _quoted_mention(text: str, low: str, start: int, end: int) -> bool:
    """The match is inside a quotation given as an example ("attacks such as 'ignore previous
    instructions'", 「…」といった文, “…” 같은 메모), not said."""
    while start < end - 1 and low[start] in _LEAD:
        start += 1
    quote = _enclosing_quote(text, start)
    if quote is None:
        return False
    q, close = quote
    before = low[max(0, q - 41): q]
    if (_MENTION.search(before) and not _FIELD.search(before)) or _WARNING.search(low, max(0, q - 150), q):
        return True
    return close >= 0 and bool(_POST_MENTION.match(low, close + 1))


def _wordish(c: str) -> bool:
    """A letter or digit of a script that separates words (a match starting after one is mid-word)."""
    return (c.isalnum() or c == "_") and c < "\u2e80"


def _lower(text: str) -> str:
    """Lower case, one character for one (offsets stay valid), curly quotes made straight."""
    low = text.lower()
    if len(low) != len(text):  # 'İ' lowers to two characters
        low = "".join(c.lower()[:1] for c in text)
    for curly, straight in _FOLD:
        if curly in low:
            low = low.replace(curly, straight)
    return low


# -- which rules can fire on a text: one pass over it instead of a str.find per needle ----------------------
# A long text gets a bitmap of the hashes of every character, pair and triple of characters in it (numpy, one
# pass). A needle one of whose triples (its pair or character, if shorter) is not in the bitmap is not in the
# text, and a rule one of whose needle groups has no needle left cannot fire: numpy works that out for every
# rule at once (`_Plan.may_fire`), and those rules are skipped. The others are admitted as before, needle by
# needle, less the needles ruled out (a hash collision only costs a lookup), so the bitmap changes no verdict
# (tests/unit/screening/test_inline_shortcuts.py). On the bench's 4k
# texts it cuts the ~430 needle lookups to ~40 and the inline stage's CPU time by a quarter.
_GRAMS_FROM = 512  # characters: below this a text's needle lookups cost about what its bitmap does
_GRAM_BITS = 16  # 2^16 entries: a 4k-character text sets ~6% of them
_A, _B, _C, _PAIR, _ONE = 0x9E3779B1, 0x85EBCA77, 0xC2B2AE3D, 0x27D4EB2F, 0x165667B1  # odd multipliers spread the bits


def _text_grams(low: str) -> np.ndarray:
    """The text's bitmap: entry h is 1 if some character, pair or triple of characters hashes to h."""
    c = np.frombuffer(low.encode("utf-32-le", "surrogatepass"), np.uint32)
    a, b = c * np.uint32(_A), c * np.uint32(_B)  # uint32 products wrap, as `_needle_grams` masks them
    shift = np.uint32(32 - _GRAM_BITS)
    bitmap = np.zeros(1 << _GRAM_BITS, np.uint8)
    bitmap[(a ^ np.uint32(_ONE)) >> shift] = 1
    bitmap[(a[:-1] ^ b[1:] ^ np.uint32(_PAIR)) >> shift] = 1
    bitmap[(a[:-2] ^ b[1:-1] ^ (c[2:] * np.uint32(_C))) >> shift] = 1
    return bitmap


def _needle_grams(needle: str) -> list[int]:
    """The entries a needle's triples (its pair or character, if shorter) hash to, as in `_text_grams`."""
    cs, m, shift = [ord(ch) for ch in needle], 0xFFFFFFFF, 32 - _GRAM_BITS
    if len(cs) == 1:
        return [((cs[0] * _A & m) ^ _ONE) >> shift]
    if len(cs) == 2:
        return [((cs[0] * _A & m) ^ (cs[1] * _B & m) ^ _PAIR) >> shift]
    return sorted({((x * _A & m) ^ (y * _B & m) ^ (z * _C & m)) >> shift for x, y, z in zip(cs, cs[1:], cs[2:], strict=False)})


class _Plan:
    """A rule list's needles, grouped as its rules group them, for `may_fire`: rule r's groups are
    groups[group_at[r]:group_at[r + 1]], group g's needles needles[needle_at[g]:needle_at[g + 1]], needle n's
    bitmap entries entries[entry_at[n]:entry_at[n + 1]] (a rule without needles gets one group of "")."""

    def __init__(self, rules: list[Rule]):
        self.rules = rules
        groups = [r.needles or (("",),) for r in rules]
        needles = [n for gs in groups for g in gs for n in g]
        grams = [_needle_grams(n) if n else [] for n in needles]
        self.always = np.asarray([not n for n in needles])  # "" is in every text (its one entry is a stand-in)
        self.entries = np.asarray([h for g in grams for h in (g or [0])], np.intp)
        self.entry_at = np.cumsum([0] + [max(1, len(g)) for g in grams[:-1]])
        self.needle_at = np.cumsum([0] + [len(g) for gs in groups for g in gs][:-1])
        self.group_at = np.cumsum([0] + [len(gs) for gs in groups[:-1]])
        self.needles = needles
        self.rule_of = np.repeat(np.arange(len(rules)), [sum(map(len, gs)) for gs in groups])  # per needle

    def may_fire(self, low: str) -> tuple[list[bool], dict[str, int]]:
        """Per rule: False if a group of its needles has none in the text (so it cannot fire); and
        {needle: -1} for the needles of the other rules that are not in the text (they need no lookup)."""
        there = np.minimum.reduceat(_text_grams(low)[self.entries], self.entry_at).astype(bool) | self.always
        group = np.maximum.reduceat(there, self.needle_at)
        fires = np.minimum.reduceat(group, self.group_at)
        absent = itertools.compress(self.needles, (~there & fires[self.rule_of]).tolist())
        return fires.tolist(), dict.fromkeys(absent, -1)


_PLANS: dict[str, _Plan] = {}  # per kind of content (_FOR_KIND), made on first use


def _plan(rules: list[Rule]) -> _Plan | None:
    """The plan of one of _FOR_KIND's rule lists (any other list gets none: its rules are all admitted)."""
    for kind, listed in _FOR_KIND.items():
        if rules is listed:
            if kind not in _PLANS:
                _PLANS[kind] = _Plan(rules)
            return _PLANS[kind]
    return None


def prepare() -> None:
    """Do now what the rules otherwise do on first use (parse every pattern for its width and the strings its
    matches start with, list every needle): ~0.3 s, which a first long text would pay. The Screener calls it."""
    for r in RULES + DESCRIPTION_RULES:
        _width(r.pattern)
        _starts(r.pattern)
    for rules in _FOR_KIND.values():
        _plan(rules)


class _Text:
    """One text being screened: its lower-cased form and what has been looked up in it (needles, where
    they are, signs of a language), shared by all the rules."""

    def __init__(self, text: str, rules: list[Rule] | None = None):
        self.text, self.low, self.ascii = text, _lower(text), text.isascii()
        # per rule of `rules`: whether its needles may be in the text (a long text's, from its bitmap)
        plan = _plan(rules) if rules is not None and len(self.low) >= _GRAMS_FROM else None
        self.may_fire: list[bool] | None = None
        self._first: dict[str, int] = {}  # needle -> where it first is (-1: not in the text)
        if plan is not None:
            self.may_fire, self._first = plan.may_fire(self.low)
        self._spots: dict[str, list[int] | None] = {}
        self._langs: dict[str, bool] = {}
        self._groups: dict[tuple[str, ...], bool] = {}  # rules share groups (a language's words for the AI)
        self._group_spots: dict[tuple[str, ...], list[int] | None] = {}

    def has_any(self, needles: tuple[str, ...]) -> bool:
        """One of the needles is in the text (each looked up once a text; a rule's admission is the hot loop,
        hence the lookups written out here)."""
        first, low = self._first, self.low
        for needle in needles:
            i = first.get(needle)
            if i is None:
                i = first[needle] = low.find(needle)
            if i >= 0:
                return True
        return False

    def group_spots(self, group: tuple[str, ...]) -> list[int] | None:
        """Where the group's needles are, sorted (None: one of them too often for windows to pay); rules
        share groups."""
        if group not in self._group_spots:
            out: list[int] | None = []
            for needle in group:
                found = self.spots(needle)
                if found is None:
                    out = None
                    break
                out += found
            self._group_spots[group] = None if out is None else sorted(out)
        return self._group_spots[group]

    def spots(self, needle: str) -> list[int] | None:
        """Where the needle is (None: too often for windows to pay)."""
        if needle not in self._spots:
            out: list[int] | None = []
            i = self._first.get(needle, -1) if needle in self._first else self.low.find(needle)
            while i >= 0:
                out.append(i)
                if len(out) > 32:
                    out = None
                    break
                i = self.low.find(needle, i + 1)
            self._spots[needle] = out
        return self._spots[needle]

    def has_lang(self, lang: str) -> bool:
        hit = self._langs.get(lang)
        if hit is None:
            signs = LANG_SIGNS[lang]
            if isinstance(signs, re.Pattern):
                hit = not self.ascii and signs.search(self.text) is not None
            else:
                hit = self.has_any(_ASCII_SIGNS[lang] if self.ascii else signs)
            self._langs[lang] = hit
        return hit

    def admits(self, rule: Rule) -> bool:
        if rule.lang and not self.has_lang(rule.lang):
            return False
        for group in rule.needles:
            hit = self._groups.get(group)
            if hit is None:
                hit = self._groups[group] = self.has_any(group)
            if not hit:
                return False
        return True


def _windows(t: _Text, rule: Rule) -> list[tuple[int, int]]:
    """Where a match can be: within the rule's width of a needle of its first group (every match contains
    one), each window running on to the end of its line (so $, \\b and lookaheads see what they would)."""
    n = len(t.low)
    width = _width(rule.pattern)  # computed on first use (parsing every pattern at import costs 0.2 s)
    if not rule.needles or n <= 4 * width:
        return [(0, n)]
    spots = t.group_spots(rule.needles[0])
    if spots is None:
        return [(0, n)]
    out: list[tuple[int, int]] = []
    for p in spots:
        a, b = max(0, p - width), p + width
        nl = t.low.find("\n", b, b + 200)
        b = min(n, nl if nl >= 0 else b + 200)
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(b, out[-1][1]))
        else:
            out.append((a, b))
    return out


def _near(rule: Rule, low: str, s: int, e: int) -> tuple[int, int] | None:
    """(start, end) of the match together with the second half of a `near` rule, if it is there."""
    a = max(low.rfind("\n", 0, s) + 1, s - _NEAR - 80)
    line_end = low.find("\n", e)
    b = min(line_end if line_end >= 0 else len(low), e + _NEAR + 80)
    m = rule.near.search(low, a, b)
    while m is not None and (m.end() < s - _NEAR or m.start() > e + _NEAR):
        m = rule.near.search(low, m.start() + 1, b)
    return None if m is None else (min(s, m.start()), max(e, m.end()))


def _search(pattern: re.Pattern[str], subject: str, pos: int, end: int, starts: list[int] | None) -> re.Match[str] | None:
    """pattern.search(subject, pos, end), trying only at `starts` (every match starts at one) when known."""
    if starts is None:
        return pattern.search(subject, pos, end)
    for i in range(bisect.bisect_left(starts, pos), len(starts)):
        if starts[i] >= end:
            break
        if (m := pattern.match(subject, starts[i], end)) is not None:
            return m
    return None


def _matches(rule: Rule, t: _Text):
    """(start, end) of the rule's matches that start at a word boundary and are not quoted as an example."""
    text, low = t.text, t.low
    pattern, subject = rule.pattern, text if rule.cased else low
    tokens = _starts(pattern)
    if tokens and not rule.cased:  # those looked up as needles and not in the text are in no window
        tokens = tuple(token for token in tokens if t._first.get(token, 0) >= 0)
    for pos, end in _windows(t, rule):
        starts = _candidates(subject, tokens, pos, end) if tokens is not None else None
        while (m := _search(pattern, subject, pos, end, starts)) is not None:
            s, e = m.start(), m.end()
            pos = max(e, s + 1)
            if s and _wordish(low[s]) and _wordish(low[s - 1]):
                pos = s + 1
                continue
            if rule.near is not None and (both := _near(rule, low, s, e)) is None:
                continue
            if rule.near is not None:
                s, e = both
            if not _quoted_mention(text, low, s, e):
                yield s, e
            if pos > end:
                break


def _run_rules(text: str, rules: list[Rule], hits: dict[str, tuple[float, str]], spans: list[tuple[int, int]]) -> None:
    """Every rule the text admits (its language, its needles): its score into `hits` (the highest per
    detector), the (start, end) of each of its matches into `spans`."""
    t = _Text(text, rules)
    may_fire = t.may_fire
    for i, rule in enumerate(rules):
        if (may_fire is not None and not may_fire[i]) or not t.admits(rule):
            continue
        for s, e in _matches(rule, t):
            if rule.score > hits.get(rule.detector, (0.0, ""))[0]:
                hits[rule.detector] = (rule.score, rule.reason)
            while s < e - 1 and t.low[s] in _LEAD:  # the clause the pattern anchored on is not part of it
                s += 1
            spans.append((s, e))


def _merge(spans: list[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    out: list[tuple[int, int]] = []
    for s, e in sorted(spans):
        if out and s <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((s, e))
    return tuple(out)


def _by_score(rules: list[Rule]) -> list[tuple[float, list[int]]]:
    """The rules' indices grouped by score, strongest first (each group in the rules' order)."""
    levels: dict[float, list[int]] = {}
    for i, rule in enumerate(rules):
        levels.setdefault(rule.score, []).append(i)
    return sorted(levels.items(), key=lambda lv: -lv[0])


def _strongest(text: str, rules: list[Rule], levels: list[tuple[float, list[int]]]) -> tuple[float, str] | None:
    """The (score, reason) that `_run_rules` would give the text's strongest detector, or None if no rule
    fires: what a decoded layer needs. The rules run strongest first, each only to its first match, and stop
    once the answer is settled. As in `_run_rules`, a detector keeps the first of its strongest rules and a
    tie between detectors goes to the one that fired first in the rules' order, which may take a weaker
    rule of theirs to tell."""
    t = _Text(text, rules)
    known: dict[int, bool] = {}

    def fires(i: int) -> bool:
        if i not in known:
            rule = rules[i]
            known[i] = (t.may_fire is None or t.may_fire[i]) and t.admits(rule) and next(_matches(rule, t), None) is not None
        return known[i]

    for score, indices in levels:
        first_at: dict[str, int] = {}  # detector -> its first rule of this score that fires
        for i in indices:
            if fires(i):
                first_at.setdefault(rules[i].detector, i)
        if not first_at:
            continue
        if len(first_at) == 1:
            (winner,) = first_at
        else:  # the detector that fired first, counting its weaker rules before that one
            fired_first = {d: next((j for j in range(i) if rules[j].detector == d and rules[j].score < score and fires(j)), i)
                           for d, i in first_at.items()}
            winner = min(first_at, key=fired_first.__getitem__)
        return score, rules[first_at[winner]].reason
    return None


_FOR_KIND = {"tool_result": RULES, "tool_description": RULES + DESCRIPTION_RULES}
_LEVELS = {kind: _by_score(rules) for kind, rules in _FOR_KIND.items()}


def screen(content: str, kind: str = "tool_result", revealed: Revealed | None = None) -> InlineResult:
    """`kind` "tool_description": a tool's title, description and schema texts, which also get the rules for
    tool poisoning (DESCRIPTION_RULES); `revealed`: `reveal(content)` if the caller has it already."""
    kind = "tool_description" if kind == "tool_description" else "tool_result"
    rules = _FOR_KIND[kind]
    revealed = reveal(content) if revealed is None else revealed
    hits: dict[str, tuple[float, str]] = {}
    spans: list[tuple[int, int]] = []
    for sig in revealed.signals:
        hits[sig.detector] = max(hits.get(sig.detector, (0.0, "")), (sig.score, sig.reason))
        spans.append(sig.span)
    found: list[tuple[int, int]] = []
    _run_rules(revealed.text, rules, hits, found)
    spans += [revealed.span(s, e) for s, e in found]
    for (how, layer), layer_span in zip(revealed.layers, revealed.layer_spans, strict=True):
        best = _strongest(layer, rules, _LEVELS[kind])
        if best is not None:
            key = f"encoded_{how}" if how != "unicode_tags" else "hidden_unicode_tags"
            hits[key] = (max(0.95, best[0]), f"{how}-hidden text that {best[1]}")
            spans.append(layer_span)
    score, detector, reason, fired = _combine(hits)
    return InlineResult(round(score, 4), detector, reason, fired, _merge(spans))
