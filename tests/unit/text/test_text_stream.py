"""StreamDecoder: the streamed text, concatenated, is exactly decode(all ids)."""

from __future__ import annotations

import random

import pytest

from fakcore.text.stream_decode import StreamDecoder


def _streamed(tok, ids, skip_special=True) -> tuple[str, list[str]]:
    stream = StreamDecoder(tok, skip_special=skip_special)
    pieces = [stream.push(i) for i in ids]
    pieces.append(stream.flush())
    return "".join(pieces), pieces


def _random_ids(rng: random.Random, tok, n: int) -> list[int]:
    """Random ids, biased towards the awkward ones: specials, single bytes, byte-fallback tokens."""
    specials = [i for i in range(tok.vocab_size) if tok.is_special(i)][:64] or [0]
    awkward = [i for i in range(min(tok.vocab_size, 600)) if not tok.is_special(i)]
    out = []
    for _ in range(n):
        bucket = rng.random()
        if bucket < 0.1:
            out.append(rng.choice(specials))
        elif bucket < 0.5:
            out.append(rng.choice(awkward))
        else:
            out.append(rng.randrange(tok.vocab_size))
    return out


@pytest.mark.parametrize("which", ["smollm2", "spm", "byte_tok"])
def test_stream_equals_decode_on_random_ids(request, which):
    tok = request.getfixturevalue(which)
    rng = random.Random(1234)
    for _ in range(300):
        ids = _random_ids(rng, tok, rng.randint(0, 40))
        for skip in (True, False):
            text, _ = _streamed(tok, ids, skip)
            assert text == tok.decode(ids, skip_special=skip), ids


@pytest.mark.parametrize("which", ["smollm2", "spm", "byte_tok"])
def test_stream_holds_partial_characters(request, which):
    tok = request.getfixturevalue(which)
    text = "Hi 日本語 😀 café <|im_start|>x"
    ids = tok.encode(text, add_bos=False)
    joined, pieces = _streamed(tok, ids, skip_special=False)
    assert joined == tok.decode(ids, skip_special=False) == text
    assert not any("\ufffd" in p for p in pieces)  # no piece ever shows half a character
    assert len([p for p in pieces if p]) > 3  # and it does stream


def test_stream_keeps_sentencepiece_spaces(spm):
    """The leading-space strip of the SentencePiece decoder applies to the start of the text only,
    also when the stream begins with skipped specials."""
    ids = [spm.bos_id, *spm.encode("The dog sleeps", add_bos=False), spm.eos_ids[0], *spm.encode(" The dog", add_bos=False)]
    text, _ = _streamed(spm, ids)
    assert text == spm.decode(ids) == "The dog sleeps The dog"
