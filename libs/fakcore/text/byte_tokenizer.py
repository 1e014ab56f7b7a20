"""The synthetic model's tokenizer: ids 0..255 are raw bytes, then the special tokens."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from .tokenizer import BYTE_TOKEN, Tokenizer, TokenizerError


class ByteTokenizer(Tokenizer):
    """The synthetic model's tokenizer: ids 0..255 are raw bytes, ids 256.. the given special tokens.

    Every special written in the text encodes to its id; decoding joins the bytes and reads them as
    UTF-8 with errors="replace" (a special between bytes ends the byte run).
    """

    def __init__(
        self,
        specials: Sequence[str],
        *,
        bos: str | None = None,
        eos: str | Sequence[str] = (),
        add_bos: bool = False,
        chat_template: str | None = None,
    ):
        if len(set(specials)) != len(specials) or any(not s for s in specials):
            raise TokenizerError(f"ByteTokenizer: specials must be distinct non-empty strings, got {list(specials)!r}")
        self.specials = list(specials)
        self._ids = {s: 256 + n for n, s in enumerate(self.specials)}
        eos_list = [eos] if isinstance(eos, str) else list(eos)
        for name in [*([bos] if bos else []), *eos_list]:
            if name not in self._ids:
                raise TokenizerError(f"ByteTokenizer: {name!r} is not one of the specials {self.specials!r}")
        self.vocab_size = 256 + len(self.specials)
        self.bos_id = self._ids[bos] if bos else None
        self.eos_ids = tuple(self._ids[e] for e in eos_list)
        self.add_bos = add_bos
        self.chat_template = chat_template
        self.source = "ByteTokenizer"
        self._special_ids = frozenset(self._ids.values())
        self._byte_fallback_ids = frozenset()
        # Longest first, so a special that is a prefix of another never wins over it.
        ordered = sorted(self.specials, key=len, reverse=True)
        self._split = re.compile("|".join(re.escape(s) for s in ordered)) if ordered else None

    def _pieces(self, text: str) -> Iterable[tuple[int, int, int | None]]:
        """(start, end, special id or None) over `text`, specials cut out."""
        pos = 0
        for m in self._split.finditer(text) if self._split else ():
            if m.start() > pos:
                yield pos, m.start(), None
            yield m.start(), m.end(), self._ids[m.group()]
            pos = m.end()
        if pos < len(text):
            yield pos, len(text), None

    def encode(self, text: str, *, add_bos: bool | None = None) -> list[int]:
        ids: list[int] = []
        for start, end, special in self._pieces(text):
            ids.extend([special] if special is not None else text[start:end].encode("utf-8"))
        return self._with_bos(ids, add_bos)

    def encode_literal(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def encode_with_offsets(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        ids: list[int] = []
        offsets: list[tuple[int, int]] = []
        for start, end, special in self._pieces(text):
            if special is not None:
                ids.append(special)
                offsets.append((start, end))
                continue
            for k in range(start, end):
                raw = text[k].encode("utf-8")
                ids.extend(raw)
                offsets.extend([(k, k + 1)] * len(raw))
        return ids, offsets

    def decode(self, ids: Sequence[int], *, skip_special: bool = True) -> str:
        out: list[str] = []
        run = bytearray()
        for i in ids:
            if 0 <= i < 256:
                run.append(i)
            elif 256 <= i < self.vocab_size:
                if skip_special:
                    continue
                out.append(run.decode("utf-8", errors="replace"))
                run.clear()
                out.append(self.specials[i - 256])
            # ids outside the vocabulary decode to nothing, as in `tokenizers`
        out.append(run.decode("utf-8", errors="replace"))
        return "".join(out)

    def token_to_id(self, token: str) -> int | None:
        if token in self._ids:
            return self._ids[token]
        if BYTE_TOKEN.fullmatch(token):
            return int(token[3:5], 16)
        return None

    def id_to_token(self, i: int) -> str:
        if 0 <= i < 256:
            return f"<0x{i:02X}>"
        if 256 <= i < self.vocab_size:
            return self.specials[i - 256]
        raise IndexError(f"token id {i} is outside the ByteTokenizer vocabulary of {self.vocab_size}")

    def token_bytes(self, i: int) -> bytes:
        """The bytes one token stands for (a special's UTF-8 spelling; b"" outside the vocabulary)."""
        if 0 <= i < 256:
            return bytes([i])
        return self.specials[i - 256].encode("utf-8") if 256 <= i < self.vocab_size else b""

    def to_json(self) -> str:
        raise TypeError("ByteTokenizer has no tokenizer.json form")
