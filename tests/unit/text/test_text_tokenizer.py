"""Tokenizer: ids identical to transformers loading the same files."""

from __future__ import annotations

import json

import pytest

from fakcore.text.byte_tokenizer import ByteTokenizer
from fakcore.text.tokenizer import Tokenizer, TokenizerError

CORPUS = [
    "Hello world",
    "The quick brown fox jumps over the lazy dog.",
    "  leading spaces, inner   runs\t\ttabs\n\n\nnewlines  and trailing   ",
    "def fib(n: int) -> int:\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
    'const x = {"a": [1, 2, 3], \'b\': null}; // comment\n\tx.a.map((v) => v ** 2);',
    "1234567890 3.14159 -42 1e10 0x1F 2024-01-01 100,000.50 ½ ² ٣ x½ y² (٣)",
    "日本語のテキスト、中文测试。한국어 텍스트",
    "Emoji 😀🎉👩\u200d👩\u200d👧 and flags 🇫🇷 and ✓✗",
    "Ñandú Ελληνικά русский текст عربى हिन्दी ไทย café naïve résumé straße",
    "don't I'll we've THEY'RE it's O'Neil",
    "",
    " ",
    "\n",
    "\r\n\r\n",
    "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>",
    "a<|endoftext|>b<repo_name>x<file_sep>",
    "<|im_start|><|im_start|>",
    "<|im_start",  # a partial special is text
    "\x00\x01 control \x7f chars \ufeff bom",
]


def _numeral_after_space(text: str) -> bool:
    return any(a.isspace() and b.isnumeric() for a, b in zip(text, text[1:], strict=False))


@pytest.fixture(scope="module")
def hf_smollm2_digits(hf_smollm2):
    """transformers' GGUF conversion of SmolLM2 with the pre-tokenizer llama.cpp uses for "smollm":
    every numeral split off before GPT-2's byte-level regex."""
    from tokenizers import Tokenizer as Backend
    from tokenizers import pre_tokenizers

    backend = Backend.from_str(hf_smollm2.backend_tokenizer.to_str())
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    return backend


def test_smollm2_encodes_like_transformers(smollm2, hf_smollm2, hf_smollm2_digits):
    """Same ids as transformers, except where whitespace is followed by a numeral: there we follow
    llama.cpp's "smollm" pre-tokenizer (see the next test) and match transformers' conversion with
    just that pre-tokenizer put right. Decoding matches transformers everywhere."""
    for text in CORPUS:
        ids = smollm2.encode(text)
        assert ids == hf_smollm2_digits.encode(text, add_special_tokens=False).ids, text
        if not _numeral_after_space(text):
            assert ids == hf_smollm2.encode(text), text
        assert smollm2.decode(ids) == hf_smollm2.decode(ids, skip_special_tokens=True), text
        assert smollm2.decode(ids, skip_special=False) == hf_smollm2.decode(ids, skip_special_tokens=False), text


def test_smollm2_splits_numerals_like_llama_cpp(smollm2, hf_smollm2):
    r"""Where we part from transformers. llama.cpp's "smollm" pre-tokenizer (StarCoder's) splits each
    \p{N} character off before the GPT-2 regex, and SmolLM2 was trained that way: its vocabulary has
    no "Ġ1", which GPT-2's regex alone makes one of the commonest pieces. transformers' GGUF loader has
    no entry for "smollm" and applies the GPT-2 regex alone, so whitespace before a numeral splits
    differently: "\n  2" is "ĊĠĠ" + "2" here and in llama.cpp, "ĊĠ" + "Ġ" + "2" in transformers."""
    assert smollm2.token_to_id("Ġ1") is None and smollm2.token_to_id("ĊĠĠ") is not None
    assert [smollm2.id_to_token(i) for i in smollm2.encode("\n  2")] == ["ĊĠĠ", "2"]
    assert hf_smollm2.convert_ids_to_tokens(hf_smollm2.encode("\n  2")) == ["ĊĠ", "Ġ", "2"]
    assert [smollm2.id_to_token(i) for i in smollm2.encode(" ½")] == ["Ġ", "Â½"]
    assert hf_smollm2.convert_ids_to_tokens(hf_smollm2.encode(" ½")) == ["ĠÂ", "½"]


def test_smollm2_rendered_chat_encodes_like_transformers(smollm2, hf_smollm2, hf_smollm2_digits):
    messages = [
        {"role": "system", "content": "You are terse. 日本語 OK."},
        {"role": "user", "content": "List three primes:\n  2, 3, 5?"},
        {"role": "assistant", "content": "2,3,5 😀"},
        {"role": "user", "content": "def f(): pass"},
    ]
    text = hf_smollm2.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    ids = smollm2.encode(text)
    assert ids == hf_smollm2_digits.encode(text, add_special_tokens=False).ids
    assert ids[0] == smollm2.token_to_id("<|im_start|>")
    assert smollm2.decode(ids, skip_special=False) == text
    messages[1]["content"] = "List three primes: two, three, five?"  # no numeral after whitespace
    text = hf_smollm2.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert smollm2.encode(text) == hf_smollm2.encode(text)


def test_smollm2_fields(smollm2):
    assert smollm2.vocab_size == 49152
    assert (smollm2.bos_id, smollm2.eos_ids, smollm2.add_bos) == (1, (2,), False)
    assert smollm2.bos_token == "<|im_start|>" and smollm2.eos_token == "<|im_end|>"
    assert smollm2.is_special(2) and not smollm2.is_special(905)
    assert smollm2.id_to_token(905) == "Ġworld" and smollm2.token_to_id("Ġworld") == 905
    assert smollm2.token_to_id("no such token ever") is None
    assert "SmolLM" in (smollm2.chat_template or "")
    assert smollm2.encode("hi", add_bos=True)[0] == 1
    with pytest.raises(IndexError):
        smollm2.id_to_token(10**6)


def test_offsets_cover_the_text(smollm2, spm, byte_tok):
    text = "héllo 日本 world <|im_start|>x  😀!"
    for tok in (smollm2, spm, byte_tok):
        ids, offsets = tok.encode_with_offsets(text)
        assert ids == tok.encode(text, add_bos=False)
        assert len(offsets) == len(ids)
        assert all(0 <= a <= b <= len(text) for a, b in offsets)
        assert [a for a, _ in offsets] == sorted(a for a, _ in offsets)
        special = tok.token_to_id("<|im_start|>")
        start, end = offsets[ids.index(special)]
        assert text[start:end] == "<|im_start|>"


def test_sentencepiece_encodes_like_transformers(spm, hf_spm):
    """The llama-SPM GGUF built in support.py, loaded by transformers' GGUF loader, is the oracle."""
    texts = [*CORPUS, "The dog sleeps.", "hello<tool_call>{}</tool_call>", "<s>hello</s>", "<unk> what", "x\n y"]
    for text in texts:
        ids = spm.encode(text)
        assert ids == hf_spm.encode(text), text
        assert spm.decode(ids) == hf_spm.decode(ids, skip_special_tokens=True), text
        assert spm.decode(ids, skip_special=False) == hf_spm.decode(ids, skip_special_tokens=False), text


@pytest.mark.parametrize("arch", ["gemma2", "phi3"])
def test_sentencepiece_variants_encode_like_transformers(tmp_path, arch):
    """Gemma (spaces as "▁" by a normalizer, runs of spaces spelled with real spaces, merges in file
    order) and Phi-3 (prefix by a normalizer), as transformers' GGUF loader builds them."""
    from transformers import AutoTokenizer

    from .support import read_gguf_metadata, write_spm_gguf

    path = write_spm_gguf(tmp_path / f"{arch}.gguf", arch)
    tok = Tokenizer.from_gguf(read_gguf_metadata(path), str(path))
    oracle = AutoTokenizer.from_pretrained(str(tmp_path), gguf_file=path.name)
    for text in [*CORPUS, "The  dog   sleeps", " The dog", "x\n y"]:
        ids = tok.encode(text)
        assert ids == oracle.encode(text), text
        assert tok.decode(ids) == oracle.decode(ids, skip_special_tokens=True), text


def test_sentencepiece_fields(spm):
    assert (spm.bos_id, spm.eos_ids, spm.add_bos) == (1, (2,), True)  # BOS by default, like llama.cpp
    ids = spm.encode("café")
    assert ids[0] == 1
    assert spm.token_to_id("<0xC3>") in ids  # é is not in the vocabulary: byte fallback
    assert spm.decode(ids) == "café"
    assert spm.encode("The dog", add_bos=False)[0] != 1
    assert spm.is_special(spm.token_to_id("<|im_start|>"))
    assert not spm.is_special(spm.token_to_id("<tool_call>"))  # user-defined: whole, but not special
    assert spm.decode(spm.encode("a<tool_call>b")) == "a<tool_call>b"


def test_sentencepiece_with_merges_in_the_file(spm_gguf, spm):
    """A 'llama' vocabulary may list its merges instead of leaving them to be rebuilt from the scores."""
    from fakcore.text.gguf_vocab import generate_merges

    from .support import read_gguf_metadata

    meta = read_gguf_metadata(spm_gguf)
    tokens = meta["tokenizer.ggml.tokens"]
    merges = generate_merges({t: i for i, t in enumerate(tokens)}, dict(zip(tokens, meta["tokenizer.ggml.scores"], strict=True)))
    meta = {k: v for k, v in meta.items() if k != "tokenizer.ggml.scores"}
    meta["tokenizer.ggml.merges"] = [f"{a} {b}" for a, b in merges]
    tok = Tokenizer.from_gguf(meta, str(spm_gguf))
    for text in CORPUS:
        assert tok.encode(text) == spm.encode(text), text
    del meta["tokenizer.ggml.merges"]
    with pytest.raises(TokenizerError, match="tokenizer.ggml.scores"):
        Tokenizer.from_gguf(meta, str(spm_gguf))


def test_gguf_errors_name_file_and_field(smollm2_meta):
    meta = dict(smollm2_meta, **{"tokenizer.ggml.pre": "mystery-pre"})
    with pytest.raises(TokenizerError, match=r"model\.gguf.*tokenizer\.ggml\.pre.*mystery-pre"):
        Tokenizer.from_gguf(meta, "model.gguf")
    meta = dict(smollm2_meta, **{"tokenizer.ggml.model": "bert"})
    with pytest.raises(TokenizerError, match=r"model\.gguf.*tokenizer\.ggml\.model.*bert"):
        Tokenizer.from_gguf(meta, "model.gguf")
    meta = {k: v for k, v in smollm2_meta.items() if k != "tokenizer.ggml.tokens"}
    with pytest.raises(TokenizerError, match=r"model\.gguf.*tokenizer\.ggml\.tokens"):
        Tokenizer.from_gguf(meta, "model.gguf")
    meta = {k: v for k, v in smollm2_meta.items() if k != "tokenizer.ggml.merges"}
    with pytest.raises(TokenizerError, match=r"model\.gguf.*tokenizer\.ggml\.merges"):
        Tokenizer.from_gguf(meta, "model.gguf")
    meta = dict(smollm2_meta, **{"tokenizer.ggml.eos_token_id": 10**7})
    with pytest.raises(TokenizerError, match=r"model\.gguf.*eos_token_id"):
        Tokenizer.from_gguf(meta, "model.gguf")


@pytest.mark.parametrize("pre", ["llama-bpe", "llama3", "qwen2", "default", "gpt-2", "smollm"])
def test_known_pre_tokenizers_build(smollm2_meta, pre):
    tok = Tokenizer.from_gguf(dict(smollm2_meta, **{"tokenizer.ggml.pre": pre}), "x.gguf")
    text = "Hello world 12345 日本\n\n  x"
    assert tok.decode(tok.encode(text)) == text


def test_llama3_pre_tokenizer_splits_digits_in_threes(smollm2_meta):
    """Pre-tokenizer choice is visible: llama3 groups digits by three, qwen2 and smollm one by one."""

    def pieces(pre: str) -> list[str]:
        tok = Tokenizer.from_gguf(dict(smollm2_meta, **{"tokenizer.ggml.pre": pre}), "x.gguf")
        return tok._backend.pre_tokenizer.pre_tokenize_str("a 12345")

    assert [p for p, _ in pieces("llama3")] == ["a", "Ġ", "123", "45"]
    assert [p for p, _ in pieces("qwen2")] == ["a", "Ġ", "1", "2", "3", "4", "5"]
    assert [p for p, _ in pieces("gpt-2")] == ["a", "Ġ12345"]


def test_from_hf_dir_matches_transformers(tmp_path, hf_smollm2):
    from transformers import AutoTokenizer

    hf_smollm2.save_pretrained(tmp_path)
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": [2, 0], "bos_token_id": 1}))
    tok = Tokenizer.from_hf_dir(tmp_path)
    oracle = AutoTokenizer.from_pretrained(str(tmp_path))
    for text in CORPUS:
        assert tok.encode(text) == oracle.encode(text), text
        assert tok.decode(tok.encode(text)) == oracle.decode(oracle.encode(text), skip_special_tokens=True)
    assert (tok.bos_id, tok.eos_ids, tok.add_bos, tok.vocab_size) == (1, (2, 0), False, 49152)
    assert tok.chat_template == hf_smollm2.chat_template


def test_from_hf_dir_infers_bos_from_post_processor(tmp_path, spm, hf_spm):
    hf_spm.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "tokenizer_config.json").read_text())
    config.pop("add_bos_token", None)
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    tok = Tokenizer.from_hf_dir(tmp_path)
    assert tok.add_bos and tok.bos_id == 1
    assert tok.encode("The dog") == spm.encode("The dog")
    assert tok._holds_stream(tok.token_to_id("<0xC3>"))


def test_from_hf_dir_missing(tmp_path):
    with pytest.raises(TokenizerError, match="tokenizer.json"):
        Tokenizer.from_hf_dir(tmp_path)


def test_byte_tokenizer(byte_tok):
    text = "héllo<|im_start|>user\n日本<|im_end|><|im_end"
    ids = byte_tok.encode(text)
    assert ids[: len("héllo".encode())] == list("héllo".encode())
    assert byte_tok.token_to_id("<|im_start|>") in ids and ids.count(byte_tok.token_to_id("<|im_end|>")) == 1
    assert byte_tok.decode(ids, skip_special=False) == text
    assert byte_tok.decode(ids) == "héllouser\n日本<|im_end"
    assert byte_tok.vocab_size == 259 and byte_tok.eos_ids == (257,) and byte_tok.bos_id == 258
    assert byte_tok.encode("x", add_bos=True) == [258, 120]
    assert byte_tok.decode([0xE6, 0x97]) == "\ufffd"  # a cut character, replaced
    assert byte_tok.id_to_token(65) == "<0x41>" and byte_tok.token_to_id("<0x41>") == 65
    assert byte_tok.is_special(256) and not byte_tok.is_special(255)


def test_byte_tokenizer_prefers_longest_special():
    tok = ByteTokenizer(["<a>", "<a><b>"])
    assert tok.encode("<a><b><a>") == [257, 256]
    with pytest.raises(TokenizerError):
        ByteTokenizer(["<a>"], eos="<z>")
