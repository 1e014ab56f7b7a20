"""The gateway through the official SDKs, against the real topology (nats-server + services as processes)."""

from __future__ import annotations

import anthropic
import openai
import pytest

# Anthropic's current SDK no longer has sampling parameters; the gateway still reads `temperature` (older
# clients send it), so the tests pass it as an extra body field to get greedy, comparable output.
GREEDY = {"temperature": 0}


@pytest.fixture(scope="module")
def oai(topology):
    return openai.OpenAI(base_url=topology.gateway_url + "/v1", api_key="unused", max_retries=0, timeout=60)


@pytest.fixture(scope="module")
def claude(topology):
    return anthropic.Anthropic(base_url=topology.gateway_url, api_key="unused", max_retries=0, timeout=60)


def test_openai_chat_non_stream(oai):
    r = oai.chat.completions.create(model="synthetic", messages=[{"role": "user", "content": "Hello there"}],
                                    max_tokens=16, temperature=0)
    choice = r.choices[0]
    assert choice.message.role == "assistant"
    assert isinstance(choice.message.content, str) and len(choice.message.content) > 0
    assert choice.finish_reason == "length"
    assert r.usage.completion_tokens == 16
    assert r.usage.prompt_tokens > 0
    assert r.usage.total_tokens == r.usage.prompt_tokens + 16
    assert r.model == "synthetic"


def test_openai_chat_is_deterministic_at_temperature_zero(oai):
    kw = dict(model="synthetic", messages=[{"role": "user", "content": "same prompt"}], max_tokens=12, temperature=0)
    assert oai.chat.completions.create(**kw).choices[0].message.content == oai.chat.completions.create(**kw).choices[0].message.content


def test_openai_chat_stream_matches_non_stream(oai):
    kw = dict(model="synthetic", messages=[{"role": "user", "content": "Stream me"}], max_tokens=20, temperature=0)
    full = oai.chat.completions.create(**kw).choices[0].message.content
    chunks = list(oai.chat.completions.create(stream=True, stream_options={"include_usage": True}, **kw))
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert text == full
    assert finishes == ["length"]
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 20


def test_openai_stop_sequence(oai):
    kw = dict(model="synthetic", messages=[{"role": "user", "content": "Hello there"}], max_tokens=24, temperature=0)
    full = oai.chat.completions.create(**kw).choices[0].message.content
    stop = full[5:7]
    cut = oai.chat.completions.create(stop=[stop], **kw)
    assert cut.choices[0].finish_reason == "stop"
    assert cut.choices[0].message.content == full[: full.index(stop)]


def test_openai_seeded_sampling_reproducible(oai):
    kw = dict(model="synthetic", messages=[{"role": "user", "content": "sample"}], max_tokens=16, temperature=1.0, seed=7)
    a = oai.chat.completions.create(**kw).choices[0].message.content
    b = oai.chat.completions.create(**kw).choices[0].message.content
    assert a == b


def test_openai_completions_raw_prompt(oai):
    r = oai.completions.create(model="synthetic", prompt="Once upon a time", max_tokens=8, temperature=0)
    assert r.choices[0].text and r.choices[0].finish_reason == "length"
    assert r.usage.completion_tokens == 8


def test_openai_models(oai):
    ids = [m.id for m in oai.models.list().data]
    assert "synthetic" in ids


def test_anthropic_messages_non_stream(claude):
    r = claude.messages.create(model="synthetic", max_tokens=16, messages=[{"role": "user", "content": "Hello"}],
                               extra_body=GREEDY)
    assert r.role == "assistant" and r.type == "message"
    assert r.content[0].type == "text" and len(r.content[0].text) > 0
    assert r.stop_reason == "max_tokens"
    assert r.usage.output_tokens == 16 and r.usage.input_tokens > 0


def test_anthropic_messages_stream_event_order(claude):
    kw = dict(model="synthetic", max_tokens=16, messages=[{"role": "user", "content": "Hello"}], extra_body=GREEDY)
    full = claude.messages.create(**kw).content[0].text
    events = []
    text = []
    with claude.messages.stream(**kw) as stream:
        for ev in stream:
            events.append(ev.type)
            if ev.type == "content_block_delta":
                text.append(ev.delta.text)
        final = stream.get_final_message()
    core = [e for e in events if e in ("message_start", "content_block_start", "content_block_delta",
                                       "content_block_stop", "message_delta", "message_stop")]
    assert core[0] == "message_start" and core[1] == "content_block_start"
    assert core[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert set(core[2:-3]) == {"content_block_delta"}
    assert "".join(text) == full == final.content[0].text
    assert final.stop_reason == "max_tokens" and final.usage.output_tokens == 16


def test_anthropic_system_and_stop_sequence(claude):
    kw = dict(model="synthetic", max_tokens=24, system="You are terse.", messages=[{"role": "user", "content": "Hi"}],
              extra_body=GREEDY)
    full = claude.messages.create(**kw).content[0].text
    stop = full[3:5]
    r = claude.messages.create(stop_sequences=[stop], **kw)
    assert r.stop_reason == "stop_sequence" and r.stop_sequence == stop
    assert r.content[0].text == full[: full.index(stop)]


def test_anthropic_count_tokens(claude):
    n = claude.messages.count_tokens(model="synthetic", messages=[{"role": "user", "content": "Hello"}]).input_tokens
    r = claude.messages.create(model="synthetic", max_tokens=1, messages=[{"role": "user", "content": "Hello"}])
    # Anthropic's input_tokens leaves out what was read from the cache (an earlier test sent the same prompt)
    assert n == r.usage.input_tokens + r.usage.cache_read_input_tokens and n > 0
