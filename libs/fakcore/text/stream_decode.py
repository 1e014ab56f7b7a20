"""`StreamDecoder` turns a stream of ids into text deltas whose concatenation is exactly `decode(ids)`."""

from __future__ import annotations

from .tokenizer import Tokenizer


class StreamDecoder:
    """Incremental detokenization: push ids one at a time, get text as soon as it is final.

    Text is held back while it ends in an incomplete UTF-8 sequence (a trailing U+FFFD) or inside a
    byte-fallback run, so that the concatenation of every push() and the final flush() equals
    `tokenizer.decode(all ids)`. Each step decodes only a short window: the tokens since the last
    emitted text plus the window before them, which carries decoder context such as SentencePiece's
    stripped leading space.
    """

    def __init__(self, tokenizer: Tokenizer, *, skip_special: bool = True):
        self._tok = tokenizer
        self._skip = skip_special
        self._ids: list[int] = []
        self._prefix = 0  # start of the decode window
        self._read = 0  # ids before this have been emitted

    def push(self, token_id: int) -> str:
        self._ids.append(token_id)
        if self._tok._holds_stream(token_id) or self._vanishes(token_id):
            return ""  # a skipped special produces no text, and must not close a byte-fallback run
        prefix_text = self._tok.decode(self._ids[self._prefix : self._read], skip_special=self._skip)
        text = self._tok.decode(self._ids[self._prefix :], skip_special=self._skip)
        if len(text) <= len(prefix_text) or text.endswith("\ufffd") or not text.startswith(prefix_text):
            return ""
        # The next window starts at the tokens emitted now, unless they all vanish in decoding
        # (skipped specials): a window must start on text so decoders that strip it see the same start.
        if any(not self._vanishes(i) for i in self._ids[self._read :]):
            self._prefix = self._read
        self._read = len(self._ids)
        return text[len(prefix_text) :]

    def flush(self) -> str:
        """The text still held back; call once, at the end of the stream."""
        prefix_text = self._tok.decode(self._ids[self._prefix : self._read], skip_special=self._skip)
        text = self._tok.decode(self._ids[self._prefix :], skip_special=self._skip)
        self._read = len(self._ids)
        return text[len(prefix_text) :]

    def _vanishes(self, i: int) -> bool:
        return self._skip and self._tok.is_special(i)
