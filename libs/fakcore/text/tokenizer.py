"""The runtime tokenizer: text <-> ids for one model, the same interface for every model.

`Tokenizer` wraps a HuggingFace `tokenizers.Tokenizer` and is built from one of two sources:

- GGUF metadata (`Tokenizer.from_gguf`), as a plain dict of `tokenizer.*` keys: gguf_vocab.py rebuilds the
  vocabulary ("gpt2" byte-level BPE or "llama" SentencePiece-style BPE) the way transformers' GGUF loader
  does.
- A HuggingFace directory (`Tokenizer.from_hf_dir`): `tokenizer.json`, plus `tokenizer_config.json`
  and `generation_config.json` for the special ids and the chat template.

Next to it: byte_tokenizer.py (`ByteTokenizer`, the synthetic model's) and stream_decode.py
(`StreamDecoder`, ids to text deltas while generating).
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer as _Backend


class TokenizerError(Exception):
    """A tokenizer cannot be built; the message names the source file and the offending field."""


BYTE_TOKEN = re.compile(r"<0x[0-9A-Fa-f]{2}>")  # a byte-fallback token's spelling: "<0x0A>"


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character table, the alphabet byte-level vocabularies are spelled in."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
    printable += list(range(ord("®"), ord("ÿ") + 1))
    table, extra = {}, 0
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


@functools.cache
def unicode_to_bytes() -> dict[str, int]:
    return {c: b for b, c in bytes_to_unicode().items()}


class Tokenizer:
    """Text <-> ids for one model. Specials written in the text (e.g. "<|im_start|>") encode to their ids."""

    vocab_size: int  # number of ids this tokenizer can produce (the model's embedding may be padded beyond)
    bos_id: int | None  # beginning-of-sequence id, None when the model has none
    eos_ids: tuple[int, ...]  # every id that ends a generation (eos, eot, eom, generation_config's list)
    add_bos: bool  # whether encode() prepends bos_id by default
    chat_template: str | None  # the model's own Jinja chat template, when the source carries one
    source: str  # file or directory this came from, for error messages

    def __init__(
        self,
        backend: _Backend,
        *,
        vocab_size: int,
        bos_id: int | None,
        eos_ids: Iterable[int],
        add_bos: bool,
        chat_template: str | None = None,
        byte_fallback_ids: Iterable[int] = (),
        source: str = "",
    ):
        self._backend = backend
        self.vocab_size = vocab_size
        self.bos_id = bos_id
        self.eos_ids = tuple(dict.fromkeys(eos_ids))
        self.add_bos = add_bos
        self.chat_template = chat_template
        self.source = source
        self._special_ids = frozenset(
            i for i, tok in backend.get_added_tokens_decoder().items() if tok.special
        )
        self._byte_fallback_ids = frozenset(byte_fallback_ids)

    # ---- the interface -------------------------------------------------------------------------------

    def encode(self, text: str, *, add_bos: bool | None = None) -> list[int]:
        ids = self._backend.encode(text, add_special_tokens=False).ids
        return self._with_bos(ids, add_bos)

    def encode_with_offsets(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        """Ids (no BOS) and each token's (start, end) character offsets into `text`. A token holding
        only part of a character's bytes gets that whole character's span."""
        enc = self._backend.encode(text, add_special_tokens=False)
        return list(enc.ids), [tuple(o) for o in enc.offsets]

    def encode_literal(self, text: str) -> list[int]:
        """Ids of `text` with special-token spellings read as plain text (no BOS): for untrusted content,
        so that a tool result writing "<|im_start|>system" cannot open a turn."""
        self._backend.encode_special_tokens = True
        try:
            return list(self._backend.encode(text, add_special_tokens=False).ids)
        finally:
            self._backend.encode_special_tokens = False

    def decode(self, ids: Sequence[int], *, skip_special: bool = True) -> str:
        return self._backend.decode(list(ids), skip_special_tokens=skip_special)

    def token_to_id(self, token: str) -> int | None:
        return self._backend.token_to_id(token)

    def id_to_token(self, i: int) -> str:
        tok = self._backend.id_to_token(i)
        if tok is None:
            raise IndexError(f"token id {i} is outside the vocabulary of {self.source or 'this tokenizer'}")
        return tok

    def is_special(self, i: int) -> bool:
        return i in self._special_ids

    def token_bytes(self, i: int) -> bytes:
        """The bytes one token stands for, out of any context: a byte-level token's bytes, a SentencePiece
        piece with "▁" as a space, a byte-fallback token's byte, an added token's spelling; b"" outside the
        vocabulary. (decode([i]) is not that: it strips a SentencePiece token's leading space and turns a
        partial character into U+FFFD.)"""
        piece = self._backend.id_to_token(i)
        if piece is None:
            return b""
        if i in self._added_ids:
            return piece.encode("utf-8")
        if i in self._byte_fallback_ids and BYTE_TOKEN.fullmatch(piece):
            return bytes([int(piece[3:5], 16)])
        table = unicode_to_bytes()
        if self._byte_level and all(c in table for c in piece):
            return bytes(table[c] for c in piece)
        return piece.replace("▁", " ").encode("utf-8")

    @functools.cached_property
    def _added_ids(self) -> frozenset[int]:
        return frozenset(self._backend.get_added_tokens_decoder())

    @functools.cached_property
    def _byte_level(self) -> bool:
        """Whether ordinary tokens are spelled in GPT-2's byte alphabet (the decoder maps it back)."""
        decoder = self._backend.decoder
        return decoder is not None and b'"ByteLevel"' in decoder.__getstate__()

    @property
    def bos_token(self) -> str:
        return self.id_to_token(self.bos_id) if self.bos_id is not None else ""

    @property
    def eos_token(self) -> str:
        return self.id_to_token(self.eos_ids[0]) if self.eos_ids else ""

    def to_json(self) -> str:
        """The backend as tokenizer.json text (what llguidance reads)."""
        return self._backend.to_str()

    def _with_bos(self, ids: list[int], add_bos: bool | None) -> list[int]:
        if (self.add_bos if add_bos is None else add_bos) and self.bos_id is not None:
            return [self.bos_id, *ids]
        return list(ids)

    def _holds_stream(self, i: int) -> bool:
        """True when text decoded up to this token may still change with the next token beyond what a
        trailing U+FFFD shows: a byte-fallback run decodes all at once, valid or not."""
        return i in self._byte_fallback_ids

    # ---- builders ------------------------------------------------------------------------------------

    @classmethod
    def from_gguf(cls, metadata: dict[str, Any], source: str) -> Tokenizer:
        """Build from a GGUF file's metadata (a plain dict keyed like `tokenizer.ggml.tokens`); gguf_vocab
        rebuilds the vocabulary."""
        from .gguf_vocab import gguf_backend  # not at the top: gguf_vocab builds on this module

        backend, n_tokens, byte_ids = gguf_backend(metadata, source)

        def token_id(key: str) -> int | None:
            value = metadata.get(key)
            if value is None:
                return None
            if not 0 <= int(value) < n_tokens:
                raise TokenizerError(f"{source}: GGUF field {key!r} = {value} is outside the vocabulary")
            return int(value)

        eos_ids = [
            i
            for key in ("eos_token_id", "eot_token_id", "eom_token_id")
            if (i := token_id(f"tokenizer.ggml.{key}")) is not None
        ]
        # llama.cpp (and transformers) add BOS to SentencePiece vocabularies unless the file says otherwise.
        add_bos = bool(metadata.get("tokenizer.ggml.add_bos_token", metadata["tokenizer.ggml.model"] == "llama"))
        return cls(
            backend,
            vocab_size=n_tokens,
            bos_id=token_id("tokenizer.ggml.bos_token_id"),
            eos_ids=eos_ids,
            add_bos=add_bos,
            chat_template=metadata.get("tokenizer.chat_template"),
            byte_fallback_ids=byte_ids,
            source=source,
        )

    @classmethod
    def from_hf_dir(cls, path: str | Path) -> Tokenizer:
        """Build from a HuggingFace model directory: tokenizer.json (+ tokenizer_config.json,
        generation_config.json, chat_template.jinja when present)."""
        root = Path(path)
        tok_file = root / "tokenizer.json"
        if not tok_file.is_file():
            raise TokenizerError(f"{tok_file}: not found (a fast-tokenizer tokenizer.json is required)")
        try:
            backend = _Backend.from_file(str(tok_file))
        except Exception as e:  # the Rust side raises a bare Exception
            raise TokenizerError(f"{tok_file}: cannot be read: {e}") from e
        config = _read_json(root / "tokenizer_config.json")
        generation = _read_json(root / "generation_config.json")

        def special_id(name: str) -> int | None:
            value = config.get(name)
            if isinstance(value, dict):
                value = value.get("content")
            if value is None:
                return None
            i = backend.token_to_id(value)
            if i is None:
                raise TokenizerError(f"{root / 'tokenizer_config.json'}: {name} {value!r} is not in the vocabulary")
            return i

        bos_id, eos_id = special_id("bos_token"), special_id("eos_token")
        gen_eos = generation.get("eos_token_id")
        gen_eos = [gen_eos] if isinstance(gen_eos, int) else list(gen_eos or [])
        if bos_id is None and isinstance(generation.get("bos_token_id"), int):
            bos_id = generation["bos_token_id"]
        if "add_bos_token" in config:
            add_bos = bool(config["add_bos_token"])
        else:  # no flag: the post-processor (e.g. Llama 3's TemplateProcessing) says whether BOS is added
            with_specials = backend.encode("a", add_special_tokens=True).ids
            add_bos = bos_id is not None and bool(with_specials) and with_specials[0] == bos_id
        backend.post_processor = None  # encode() adds BOS itself, so offsets stay untrimmed and aligned

        template = config.get("chat_template")
        if isinstance(template, list):  # [{"name": "default", "template": ...}, {"name": "tool_use", ...}]
            named = {t.get("name"): t.get("template") for t in template}
            template = named.get("default") or next(iter(named.values()), None)
        if (root / "chat_template.jinja").is_file():
            template = (root / "chat_template.jinja").read_text(encoding="utf-8")

        model = json.loads(backend.to_str()).get("model", {})
        byte_ids: list[int] = []
        if model.get("byte_fallback"):
            byte_ids = [i for t, i in backend.get_vocab().items() if BYTE_TOKEN.fullmatch(t)]
        return cls(
            backend,
            vocab_size=backend.get_vocab_size(with_added_tokens=True),
            bos_id=bos_id,
            eos_ids=[i for i in [eos_id, *gen_eos] if i is not None],
            add_bos=add_bos,
            chat_template=template,
            byte_fallback_ids=byte_ids,
            source=str(root),
        )


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise TokenizerError(f"{path}: invalid JSON: {e}") from e
