"""Tokenizers: one interface for every model.

`Tokenizer` wraps a HuggingFace `tokenizers.Tokenizer` and is built from one of two sources:

- GGUF metadata (`Tokenizer.from_gguf`), as a plain dict of `tokenizer.*` keys. Two vocabulary kinds:
  * "gpt2": byte-level BPE with merges. `tokenizer.ggml.pre` picks the pre-tokenizer split regex
    (`PRE_TOKENIZERS`); an unknown name is an error rather than a silent guess, because a wrong split
    changes ids without any visible failure.
  * "llama": SentencePiece-style BPE: scores, `<0xNN>` byte-fallback tokens, `▁` for spaces. Merges
    are taken from the file or rebuilt from the scores.
  Both are rebuilt the way transformers' GGUF loader rebuilds them, which is what the tests compare
  against; where llama.cpp differs, it is noted at the place.
- A HuggingFace directory (`Tokenizer.from_hf_dir`): `tokenizer.json`, plus `tokenizer_config.json`
  and `generation_config.json` for the special ids and the chat template.

`ByteTokenizer` serves the built-in synthetic model: ids 0..255 are raw bytes, then the specials.

`StreamDecoder` turns a stream of ids into text deltas whose concatenation is exactly `decode(ids)`.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from tokenizers import AddedToken, Regex, decoders, models, normalizers, pre_tokenizers
from tokenizers import Tokenizer as _Backend


class TokenizerError(Exception):
    """A tokenizer cannot be built; the message names the source file and the offending field."""


# llama.cpp's token types (`tokenizer.ggml.token_type`).
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6

_GPT2_BYTE_LEVEL = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)

_LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def _split_then_bytes(split: str) -> pre_tokenizers.PreTokenizer:
    return pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(split), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )


def _digits_then_gpt2() -> pre_tokenizers.PreTokenizer:
    # llama.cpp splits every numeral off ("\p{N}") before the GPT-2 regex, as SmolLM's own tokenizer.json
    # does (its vocabulary has no "Ġ1"). transformers' GGUF loader applies the GPT-2 regex alone, which
    # splits whitespace before a numeral differently ("\n  2": "ĊĠĠ"+"2" here, "ĊĠ"+"Ġ"+"2" there).
    return pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), _GPT2_BYTE_LEVEL])


# `tokenizer.ggml.pre` -> pre-tokenizer for "gpt2" vocabularies.
PRE_TOKENIZERS: dict[str, Any] = {
    # llama.cpp's "default" is a multi-regex oddity; like transformers we read it (and "gpt-2") as GPT-2's.
    "default": lambda: _GPT2_BYTE_LEVEL,
    "gpt-2": lambda: _GPT2_BYTE_LEVEL,
    "gpt2": lambda: _GPT2_BYTE_LEVEL,
    "smollm": _digits_then_gpt2,
    "starcoder": _digits_then_gpt2,
    "refact": _digits_then_gpt2,
    "codeshell": _digits_then_gpt2,
    "llama-bpe": lambda: _split_then_bytes(_LLAMA3_SPLIT),
    "llama3": lambda: _split_then_bytes(_LLAMA3_SPLIT),
    "llama-v3": lambda: _split_then_bytes(_LLAMA3_SPLIT),
    "smaug-bpe": lambda: _split_then_bytes(_LLAMA3_SPLIT),
    "qwen2": lambda: _split_then_bytes(_QWEN2_SPLIT),
    "deepseek-r1-qwen": lambda: _split_then_bytes(_QWEN2_SPLIT),
}


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
def _unicode_to_bytes() -> dict[str, int]:
    return {c: b for b, c in bytes_to_unicode().items()}


def generate_merges(vocab: dict[str, int], scores: dict[str, float]) -> list[tuple[str, str]]:
    """BPE merges implied by a SentencePiece vocabulary: every split of a token into two tokens, best
    score of the merged token first (transformers' `generate_merges`, kept identical so ids agree)."""
    merges = []
    for piece, score in scores.items():
        local = [
            (piece[:i], piece[i:], score)
            for i in range(1, len(piece))
            if piece[:i] in vocab and piece[i:] in vocab
        ]
        local.sort(key=lambda m: (vocab[m[0]], vocab[m[1]]))
        merges.extend(local)
    merges.sort(key=lambda m: (m[2], len(m[0]), len(m[1])), reverse=True)
    return [(left, right) for left, right, _ in merges]


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
        if i in self._byte_fallback_ids and _BYTE_TOKEN.fullmatch(piece):
            return bytes([int(piece[3:5], 16)])
        table = _unicode_to_bytes()
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
        """Build from a GGUF file's metadata (a plain dict keyed like `tokenizer.ggml.tokens`)."""

        def field(key: str, default: Any = _MISSING) -> Any:
            if key in metadata:
                return metadata[key]
            if default is _MISSING:
                raise TokenizerError(f"{source}: GGUF field {key!r} is missing")
            return default

        kind = field("tokenizer.ggml.model")
        tokens = list(field("tokenizer.ggml.tokens"))
        types = list(field("tokenizer.ggml.token_type", [NORMAL] * len(tokens)))
        if len(types) != len(tokens):
            raise TokenizerError(
                f"{source}: GGUF field 'tokenizer.ggml.token_type' has {len(types)} entries, "
                f"'tokenizer.ggml.tokens' has {len(tokens)}"
            )
        if kind == "gpt2":
            backend, byte_ids = _byte_level_backend(metadata, tokens, types, source), ()
        elif kind == "llama":
            backend, byte_ids = _sentencepiece_backend(metadata, tokens, types, source)
        else:
            raise TokenizerError(
                f"{source}: GGUF field 'tokenizer.ggml.model' = {kind!r} is not supported (supported: 'gpt2', 'llama')"
            )

        def token_id(key: str) -> int | None:
            value = metadata.get(key)
            if value is None:
                return None
            if not 0 <= int(value) < len(tokens):
                raise TokenizerError(f"{source}: GGUF field {key!r} = {value} is outside the vocabulary")
            return int(value)

        eos_ids = [
            i
            for key in ("eos_token_id", "eot_token_id", "eom_token_id")
            if (i := token_id(f"tokenizer.ggml.{key}")) is not None
        ]
        # llama.cpp (and transformers) add BOS to SentencePiece vocabularies unless the file says otherwise.
        add_bos = bool(metadata.get("tokenizer.ggml.add_bos_token", kind == "llama"))
        return cls(
            backend,
            vocab_size=len(tokens),
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
            byte_ids = [i for t, i in backend.get_vocab().items() if _BYTE_TOKEN.fullmatch(t)]
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


_MISSING = object()
_BYTE_TOKEN = re.compile(r"<0x[0-9A-Fa-f]{2}>")


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise TokenizerError(f"{path}: invalid JSON: {e}") from e


def _added_tokens(tokens: list[str], types: list[int]) -> list[AddedToken]:
    """Control tokens become special added tokens, user-defined ones plain added tokens: either way
    they are matched whole in the text, as llama.cpp does."""
    return [
        AddedToken(tok, normalized=False, special=(ty == CONTROL))
        for tok, ty in zip(tokens, types, strict=True)
        if ty in (CONTROL, USER_DEFINED)
    ]


def _split_merges(merges: Sequence[str], source: str) -> list[tuple[str, str]]:
    out = []
    for n, merge in enumerate(merges):
        left, sep, right = merge.partition(" ")
        if not sep:
            raise TokenizerError(f"{source}: GGUF field 'tokenizer.ggml.merges'[{n}] = {merge!r} is not 'a b'")
        out.append((left, right))
    return out


def _byte_level_backend(metadata: dict[str, Any], tokens: list[str], types: list[int], source: str) -> _Backend:
    pre = metadata.get("tokenizer.ggml.pre", "default")
    if pre not in PRE_TOKENIZERS:
        raise TokenizerError(
            f"{source}: GGUF field 'tokenizer.ggml.pre' = {pre!r} is not a supported pre-tokenizer "
            f"(supported: {', '.join(sorted(PRE_TOKENIZERS))})"
        )
    if "tokenizer.ggml.merges" not in metadata:
        raise TokenizerError(f"{source}: GGUF field 'tokenizer.ggml.merges' is missing (a 'gpt2' vocabulary needs it)")
    spelling = bytes_to_unicode()
    alphabet = set(spelling.values())
    vocab = {}
    for i, (tok, ty) in enumerate(zip(tokens, types, strict=True)):
        # Every ordinary token is spelled in GPT-2's byte alphabet; respell any that is not (as transformers does).
        if ty not in (CONTROL, USER_DEFINED) and not set(tok) <= alphabet:
            tok = "".join(spelling[b] for b in tok.encode("utf-8"))
        vocab.setdefault(tok, i)
    backend = _Backend(
        models.BPE(vocab=vocab, merges=_split_merges(metadata["tokenizer.ggml.merges"], source), fuse_unk=False)
    )
    backend.pre_tokenizer = PRE_TOKENIZERS[pre]()
    backend.decoder = decoders.ByteLevel()
    backend.add_tokens(_added_tokens(tokens, types))
    return backend


def _sentencepiece_backend(
    metadata: dict[str, Any], tokens: list[str], types: list[int], source: str
) -> tuple[_Backend, list[int]]:
    """SentencePiece-style BPE, with transformers' per-architecture variants: Gemma spells runs of
    spaces as real spaces and ranks merges by file order, Phi-3 prefixes "▁" with a normalizer."""
    arch = metadata.get("general.architecture", "llama")
    gemma = arch in ("gemma", "gemma2", "gemma3")
    if gemma:  # "  " -> "▁▁", so the merges built from the vocabulary match the normalized text
        tokens = ["▁" * len(t) if " " in t and not t.strip() else t for t in tokens]
    vocab = {}
    for i, tok in enumerate(tokens):
        vocab.setdefault(tok, i)
    if "tokenizer.ggml.merges" in metadata:
        merges = _split_merges(metadata["tokenizer.ggml.merges"], source)
    elif gemma:  # Gemma's scores do not follow its merge order; the token order does
        merges = generate_merges(vocab, {t: -float(i) for i, t in enumerate(tokens)})
    else:
        scores = metadata.get("tokenizer.ggml.scores")
        if scores is None or len(scores) != len(tokens):
            raise TokenizerError(
                f"{source}: GGUF field 'tokenizer.ggml.scores' is missing or not one per token "
                "(a 'llama' vocabulary without merges needs it)"
            )
        merges = generate_merges(vocab, dict(zip(tokens, (float(s) for s in scores), strict=True)))
    unk = metadata.get("tokenizer.ggml.unknown_token_id")
    unk = int(unk) if unk is not None and 0 <= int(unk) < len(tokens) else None
    backend = _Backend(
        models.BPE(
            vocab=vocab,
            merges=merges,
            fuse_unk=True,
            byte_fallback=True,
            unk_token=tokens[unk] if unk is not None else None,
        )
    )
    steps = [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()]
    add_prefix = bool(metadata.get("tokenizer.ggml.add_space_prefix", True))
    if gemma:  # no prefix space; every space becomes "▁"
        backend.normalizer = normalizers.Replace(" ", "▁")
        backend.pre_tokenizer = pre_tokenizers.Split(" ", behavior="merged_with_previous")
        add_prefix = False
    elif arch == "phi3":  # the prefix comes from a normalizer, so text starting with a space keeps both
        backend.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    else:
        # transformers' non-legacy Llama: "▁" is prepended to the start of the text only. (llama.cpp
        # also prepends it after every special token; the ids then differ right after a special token.)
        backend.pre_tokenizer = pre_tokenizers.Metaspace(
            replacement="▁", prepend_scheme="first" if add_prefix else "never", split=False
        )
    if add_prefix:
        steps.append(decoders.Strip(content=" ", left=1, right=0))
    backend.decoder = decoders.Sequence(steps)
    added = _added_tokens(tokens, types)
    if unk is not None and types[unk] != CONTROL:
        added.append(AddedToken(tokens[unk], normalized=False, special=True))
    backend.add_tokens(added)
    byte_ids = [
        i for i, (tok, ty) in enumerate(zip(tokens, types, strict=True)) if ty == BYTE or _BYTE_TOKEN.fullmatch(tok)
    ]
    return backend, byte_ids


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
        if _BYTE_TOKEN.fullmatch(token):
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
