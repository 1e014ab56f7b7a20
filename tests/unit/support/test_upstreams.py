"""The scripted upstreams speak each wire well enough for the official SDKs, and record what they receive."""

from __future__ import annotations

import json
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import anthropic
import httpx
import openai
import pytest

from tests.support.upstreams import (
    AnthropicUpstream,
    Cut,
    Delay,
    Message,
    OpenAIUpstream,
    Text,
    Thinking,
    ToolUse,
    Usage,
    error,
    text,
    tool_use,
)

MODEL = "claude-test"
HI = [{"role": "user", "content": "hi"}]


def claude(up: AnthropicUpstream, **kw) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=up.url, api_key="sk-test", max_retries=0, **kw)


def gpt(up: OpenAIUpstream, **kw) -> openai.OpenAI:
    return openai.OpenAI(base_url=up.url + "/v1", api_key="sk-test", max_retries=0, **kw)


def refused(url: str) -> bool:
    host, port = url.removeprefix("http://").split(":")
    with socket.socket() as s:
        return s.connect_ex((host, int(port))) != 0


# ============================================================================== Anthropic wire


def test_anthropic_text_with_cache_usage_and_exact_record():
    usage = Usage(input_tokens=7, output_tokens=3, cache_read_input_tokens=100, cache_creation_input_tokens=20)
    with AnthropicUpstream([text("hello there")], usage=usage) as up:
        msg = claude(up).messages.create(model=MODEL, max_tokens=16, messages=HI)
        raw = b'{"model": "m", "max_tokens": 1, "messages": []}'
        httpx.post(up.url + "/v1/messages?beta=true", content=raw, headers={"x-api-key": "k2", "X-Odd": "A b"})
        (first, second) = up.requests
    assert msg.content[0].text == "hello there" and msg.stop_reason == "end_turn" and msg.model == MODEL
    assert (msg.usage.cache_read_input_tokens, msg.usage.cache_creation_input_tokens) == (100, 20)
    assert first.method == "POST" and first.path == "/v1/messages"
    assert first.header("x-api-key") == "sk-test" or first.header("authorization") == "Bearer sk-test"
    assert first.header("anthropic-version") and first.json()["messages"] == HI
    assert second.body == raw and second.query == "beta=true" and second.header("x-odd") == "A b"
    assert ("x-api-key", "k2") in second.headers


def test_anthropic_stream_event_sequence():
    with AnthropicUpstream([Message((Thinking("hmm"), Text("a b c")))]) as up:
        with claude(up).messages.create(model=MODEL, max_tokens=16, messages=HI, stream=True) as stream:
            events = list(stream)
    kinds = [e.type for e in events]
    assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]
    assert kinds.count("content_block_start") == kinds.count("content_block_stop") == 2
    deltas = [e.delta for e in events if e.type == "content_block_delta"]
    assert [d.type for d in deltas] == ["thinking_delta", "signature_delta"] + ["text_delta"] * 3
    assert "".join(d.text for d in deltas if d.type == "text_delta") == "a b c"
    assert events[-2].delta.stop_reason == "end_turn"


def test_anthropic_tool_use_streamed_and_not():
    args = {"command": "echo hi", "nested": {"list": [1, 2, 3]}}
    with AnthropicUpstream([tool_use("Bash", args), tool_use("Bash", args, id="toolu_given")]) as up:
        with claude(up).messages.stream(model=MODEL, max_tokens=16, messages=HI) as stream:
            streamed = stream.get_final_message()
        plain = claude(up).messages.create(model=MODEL, max_tokens=16, messages=HI)
    for msg in (streamed, plain):
        (block,) = msg.content
        assert block.type == "tool_use" and block.name == "Bash" and block.input == args
        assert msg.stop_reason == "tool_use"
    assert plain.content[0].id == "toolu_given" and streamed.content[0].id.startswith("toolu_")


def test_anthropic_error_with_retry_after():
    with AnthropicUpstream([error(429, retry_after="7"), error(529)]) as up:
        with pytest.raises(anthropic.RateLimitError) as e:
            claude(up).messages.create(model=MODEL, max_tokens=16, messages=HI)
        with pytest.raises(anthropic.APIStatusError) as overloaded:
            claude(up).messages.create(model=MODEL, max_tokens=16, messages=HI, stream=True)
    assert e.value.response.headers["retry-after"] == "7"
    assert e.value.body["error"]["type"] == "rate_limit_error"
    assert overloaded.value.status_code == 529


def test_anthropic_delay_and_client_timeout():
    with AnthropicUpstream([Delay(0.4, text("late")), Delay(30, text("never"))]) as up:
        t0 = time.monotonic()
        assert claude(up).messages.create(model=MODEL, max_tokens=16, messages=HI).content[0].text == "late"
        assert time.monotonic() - t0 >= 0.4
        with pytest.raises(anthropic.APITimeoutError):
            claude(up, timeout=0.3).messages.create(model=MODEL, max_tokens=16, messages=HI)
        deadline = time.monotonic() + 5
        while not up.requests[-1].disconnected and time.monotonic() < deadline:
            time.sleep(0.02)
        assert up.requests[-1].disconnected
        t0 = time.monotonic()
    assert time.monotonic() - t0 < 3  # leaving the context does not wait for the 30 s delay


def assert_cut(call) -> None:
    """The connection dropped: the SDK's connection error, or its HTTP library's protocol error mid-stream."""
    with pytest.raises(Exception) as e:
        call()
    assert isinstance(e.value, anthropic.APIConnectionError) or type(e.value).__name__ == "RemoteProtocolError"


def test_stop_ends_a_pending_delay():
    up = AnthropicUpstream([Delay(30, text("never"))]).start()
    got = []
    caller = threading.Thread(target=lambda: got.append(
        httpx.post(up.url + "/v1/messages", json={"model": MODEL, "messages": HI}, timeout=10).status_code))
    caller.start()
    while not up.requests:
        time.sleep(0.01)
    t0 = time.monotonic()
    up.stop()
    caller.join()
    assert time.monotonic() - t0 < 3 and got == [503]


def test_anthropic_cut_midway():
    with AnthropicUpstream([Cut(text("one two three four"), after_events=3), Cut(text("x"))]) as up:
        seen = []

        def stream():
            with claude(up).messages.create(model=MODEL, max_tokens=16, messages=HI, stream=True) as events:
                seen.extend(e.type for e in events)

        assert_cut(stream)
        assert_cut(lambda: claude(up).messages.create(model=MODEL, max_tokens=16, messages=HI))
    assert seen == ["message_start", "content_block_start"]  # the ping in between is not surfaced


def test_anthropic_count_tokens_does_not_consume_the_script():
    with AnthropicUpstream([text("kept")], count_tokens=42) as up:
        assert claude(up).messages.count_tokens(model=MODEL, messages=HI).input_tokens == 42
        assert up.pending == 1
        assert claude(up).messages.create(model=MODEL, max_tokens=16, messages=HI).content[0].text == "kept"
        with pytest.raises(anthropic.InternalServerError, match="no reply left"):
            claude(up).messages.create(model=MODEL, max_tokens=16, messages=HI)
        assert httpx.get(up.url + "/nowhere").status_code == 404
    assert [r.path for r in up.requests] == ["/v1/messages/count_tokens"] + ["/v1/messages"] * 2 + ["/nowhere"]


def test_responder_and_concurrent_requests():
    def echo(req):
        return text(req.json()["messages"][0]["content"])

    with AnthropicUpstream(echo) as up:
        client = claude(up)
        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(lambda i: client.messages.create(
                model=MODEL, max_tokens=16, messages=[{"role": "user", "content": f"n{i}"}]).content[0].text,
                range(16)))
        assert answers == [f"n{i}" for i in range(16)] and len(up.requests) == 16


def test_clean_shutdown():
    before = set(threading.enumerate())
    with AnthropicUpstream([text("x")]) as a, OpenAIUpstream([text("y")]) as o:
        claude(a).messages.create(model=MODEL, max_tokens=16, messages=HI)  # leaves a keep-alive connection
        gpt(o).chat.completions.create(model="m", messages=HI)
        urls = (a.url, o.url)
    assert set(threading.enumerate()) <= before
    assert all(refused(u) for u in urls)


# ================================================================================= OpenAI wire


def test_openai_text_and_models():
    usage = Usage(input_tokens=9, output_tokens=2, cache_read_input_tokens=4)
    with OpenAIUpstream([text("hello")], usage=usage, models=("a", "b")) as up:
        out = gpt(up).chat.completions.create(model="m", messages=HI)
        assert [m.id for m in gpt(up).models.list()] == ["a", "b"]
        (req, _) = up.requests
    assert out.choices[0].message.content == "hello" and out.choices[0].finish_reason == "stop"
    assert out.usage.prompt_tokens == 9 and out.usage.prompt_tokens_details.cached_tokens == 4
    assert req.path == "/v1/chat/completions" and req.header("authorization") == "Bearer sk-test"


def test_openai_stream_text_and_tool_calls():
    args = {"command": "echo hi", "n": [1, 2]}
    script = [text("a b c"), Message((Text("calling"), ToolUse("Bash", args), ToolUse("Read", {"p": "x"})))]
    with OpenAIUpstream(script) as up:
        chunks = list(gpt(up).chat.completions.create(model="m", messages=HI, stream=True,
                                                      stream_options={"include_usage": True}))
        raw = httpx.post(up.url + "/v1/chat/completions", json={"model": "m", "messages": HI, "stream": True}).text
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "a b c"
    assert chunks[-1].choices == [] and chunks[-1].usage.total_tokens == 15
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    calls: dict[int, dict] = {}
    for line in raw.splitlines():
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        (choice,) = json.loads(line[6:])["choices"]
        for d in choice["delta"].get("tool_calls", []):
            call = calls.setdefault(d["index"], {"name": "", "arguments": ""})
            call["name"] += d.get("function", {}).get("name") or ""
            call["arguments"] += d.get("function", {}).get("arguments") or ""
    assert raw.rstrip().endswith("data: [DONE]") and choice["finish_reason"] == "tool_calls"
    assert [(c["name"], json.loads(c["arguments"])) for c in calls.values()] == [("Bash", args), ("Read", {"p": "x"})]


def test_openai_tool_calls_non_stream_error_and_delay():
    script = [tool_use("Bash", {"command": "ls"}), error(429, retry_after="3"), Delay(0.3, text("late"))]
    with OpenAIUpstream(script) as up:
        out = gpt(up).chat.completions.create(model="m", messages=HI)
        with pytest.raises(openai.RateLimitError) as e:
            gpt(up).chat.completions.create(model="m", messages=HI)
        t0 = time.monotonic()
        assert gpt(up).chat.completions.create(model="m", messages=HI).choices[0].message.content == "late"
        assert time.monotonic() - t0 >= 0.3
    (call,) = out.choices[0].message.tool_calls
    assert call.function.name == "Bash" and json.loads(call.function.arguments) == {"command": "ls"}
    assert out.choices[0].finish_reason == "tool_calls"
    assert e.value.response.headers["retry-after"] == "3" and e.value.body["type"] == "rate_limit_exceeded"
