"""Log-probabilities: the numerics (log-softmax of the raw logits, float64), each token's bytes, and which
tokens a Sequence reports with which content delta (held UTF-8, stop strings, tool calls, the final flush)."""

from __future__ import annotations

import numpy as np
import pytest

from fakcore.engine.backend import Segment
from fakcore.engine.prompt import RequestError
from fakcore.engine.sampling import LOGPROB_FLOOR, log_softmax, token_logprobs, validate_sampling
from fakcore.protocol import ChatMessage, GenerateRequest, Sampling, ToolSpec
from fakcore.text.tokenizer import Tokenizer
from tests.unit.kv.support import model, sequence
from tests.unit.text.support import SMOLLM2, build_spm_metadata, read_gguf_metadata
from tests.unit.text.test_text_tokenizer import CORPUS


def reference_log_softmax(logits: np.ndarray) -> np.ndarray:
    x = logits.astype(np.float64)
    return x - np.logaddexp.reduce(x)


# ---- numerics ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("scale", [1.0, 30.0, 1e4])
def test_log_softmax_is_normalised_and_matches_the_reference(scale):
    logits = (np.random.default_rng(3).standard_normal(5000) * scale).astype(np.float32)
    lp = log_softmax(logits)
    assert lp.dtype == np.float64 and (lp <= 0).all()
    assert np.exp(lp).sum() == pytest.approx(1.0, abs=1e-12)
    np.testing.assert_allclose(lp, reference_log_softmax(logits), rtol=1e-12, atol=1e-9)


def test_log_softmax_refuses_non_finite_logits():
    with pytest.raises(FloatingPointError):
        log_softmax(np.array([0.0, np.nan]))
    with pytest.raises(FloatingPointError):
        log_softmax(np.array([0.0, np.inf]))


@pytest.mark.parametrize("top", [0, 1, 5, 20])
def test_top_logprobs_are_the_most_likely_sorted(top):
    logits = np.random.default_rng(top).standard_normal(300).astype(np.float32)
    chosen, best = token_logprobs(logits, 17, top)
    ref = reference_log_softmax(logits)
    assert chosen == pytest.approx(ref[17], abs=1e-9)
    assert len(best) == top
    assert [i for i, _ in best] == list(np.argsort(-ref, kind="stable")[:top])
    assert [lp for _, lp in best] == sorted((lp for _, lp in best), reverse=True)
    for i, lp in best:
        assert lp == pytest.approx(ref[i], abs=1e-9)


def test_a_probability_of_zero_is_floored_not_minus_infinity():
    logits = np.array([2.0, -np.inf, 1.0, -np.inf])
    chosen, best = token_logprobs(logits, 1, 4)
    assert chosen == LOGPROB_FLOOR
    assert [i for i, _ in best] == [0, 2, 1, 3] and best[-1][1] == LOGPROB_FLOOR


@pytest.mark.parametrize("top", [-1, 21])
def test_top_logprobs_out_of_range_is_refused(top):
    with pytest.raises(RequestError, match="top_logprobs"):
        validate_sampling(Sampling(logprobs=True, top_logprobs=top))


# ---- on the synthetic model ---------------------------------------------------------------------------


def chat(text: str, **sampling) -> GenerateRequest:
    sampling.setdefault("temperature", 0.0)
    return GenerateRequest(request_id="r", model="synthetic", messages=[ChatMessage(role="user", content=text)],
                           sampling=Sampling(**sampling))


def test_greedy_decode_reports_the_log_softmax_of_every_step():
    m = model("synthetic", "reference")
    tf = m.transformer
    seq = sequence(m, chat("Hello there", max_tokens=10, logprobs=True, top_logprobs=5), tf.new_cache())
    feed, content, entries, rows = seq.prompt, "", [], []
    while not seq.done:
        logits = tf.forward(np.asarray(feed, np.int64), [Segment(seq.cache, slice(0, len(feed)))])[-1]
        rows.append(np.array(logits))
        content += seq.accept(logits)
        entries += seq.take_logprobs()
        feed = [seq.next_input]
    assert len(entries) == len(seq.generated) == 10
    for e, logits, token in zip(entries, rows, seq.generated, strict=True):
        ref = reference_log_softmax(logits)
        assert np.exp(ref).sum() == pytest.approx(1.0, abs=1e-12)
        assert e.id == token == int(np.argmax(logits))  # greedy: the chosen token is the most likely
        assert e.logprob == pytest.approx(ref[token], abs=1e-9)
        assert len(e.top) == 5 and e.top[0].id == e.id and e.top[0].logprob == e.logprob
        assert [t.logprob for t in e.top] == sorted((t.logprob for t in e.top), reverse=True)
        assert [t.id for t in e.top] == list(np.argsort(-ref, kind="stable")[:5])
        assert e.raw == m.tokenizer.token_bytes(token) and e.text == e.raw.decode("utf-8", "replace")
    assert "".join(e.text for e in entries) == content


def test_no_logprobs_asked_none_computed():
    m = model("synthetic", "reference")
    seq = sequence(m, chat("Hi", max_tokens=3))
    assert seq.ledger is None
    seq.accept(one_hot(m, ord("a")))
    assert seq.take_logprobs() == []


def one_hot(m, token: int) -> np.ndarray:
    logits = np.zeros(m.config.vocab_size, np.float32)
    logits[token] = 30.0
    return logits


def drive(seq, tokens: list[int]) -> list[tuple[str, list[int]]]:
    """Force each token in turn (greedy on one-hot logits); -> (content delta, reported ids) per step."""
    steps = []
    for t in tokens:
        if seq.done:
            break
        text = seq.accept(one_hot(seq.model, t))
        steps.append((text, [e.id for e in seq.take_logprobs()]))
    return steps


def byte_ids(text: str) -> list[int]:
    return list(text.encode("utf-8"))


def test_a_character_split_over_tokens_is_reported_with_the_delta_that_shows_it():
    m = model("synthetic", "reference")
    seq = sequence(m, chat("x", max_tokens=3, logprobs=True))
    steps = drive(seq, byte_ids("hé"))
    assert steps == [("h", [ord("h")]), ("", []), ("é", [0xC3, 0xA9])]
    assert seq.finish_reason == "length"


def test_tokens_swallowed_by_a_stop_string_are_not_reported():
    m = model("synthetic", "reference")
    seq = sequence(m, chat("x", max_tokens=20, logprobs=True, stop=["lo"]))
    steps = drive(seq, byte_ids("hello world"))
    assert "".join(t for t, _ in steps) == "hel"
    assert [i for _, ids in steps for i in ids] == byte_ids("hel")
    assert seq.finish_reason == "stop"


def test_text_held_for_a_stop_string_is_reported_when_flushed():
    m = model("synthetic", "reference")
    seq = sequence(m, chat("x", max_tokens=3, logprobs=True, stop=["xyz"]))
    steps = drive(seq, byte_ids("abx"))
    assert steps == [("a", [ord("a")]), ("b", [ord("b")]), ("x", [ord("x")])]
    assert seq.finish_reason == "length"


def test_tokens_of_a_tool_call_are_not_reported():
    m = model("synthetic", "reference")
    req = chat("weather?", max_tokens=200, logprobs=True)
    req.tools = [ToolSpec(name="get_weather", parameters={"type": "object"})]
    seq = sequence(m, req)
    reply = 'Hi <tool_call>{"name": "get_weather", "arguments": {}}</tool_call>'
    steps = drive(seq, [*byte_ids(reply), m.tokenizer.eos_ids[0]])
    assert "".join(t for t, _ in steps) == "Hi "
    assert [i for _, ids in steps for i in ids] == byte_ids("Hi ")
    assert seq.finish_reason == "tool_calls" and [c.name for c in seq.tool_calls] == ["get_weather"]


def test_top_logprobs_zero_reports_only_the_chosen_token():
    m = model("synthetic", "reference")
    seq = sequence(m, chat("x", max_tokens=1, logprobs=True))
    seq.accept(one_hot(m, ord("q")))
    (entry,) = seq.take_logprobs()
    assert entry.id == ord("q") and entry.top == [] and entry.logprob == pytest.approx(0.0, abs=1e-9)


# ---- each token's bytes -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def smollm2() -> Tokenizer:
    if not SMOLLM2.is_file():
        pytest.fail(f"{SMOLLM2} is missing: run `fak model pull smollm2-135m` first")
    return Tokenizer.from_gguf(read_gguf_metadata(SMOLLM2), str(SMOLLM2))


def test_byte_level_token_bytes_join_to_the_text(smollm2):
    for text in CORPUS:
        ids = smollm2.encode(text)
        assert b"".join(smollm2.token_bytes(i) for i in ids) == text.encode("utf-8"), text
    assert smollm2.token_bytes(smollm2.vocab_size + 10) == b""


def test_sentencepiece_token_bytes_keep_the_spaces():
    spm = Tokenizer.from_gguf(build_spm_metadata("llama"), "spm")
    for text in CORPUS:
        if "<|" in text or "<repo_name>" in text:
            continue  # specials of another vocabulary: here plain text, possibly <unk>
        ids = spm.encode(text, add_bos=False)
        pieces = b"".join(spm.token_bytes(i) for i in ids).decode("utf-8")
        # the pieces keep the space SentencePiece may prefix to the text (the decoder strips it)
        assert pieces in (text, " " + text), text
        assert pieces.removeprefix(" ") == spm.decode(ids), text
