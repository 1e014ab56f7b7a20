"""logprobs / top_logprobs through the official OpenAI SDK, against the real topology (synthetic model)."""

from __future__ import annotations

import math

import openai
import pytest

PROMPT = [{"role": "user", "content": "Tell me about log probabilities"}]


@pytest.fixture(scope="module")
def oai(topology):
    return openai.OpenAI(base_url=topology.gateway_url + "/v1", api_key="unused", max_retries=0, timeout=60)


def check_entries(entries, content: str, top: int) -> None:
    assert entries, "no logprobs"
    assert "".join(e.token for e in entries) == content
    assert b"".join(bytes(e.bytes) for e in entries).decode("utf-8") == content
    for e in entries:
        assert e.logprob <= 0 and math.isfinite(e.logprob)
        assert len(e.top_logprobs) == top
        assert [t.logprob for t in e.top_logprobs] == sorted((t.logprob for t in e.top_logprobs), reverse=True)
        # temperature 0: the chosen token is the most likely one
        assert e.top_logprobs[0].token == e.token and e.top_logprobs[0].logprob == pytest.approx(e.logprob)


def test_chat_logprobs_non_stream(oai):
    r = oai.chat.completions.create(model="synthetic", messages=PROMPT, max_tokens=16, temperature=0,
                                    logprobs=True, top_logprobs=3)
    choice = r.choices[0]
    check_entries(choice.logprobs.content, choice.message.content, 3)
    assert len(choice.logprobs.content) == r.usage.completion_tokens == 16


def test_chat_logprobs_stream_match_non_stream(oai):
    kw = dict(model="synthetic", messages=PROMPT, max_tokens=16, temperature=0, logprobs=True, top_logprobs=3)
    full = oai.chat.completions.create(**kw).choices[0]
    chunks = [c for c in oai.chat.completions.create(stream=True, **kw) if c.choices]
    entries = []
    for c in chunks:
        delta = c.choices[0].delta.content or ""
        if delta:  # each content delta carries the entries of its own tokens
            assert "".join(e.token for e in c.choices[0].logprobs.content) == delta
            entries += c.choices[0].logprobs.content
    content = "".join(c.choices[0].delta.content or "" for c in chunks)
    assert content == full.message.content
    check_entries(entries, content, 3)
    assert [(e.token, e.logprob) for e in entries] == [(e.token, e.logprob) for e in full.logprobs.content]


def test_chat_without_logprobs_reports_none(oai):
    r = oai.chat.completions.create(model="synthetic", messages=PROMPT, max_tokens=4, temperature=0)
    assert r.choices[0].logprobs is None


def test_chat_logprobs_without_alternatives(oai):
    r = oai.chat.completions.create(model="synthetic", messages=PROMPT, max_tokens=6, temperature=0, logprobs=True)
    entries = r.choices[0].logprobs.content
    assert len(entries) == 6 and all(e.top_logprobs == [] for e in entries)


@pytest.mark.parametrize("kw, param", [({"top_logprobs": 2}, "top_logprobs"),
                                       ({"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
                                       ({"logprobs": 3}, "logprobs")])
def test_chat_logprobs_refusals(oai, kw, param):
    with pytest.raises(openai.BadRequestError) as err:
        oai.chat.completions.create(model="synthetic", messages=PROMPT, max_tokens=4, **kw)
    assert err.value.body["param"] == param


def test_completions_legacy_logprobs(oai):
    kw = dict(model="synthetic", prompt="Once upon a time", max_tokens=10, temperature=0, logprobs=2)
    r = oai.completions.create(**kw)
    lp, text = r.choices[0].logprobs, r.choices[0].text
    assert "".join(lp.tokens) == text and len(lp.tokens) == len(lp.token_logprobs) == len(lp.text_offset) == 10
    assert lp.text_offset == [sum(len(t) for t in lp.tokens[:k]) for k in range(10)]
    for token, logprob, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs, strict=True):
        assert 1 <= len(top) <= 3 and top[token] == pytest.approx(logprob)  # the chosen token is always in
        assert max(top.values()) == pytest.approx(logprob)  # greedy
    streamed = [c.choices[0] for c in oai.completions.create(stream=True, **kw) if c.choices and c.choices[0].text]
    assert "".join(c.text for c in streamed) == text
    assert [t for c in streamed for t in c.logprobs.tokens] == lp.tokens
    assert [o for c in streamed for o in c.logprobs.text_offset] == lp.text_offset


@pytest.mark.parametrize("logprobs", [6, True])
def test_completions_logprobs_refusals(oai, logprobs):
    with pytest.raises(openai.BadRequestError) as err:
        oai.completions.create(model="synthetic", prompt="x", max_tokens=2, extra_body={"logprobs": logprobs})
    assert err.value.body["param"] == "logprobs"
