"""GGUF vocabulary reconstruction: a `tokenizers` backend rebuilt from a GGUF file's `tokenizer.*` metadata.

Two vocabulary kinds (`tokenizer.ggml.model`):
  * "gpt2": byte-level BPE with merges. `tokenizer.ggml.pre` picks the pre-tokenizer split regex
    (`PRE_TOKENIZERS`); an unknown name is an error rather than a silent guess, because a wrong split
    changes ids without any visible failure.
  * "llama": SentencePiece-style BPE: scores, `<0xNN>` byte-fallback tokens, `▁` for spaces. Merges
    are taken from the file or rebuilt from the scores.
Both are rebuilt the way transformers' GGUF loader rebuilds them, which is what the tests compare
against; where llama.cpp differs, it is noted at the place. `Tokenizer.from_gguf` is the caller.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tokenizers import AddedToken, Regex, decoders, models, normalizers, pre_tokenizers
from tokenizers import Tokenizer as _Backend

from .tokenizer import BYTE_TOKEN, TokenizerError, bytes_to_unicode

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


def gguf_backend(metadata: dict[str, Any], source: str) -> tuple[_Backend, int, Sequence[int]]:
    """The backend for a GGUF file's vocabulary, its number of tokens, and its byte-fallback token ids."""

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
        return _byte_level_backend(metadata, tokens, types, source), len(tokens), ()
    if kind == "llama":
        backend, byte_ids = _sentencepiece_backend(metadata, tokens, types, source)
        return backend, len(tokens), byte_ids
    raise TokenizerError(
        f"{source}: GGUF field 'tokenizer.ggml.model' = {kind!r} is not supported (supported: 'gpt2', 'llama')"
    )


_MISSING = object()


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
        i for i, (tok, ty) in enumerate(zip(tokens, types, strict=True)) if ty == BYTE or BYTE_TOKEN.fullmatch(tok)
    ]
    return backend, byte_ids
