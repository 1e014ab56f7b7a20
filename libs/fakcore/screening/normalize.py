"""What a detector reads: the tool result with its disguises taken off.

Attackers hide instructions from people but not from models: Unicode tag characters (invisible, but
tokenized as ASCII by many tokenizers), zero-width characters splitting trigger words, JSON escapes,
letter-spaced text, base64 / hex / ROT13 payloads with a line asking the model to decode them. `reveal`
returns the visible text made plain plus every decoded layer, and `hidden_signals` reports the disguises
found themselves (they are evidence on their own).
"""

from __future__ import annotations

import base64
import binascii
import codecs
import re
import unicodedata
from dataclasses import dataclass, field

ZERO_WIDTH = "\u200b\u200c\u2060\u2061\u2062\u2063\u2064\ufeff\u180e\u00ad"
_ZW_RE = re.compile(f"[{ZERO_WIDTH}]")
_ZW_IN_WORD = re.compile(f"[A-Za-z][{ZERO_WIDTH}]+[A-Za-z]|[{ZERO_WIDTH}][ ]|[ ][{ZERO_WIDTH}]")
_TAGS = re.compile("[\U000e0000-\U000e007f]+")
_FLAG_TAGS = re.compile("\U0001f3f4[\U000e0020-\U000e007e]+\U000e007f")  # subdivision flags (England, Wales…)
_BIDI = re.compile("[\u202a-\u202e\u2066-\u2069]")
_JSON_ESC = re.compile(r"\\u([0-9a-fA-F]{4})|\\([nrt\"/\\])")
_B64 = re.compile(r"(?<![A-Za-z0-9+/=_-])[A-Za-z0-9+/]{24,}={0,2}(?![A-Za-z0-9+/=])")
_HEX = re.compile(r"\b(?:[0-9a-fA-F]{2}){16,}\b")
_SPACED = re.compile(r"(?:[^\s](?> {1,6}| *\n *)){12,}[^\s]")
_SPACED_HINT = re.compile(r"(?:[^\s] ){6}")
_ROT13_HINT = re.compile(r"rot-?13", re.I)


@dataclass
class Revealed:
    text: str  # visible text, NFKC-normalised, zero-width removed, JSON escapes and letter-spacing undone
    layers: list[tuple[str, str]] = field(default_factory=list)  # (how, decoded text) for hidden content
    signals: list[tuple[str, float, str]] = field(default_factory=list)  # (detector, score, reason)

    def all_text(self) -> str:
        return "\n".join([self.text, *(t for _, t in self.layers)])


def _printable_ratio(s: str) -> float:
    return sum(c.isprintable() or c in "\n\t" for c in s) / max(1, len(s))


def _looks_like_text(s: str) -> bool:
    """Decoded bytes that read as language (not an image, a key or a hash)."""
    if len(s) < 12 or _printable_ratio(s) < 0.97:
        return False
    letters = sum(c.isalpha() for c in s)
    spaces = s.count(" ")
    return letters / len(s) > 0.6 and spaces >= 2


def _unspace(s: str) -> str:
    """'I g n o r e  a l l' -> 'Ignore all' (one space between letters, two between words)."""
    s = re.sub(r" *\n *", "\1", s)
    return re.sub(r" {2,}", "\0", s).replace(" ", "").replace("\0", " ").replace("\1", "\n")


def _unjson(m: re.Match[str]) -> str:
    if m.group(1):
        return chr(int(m.group(1), 16))
    return {"n": "\n", "r": "\r", "t": "\t"}.get(m.group(2), m.group(2))


def reveal(content: str, *, decode: bool = True) -> Revealed:
    signals: list[tuple[str, float, str]] = []
    text = content
    if "\\" in content:  # JSON-escaped text (a tool returned JSON): read it as the model will
        text = _JSON_ESC.sub(_unjson, content).encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    layers: list[tuple[str, str]] = []

    flags_stripped = _FLAG_TAGS.sub("\U0001f3f4", text)
    tags = _TAGS.findall(flags_stripped)
    if tags:
        hidden = "".join(chr(ord(c) - 0xE0000) for run in tags for c in run if 0xE0020 <= ord(c) <= 0xE007E)
        signals.append(("hidden_unicode_tags", 0.97, f"carries {sum(map(len, tags))} invisible Unicode tag characters"))
        if hidden.strip():
            layers.append(("unicode_tags", hidden))
        text = _TAGS.sub("", flags_stripped)
    if len(_ZW_IN_WORD.findall(text)) >= 3:
        signals.append(("zero_width_text", 0.9, "zero-width characters split words (hides them from people and filters)"))
    if _BIDI.search(text):
        signals.append(("bidi_override", 0.6, "bidirectional override characters reorder what a person sees"))
    text = _ZW_RE.sub("", text)
    text = unicodedata.normalize("NFKC", text)

    spaced = _SPACED.findall(text) if _SPACED_HINT.search(text) else []
    if spaced:
        text = _SPACED.sub(lambda m: _unspace(m.group(0)), text)
        layers.append(("letter_spacing", "\n".join(_unspace(s) for s in spaced)))

    if decode:
        for m in _B64.finditer(text):
            raw = m.group(0)
            try:
                dec = base64.b64decode(raw + "=" * (-len(raw) % 4), validate=False).decode("utf-8")
            except (binascii.Error, UnicodeDecodeError, ValueError):
                continue
            if _looks_like_text(dec):
                layers.append(("base64", dec))
        for m in _HEX.finditer(text):
            try:
                dec = bytes.fromhex(m.group(0)).decode("utf-8")
            except (ValueError, UnicodeDecodeError):
                continue
            if _looks_like_text(dec):
                layers.append(("hex", dec))
        if _ROT13_HINT.search(text):
            layers.append(("rot13", codecs.decode(text, "rot13")))
    return Revealed(text=text, layers=layers, signals=signals)
