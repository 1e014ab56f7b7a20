"""What a detector reads: the tool result with its disguises taken off.

Attackers hide instructions from people but not from models: Unicode tag characters (invisible, but
tokenized as ASCII by many tokenizers), zero-width and bidi control characters splitting trigger words,
look-alike letters from another script ("іgnоre" with a Cyrillic і and о), fullwidth or mathematical
letters, JSON escapes, letter-spaced text, base64 / hex / ROT13 payloads with a line asking the model to
decode them. `reveal` returns the visible text made plain plus every decoded layer, and the disguises found
themselves as signals (they are evidence on their own).

Every step keeps an offset map, `Revealed.origin`: for each character of the revealed text, where it came
from in the content, so a rule matching the revealed text can point at the original (a verdict's spans, an
audit log's excerpt). Steps are edits (start, end, replacement) on the current text; a replacement's
characters map proportionally onto the characters it replaced.

    content -> JSON escapes decoded -> line separators made newlines -> tag characters (and variation
            -> selector runs) taken out as layers -> zero-width, bidi and joiner characters removed (and,
            -> where they stood for spaces, a layer reading them so)
            -> NFKC -> letter-spacing undone -> look-alike letters in mixed-script words mapped
            -> base64 / hex / ROT13 layers decoded
"""

from __future__ import annotations

import base64
import binascii
import codecs
import re
import unicodedata
from dataclasses import dataclass, field
from typing import NamedTuple

# Invisible, and removed wherever they are. As evidence of hiding they count between two letters of a
# bicameral script (where nobody puts them: the bidi marks LRM, RLM, ALM belong in right-to-left text, ZWNJ
# in Persian and Indic words) or, the zero-width spaces, next to a space; the soft hyphen never (German
# pages put one in every long word).
ZERO_WIDTH = "\u200b\u200c\u2060\u2061\u2062\u2063\u2064\ufeff\u180e\u00ad\u034f\u200e\u200f\u061c"
# Part of emoji sequences (👨‍👩‍👧, ❤️) and of Indic conjuncts after a virama: removed only after a letter,
# digit, punctuation or space, where they can only split words.
JOINERS = "\u200d\ufe00-\ufe0f"
_BIDI = "\u202a-\u202e\u2066-\u2069"  # embeddings, overrides, isolates: they reorder what a person sees
_LETTER = "A-Za-z\u00c0-\u024f\u0370-\u03ff\u0400-\u052f"  # bicameral scripts: no joiner belongs inside their words
_ZW_BY_SPACE = "\u200b\u200c\u2060\u2061\u2062\u2063\u2064\ufeff\u180e"  # next to a space they replace it

_INVISIBLE = re.compile(f"[{ZERO_WIDTH}{_BIDI}]+")
_JOINER_RUN = re.compile(f"[{JOINERS}]+")
_NEVER_IN_TEXT = "\ufeff\u2060-\u2064\u180e"  # word joiner, BOM, invisible operators: no script puts them between letters
_ZW_IN_WORD = re.compile(f"[{_LETTER}][{ZERO_WIDTH.replace(chr(0xAD), '')}{JOINERS}]+(?=[{_LETTER}])"
                         f"|[^\\s{_NEVER_IN_TEXT}][{_NEVER_IN_TEXT}]+(?=[^\\s{_NEVER_IN_TEXT}])|[{_ZW_BY_SPACE}] | [{_ZW_BY_SPACE}]")
_ZW_ANY = re.compile(f"[{ZERO_WIDTH}{JOINERS}]")  # every match of _ZW_IN_WORD has one, at its first or second character
_ZW_SPACE = re.compile(f"[{_ZW_BY_SPACE}]+")
_BIDI_RE = re.compile(f"[{_BIDI}]")
_LINE_SEP = re.compile("[\u2028\u2029\u0085]")
_TAGS = re.compile("[\U000e0000-\U000e007f]+")
_FLAG_TAGS = re.compile("\U0001f3f4([\U000e0020-\U000e007e]+\U000e007f)")  # subdivision flags (England, Wales…)
_VS_RUN = re.compile("[\ufe00-\ufe0f\U000e0100-\U000e01ef]{8,}")  # bytes smuggled as variation selectors
_JSON_ESC = re.compile(r"\\u([dD][89abAB][0-9a-fA-F]{2})\\u([dD][c-fC-F][0-9a-fA-F]{2})|\\u([0-9a-fA-F]{4})|\\([nrt\"/\\])")
_SURROGATE = re.compile("[\ud800-\udfff]")
_B64 = re.compile(r"(?<![A-Za-z0-9+/=_-])[A-Za-z0-9+/]{24,}={0,2}(?![A-Za-z0-9+/=])")
_HEX = re.compile(r"[0-9a-fA-F]{32,}")  # (whole words of an even length: checked after)
_SPACED = re.compile(r"(?:[^\s](?> {1,6}| *\n *)){12,}[^\s]")
_SPACED_HINT = re.compile(r" [^\s] [^\s] [^\s] [^\s] [^\s] ")  # starts with a literal: the engine skips to the spaces
_ROT13_HINT = re.compile(r"[rR][oO][tT]-?13")
# anything the hidden-character steps act on (most text has none, and skips them)
_SUSPECT = re.compile(f"[{ZERO_WIDTH}{JOINERS}{_BIDI}\u2028\u2029\u0085\ud800-\udfff\U000e0000-\U000e01ef]")
# characters NFKC may change, or that compose with the one before (the verification in _nfkc covers the rest)
_NFKC_SUSPECT = re.compile(
    "[\u00a0\u00a8\u00aa\u00af\u00b2-\u00b5\u00b8-\u00ba\u00bc-\u00be\u0132\u0133\u013f\u0140\u0149\u017f\u01c4-\u01cc"
    "\u01f1-\u01f3\u02b0-\u02b8\u02d8-\u02dd\u02e0-\u02e4\u0300-\u036f\u0374\u037a\u037e\u0384-\u0387\u03d0-\u03d6"
    "\u03f0-\u03f5\u03f9\u0483-\u0489\u0587\u0591-\u05c7\u0610-\u061a\u064b-\u065f\u0670\u0675-\u0678\u06d6-\u06ed"
    "\u1100-\u11ff\u1ab0-\u1aff\u1d2c-\u1dff\u1e9a\u1e9b\u1f00-\u1fff\u2000-\u200a\u2011\u2024-\u2026\u202f\u2033-\u2037"
    "\u203c\u203e\u2047-\u2049\u2057\u205f\u2070-\u209f\u20a8\u20d0-\u20ff\u2100-\u218f\u222c-\u2230\u2329\u232a\u2460-\u24ff"
    "\u2a0c\u2a74-\u2a76\u2adc\u2c7c\u2c7d\u2d6f\u2e9f\u2ef3\u2f00-\u2fd5\u3000\u3036\u3038-\u303a\u3099-\u309f\u30ff"
    "\u3131-\u318e\u3192-\u319f\u3200-\u33ff\ua69c\ua69d\ua770\ua7f2-\ua7f9\uab5c-\uab5f\uab69\uf900-\ufaff\ufb00-\ufdff"
    "\ufe10-\ufe19\ufe20-\ufe6f\ufe70-\ufefc\uff00-\uffef\U0001d400-\U0001d7ff\U0001ee00-\U0001eeff\U0001f100-\U0001f2ff"
    "\U0001fbf0-\U0001fbf9\U0002f800-\U0002fa1f]")

# Look-alikes (Unicode's confusables, the ones attackers use), applied only inside a word mixing Latin with
# Cyrillic or Greek: the minority script's letters become the majority's, so Russian and Greek text is
# untouched and "іgnоre" reads "ignore" (and "пpeдыдущие", Latin p and e in Russian, reads "предыдущие").
_TO_LATIN = str.maketrans(
    "аеорсухѕіјԁһӏԛԝүкмнтвпгАВЕКМНОРСТХУЅІЈԚԜҮҺӀ" "αορνυικτχεγωηϲϳΑΒΕΖΗΙΚΜΝΟΡΤΥΧϹ",
    "aeopcyxsijdhlqwykmhtbnrABEKMHOPCTXYSIJQWYHI" "aopvuiktxeywncjABEZHIKMNOPTYXC")
_TO_CYRILLIC = str.maketrans("aeopcyxABEKMHOPCTXY", "аеорсухАВЕКМНОРСТХУ")
_NON_LATIN = re.compile("[\u0370-\u03ff\u0400-\u052f]")
_CYRILLIC = re.compile("[\u0400-\u052f]")
_MIXED = re.compile("[A-Za-z][\u0370-\u03ff\u0400-\u052f]|[\u0370-\u03ff\u0400-\u052f][A-Za-z]")
_WORD_CHAR = re.compile(r"\w")


class Signal(NamedTuple):
    detector: str
    score: float
    reason: str
    span: tuple[int, int]  # where in the content (the first to the last disguised character)


@dataclass
class Revealed:
    text: str  # visible text: NFKC, invisible characters removed, escapes, letter-spacing and look-alikes undone
    layers: list[tuple[str, str]] = field(default_factory=list)  # (how, decoded text) for hidden content
    signals: list[Signal] = field(default_factory=list)  # the disguises found
    origin: list[int] = field(default_factory=list)  # len(text) + 1: text[i] came from content[origin[i]]
    layer_spans: list[tuple[int, int]] = field(default_factory=list)  # per layer, what of the content it decodes

    def all_text(self) -> str:
        return "\n".join([self.text, *(t for _, t in self.layers)])

    def span(self, start: int, end: int) -> tuple[int, int]:
        """text[start:end] as a span of the content (it includes characters removed just after it)."""
        return self.origin[start], self.origin[end]


# -- edits with an offset map ----------------------------------------------------------------------------

Edit = tuple[int, int, str]  # replace text[start:end] with the string


def _apply(text: str, origin: list[int], edits: list[Edit]) -> tuple[str, list[int]]:
    """Apply sorted, non-overlapping edits; `origin` (len(text) + 1) follows them."""
    if not edits:
        return text, origin
    out: list[str] = []
    org: list[int] = []
    pos = 0
    for s, e, rep in edits:
        out.append(text[pos:s])
        org.extend(origin[pos:s])
        out.append(rep)
        n, width = len(rep), e - s
        if n == width:
            org.extend(origin[s:e])
        elif n:
            org.extend(origin[s + k * width // n] for k in range(n))
        pos = e
    out.append(text[pos:])
    org.extend(origin[pos:])
    return "".join(out), org


def _sub(pattern: re.Pattern[str], repl, text: str, origin: list[int]) -> tuple[str, list[int]]:
    edits = [(m.start(), m.end(), repl(m) if callable(repl) else repl) for m in pattern.finditer(text)]
    return _apply(text, origin, edits)


# -- NFKC, piece by piece --------------------------------------------------------------------------------

_ATTACHES = "\u1160-\u11ff\uff9e\uff9f\u3099\u309a"  # hangul vowel/final jamo, (half-width) kana voicing marks


def _attaches(c: str) -> bool:
    """c joins the character before it under normalisation (a combining mark, a jamo, a voicing mark)."""
    return unicodedata.combining(c) != 0 or "\u1160" <= c <= "\u11ff" or c in "\uff9e\uff9f\u3099\u309a"


def _nfkc_edits(text: str, lo: int, hi: int, edits: list[Edit]) -> None:
    """Edits normalising text[lo:hi] (lo at a starter): halves that are normal already are skipped, so the
    cost follows the number of changed characters, not the length."""
    if unicodedata.is_normalized("NFKC", text[lo:hi]):
        return
    if hi - lo > 16:
        mid = (lo + hi) // 2
        while mid < hi and _attaches(text[mid]):
            mid += 1
        if mid < hi:
            _nfkc_edits(text, lo, mid, edits)
            _nfkc_edits(text, mid, hi, edits)
            return
    i = lo
    while i < hi:  # clusters: a starter and the marks attached to it
        j = i + 1
        while j < hi and _attaches(text[j]):
            j += 1
        cluster = text[i:j]
        norm = unicodedata.normalize("NFKC", cluster)
        if norm != cluster:
            edits.append((i, j, norm))
        i = j


def _suspect_edits(text: str) -> list[Edit]:
    """Edits normalising the clusters around the characters NFKC is known to change."""
    edits: list[Edit] = []
    for m in _NFKC_SUSPECT.finditer(text):
        s = m.start()
        while s and _attaches(text[s]):  # a mark: its cluster starts at the starter before it
            s -= 1
        if edits and s < edits[-1][1]:
            continue
        e = m.end()
        while e < len(text) and _attaches(text[e]):
            e += 1
        norm = unicodedata.normalize("NFKC", text[s:e])
        if norm != text[s:e]:
            edits.append((s, e, norm))
    return edits


def _nfkc(text: str, origin: list[int]) -> tuple[str, list[int]]:
    if text.isascii() or unicodedata.is_normalized("NFKC", text):
        return text, origin
    full = unicodedata.normalize("NFKC", text)
    out, org = _apply(text, origin, _suspect_edits(text))
    if out == full:
        return out, org
    edits: list[Edit] = []  # characters outside the known set changed: find them by halves
    _nfkc_edits(text, 0, len(text), edits)
    out, org = _apply(text, origin, edits)
    if out == full:
        return out, org
    # a composition across pieces (rare scripts): map the differing middle as one edit
    p = 0
    while p < min(len(text), len(full)) and text[p] == full[p]:
        p += 1
    s = 0
    while s < min(len(text), len(full)) - p and text[-1 - s] == full[-1 - s]:
        s += 1
    return _apply(text, origin, [(p, len(text) - s, full[p:len(full) - s])])


# -- look-alike letters ----------------------------------------------------------------------------------


def _deconfuse(text: str) -> tuple[str, list[Edit]]:
    """(text with look-alikes in mixed-script words mapped, the words mapped). Length kept."""
    if not _NON_LATIN.search(text) or not _MIXED.search(text):
        return text, []
    edits: list[Edit] = []
    done = -1
    for m in _MIXED.finditer(text):
        if m.start() < done:
            continue
        s = m.start()
        while s > 0 and _WORD_CHAR.match(text[s - 1]):
            s -= 1
        e = m.end()
        while e < len(text) and _WORD_CHAR.match(text[e]):
            e += 1
        word = text[s:e]
        cyr = len(_CYRILLIC.findall(word))
        lat = sum(c.isascii() and c.isalpha() for c in word)
        mapped = word.translate(_TO_CYRILLIC if cyr > lat else _TO_LATIN)
        if mapped != word:
            edits.append((s, e, mapped))
        done = e
    pieces, pos = [], 0
    for s, e, word in edits:
        pieces += [text[pos:s], word]
        pos = e
    return "".join([*pieces, text[pos:]]), edits


# -- reveal ----------------------------------------------------------------------------------------------


def _printable_ratio(s: str) -> float:
    return sum(c.isprintable() or c in "\n\t" for c in s) / max(1, len(s))


def _looks_like_text(s: str) -> bool:
    """Decoded bytes that read as language (not an image, a key or a hash): letters and spaces, or mostly
    CJK, kana or hangul (which need no spaces)."""
    if len(s) < 12 or _printable_ratio(s) < 0.97:
        return False
    letters = sum(c.isalpha() for c in s)
    spaces = s.count(" ")
    return letters / len(s) > 0.6 and (spaces >= 2 or sum(c >= "\u2e80" for c in s) / len(s) > 0.3)


def _unspace(s: str) -> str:
    """'I g n o r e  a l l' -> 'Ignore all' (one space between letters, two between words)."""
    s = re.sub(r" *\n *", "\1", s)
    return re.sub(r" {2,}", "\0", s).replace(" ", "").replace("\0", " ").replace("\1", "\n")


def _unjson(m: re.Match[str]) -> str:
    if m.group(1):
        hi, lo = int(m.group(1), 16), int(m.group(2), 16)
        return chr(0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00))
    if m.group(3):
        cp = int(m.group(3), 16)
        return "\ufffd" if 0xD800 <= cp <= 0xDFFF else chr(cp)
    return {"n": "\n", "r": "\r", "t": "\t"}.get(m.group(4), m.group(4))


def _unjoin(m: re.Match[str]) -> str:
    """A joiner run after a letter, digit, punctuation or space splits a word; after an emoji or a mark it
    belongs to the sequence."""
    s = m.string
    prev = s[m.start() - 1] if m.start() else " "
    return "" if unicodedata.category(prev)[0] in "LNPZ" else m.group(0)


def _vs_byte(c: str) -> int:
    cp = ord(c)
    return cp - 0xFE00 if cp <= 0xFE0F else cp - 0xE0100 + 16


def _zw_in_word(text: str) -> list[re.Match[str]]:
    """list(_ZW_IN_WORD.finditer(text)), trying a match only where one can start (at or just before one of
    the characters it needs): the engine would try every place in the text, with four branches each."""
    out: list[re.Match[str]] = []
    end = 0
    for z in _ZW_ANY.finditer(text):
        for p in (z.start() - 1, z.start()):
            if p >= end and (m := _ZW_IN_WORD.match(text, p)) is not None:
                out.append(m)
                end = m.end()
    return out


def _lines_around(text: str, matches: list[re.Match[str]]) -> str:
    """The lines holding the matches, with one line either side, in order and each once."""
    pieces: list[tuple[int, int]] = []
    for m in matches:
        end_before = text.rfind("\n", 0, m.start())  # the newline that ends the line before
        a = 0 if end_before < 0 else text.rfind("\n", 0, end_before) + 1
        end = text.find("\n", m.end())
        b = text.find("\n", end + 1) if end >= 0 else -1  # the newline that ends the line after
        b = len(text) if b < 0 else b
        if pieces and a <= pieces[-1][1]:
            pieces[-1] = (pieces[-1][0], max(b, pieces[-1][1]))
        else:
            pieces.append((a, b))
    return "\n".join(text[a:b] for a, b in pieces)


def _hidden_characters(text: str, origin: list[int], signals: list[Signal], layers: list[tuple[str, str]],
                       layer_spans: list[tuple[int, int]]) -> tuple[str, list[int]]:
    """Tag characters and variation-selector runs taken out (as layers), zero-width, bidi and joiner
    characters removed; each a signal where it hides something."""
    if _SURROGATE.search(text):
        text = _SURROGATE.sub("\ufffd", text)
    if _LINE_SEP.search(text):
        text = _LINE_SEP.sub("\n", text)
    if _TAGS.search(text):
        text, origin = _sub(_FLAG_TAGS, "\U0001f3f4", text, origin)  # a flag's tags are the flag
        runs = list(_TAGS.finditer(text))
        if runs:
            hidden = "".join(chr(ord(c) - 0xE0000) for m in runs for c in m.group(0) if 0xE0020 <= ord(c) <= 0xE007E)
            span = (origin[runs[0].start()], origin[runs[-1].end()])
            signals.append(Signal("hidden_unicode_tags", 0.97,
                                  f"carries {sum(len(m.group(0)) for m in runs)} invisible Unicode tag characters", span))
            if hidden.strip():
                layers.append(("unicode_tags", hidden))
                layer_spans.append(span)
            text, origin = _apply(text, origin, [(m.start(), m.end(), "") for m in runs])
    if vs := list(_VS_RUN.finditer(text)):
        for m in vs:
            span = (origin[m.start()], origin[m.end()])
            signals.append(Signal("hidden_variation_selectors", 0.9, "bytes hidden as a run of variation selectors", span))
            dec = bytes(_vs_byte(c) for c in m.group(0)).decode("utf-8", "replace")
            if _looks_like_text(dec):
                layers.append(("variation_selectors", dec))
                layer_spans.append(span)
        text, origin = _apply(text, origin, [(m.start(), m.end(), "") for m in vs])

    zw = _zw_in_word(text)
    if len(zw) >= 3:
        span = (origin[zw[0].start()], origin[zw[-1].end()])
        signals.append(Signal("zero_width_text", 0.9, "zero-width characters split words (hides them from people and filters)", span))
        # they may stand for the spaces ("ignore\u200ball\u200bprevious"): read them as spaces too, on the
        # lines that have them (and the line either side); the rest reads as the text does, screened already
        layers.append(("zero_width", unicodedata.normalize("NFKC", _INVISIBLE.sub("", _ZW_SPACE.sub(" ", _lines_around(text, zw))))))
        layer_spans.append(span)
    if bidi := _BIDI_RE.search(text):
        signals.append(Signal("bidi_override", 0.6, "bidirectional override characters reorder what a person sees",
                              (origin[bidi.start()], origin[bidi.end()])))
    text, origin = _sub(_INVISIBLE, "", text, origin)
    if _JOINER_RUN.search(text):
        text, origin = _sub(_JOINER_RUN, _unjoin, text, origin)
    return text, origin


def reveal(content: str, *, decode: bool = True) -> Revealed:
    signals: list[Signal] = []
    layers: list[tuple[str, str]] = []
    layer_spans: list[tuple[int, int]] = []
    text, origin = content, list(range(len(content) + 1))
    if "\\" in text:  # JSON-escaped text (a tool returned JSON): read it as the model will
        text, origin = _sub(_JSON_ESC, _unjson, text, origin)
    if not text.isascii() and _SUSPECT.search(text):
        text, origin = _hidden_characters(text, origin, signals, layers, layer_spans)
    text, origin = _nfkc(text, origin)

    spaced = list(_SPACED.finditer(text)) if _SPACED_HINT.search(text) else []
    if spaced:
        layers.append(("letter_spacing", "\n".join(_unspace(m.group(0)) for m in spaced)))
        layer_spans.append((origin[spaced[0].start()], origin[spaced[-1].end()]))
        text, origin = _apply(text, origin, [(m.start(), m.end(), _unspace(m.group(0))) for m in spaced])
    text, mixed = _deconfuse(text) if not text.isascii() else (text, [])
    if len(mixed) >= 3:
        signals.append(Signal("homoglyph_text", 0.7, f"{len(mixed)} words mix look-alike letters of two scripts",
                              (origin[mixed[0][0]], origin[mixed[-1][1]])))

    if decode:
        for m in _B64.finditer(text):
            raw = m.group(0)
            try:
                dec = base64.b64decode(raw + "=" * (-len(raw) % 4), validate=False).decode("utf-8")
            except (binascii.Error, UnicodeDecodeError, ValueError):
                continue
            if _looks_like_text(dec):
                layers.append(("base64", dec))
                layer_spans.append((origin[m.start()], origin[m.end()]))
        for m in _HEX.finditer(text):
            inside_word = (m.start() and _WORD_CHAR.match(text, m.start() - 1)) or _WORD_CHAR.match(text, m.end())
            if len(m.group(0)) % 2 or inside_word:
                continue  # an odd number of digits, or part of a longer word: not bytes
            try:
                dec = bytes.fromhex(m.group(0)).decode("utf-8")
            except (ValueError, UnicodeDecodeError):
                continue
            if _looks_like_text(dec):
                layers.append(("hex", dec))
                layer_spans.append((origin[m.start()], origin[m.end()]))
        if _ROT13_HINT.search(text):
            layers.append(("rot13", codecs.decode(text, "rot13")))
            layer_spans.append((0, len(content)))
    return Revealed(text=text, layers=layers, signals=signals, origin=origin, layer_spans=layer_spans)
