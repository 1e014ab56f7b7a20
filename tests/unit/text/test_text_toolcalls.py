"""Tool-call parsing, whole and streamed."""

from __future__ import annotations

import json
import random
import zlib

import pytest

from fakcore.text.chat import ChatTemplate
from fakcore.text.toolcalls import ParsedCall, StreamEvent, ToolCallStreamer, detect_style, parse_tool_calls

from .support import TEMPLATES


def test_detect_style(smollm2):
    assert detect_style(None) == "fak"
    assert detect_style(ChatTemplate.from_tokenizer(smollm2)) == "fak"
    assert detect_style(ChatTemplate((TEMPLATES / "qwen2_5.jinja").read_text())) == "hermes"
    assert detect_style(ChatTemplate((TEMPLATES / "llama3_1.jinja").read_text())) == "llama3"
    assert detect_style(ChatTemplate((TEMPLATES / "mistral_v3.jinja").read_text())) == "mistral"
    assert detect_style(ChatTemplate((TEMPLATES / "gemma2.jinja").read_text())) == "fak"


WEATHER = ParsedCall("get_weather", json.dumps({"city": "Paris"}))
ADD = ParsedCall("add", json.dumps({"a": 1, "b": 2}))

# (style, model output, expected content, expected calls)
CASES = [
    ("hermes", 'Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>', "Let me check.", [WEATHER]),
    (
        "hermes",
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>',
        "",
        [WEATHER, ADD],
    ),
    ("hermes", 'No tools here, just <b>html</b> and a < sign.', "No tools here, just <b>html</b> and a < sign.", []),
    ("hermes", '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}', '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}', []),
    ("hermes", '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}', "", [WEATHER]),  # stopped before the close tag
    ("hermes", "<tool_call>not json</tool_call> after", "<tool_call>not json</tool_call> after", []),
    ("hermes", '<tool_call>{"arguments": {}}</tool_call>', '<tool_call>{"arguments": {}}</tool_call>', []),  # no name
    ("fak", '<tool_call>{"name": "get_weather", "arguments": "{\\"city\\": \\"Paris\\"}"}</tool_call>', "", [WEATHER]),
    ("fak", '<tool_call>[{"name": "get_weather", "arguments": {"city": "Paris"}}, {"name": "add", "arguments": {"a": 1, "b": 2}}]</tool_call>', "", [WEATHER, ADD]),
    ("fak", '<tool_call>{"name": "add"}</tool_call>', "", [ParsedCall("add", "{}")]),
    ("llama3", '{"name": "get_weather", "parameters": {"city": "Paris"}}', "", [WEATHER]),
    ("llama3", '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris"}}; {"name": "add", "parameters": {"a": 1, "b": 2}}', "", [WEATHER, ADD]),
    ("llama3", 'The answer is {"name": "x"}', 'The answer is {"name": "x"}', []),
    ("llama3", '{"not": "a call"}', '{"not": "a call"}', []),
    ("llama3", '{"name": "get_weather", "parameters": {"city": "Par', '{"name": "get_weather", "parameters": {"city": "Par', []),
    ("mistral", '[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Paris"}, "id": "abcdefghi"}]', "", [ParsedCall("get_weather", WEATHER.arguments, "abcdefghi")]),
    ("mistral", 'Sure. [TOOL_CALLS] [{"name": "add", "arguments": {"a": 1, "b": 2}}]', "Sure.", [ADD]),
    ("mistral", "[TOOL_CALLS] [{oops", "[TOOL_CALLS] [{oops", []),
]


@pytest.mark.parametrize(("style", "text", "content", "calls"), CASES)
def test_parse(style, text, content, calls):
    assert parse_tool_calls(text, style) == (content, calls)


@pytest.mark.parametrize(("style", "text", "content", "calls"), CASES)
def test_streaming_in_random_chunks_agrees(style, text, content, calls):
    rng = random.Random(zlib.crc32(text.encode()))
    for _ in range(20):
        streamer = ToolCallStreamer(style)
        events, pos = [], 0
        while pos < len(text):
            step = rng.randint(1, 6)
            events += streamer.push(text[pos : pos + step])
            pos += step
        events += streamer.finish()
        streamed_content = "".join(e.text for e in events if e.kind == "content")
        streamed_calls = [e.call for e in events if e.kind == "tool_call"]
        assert streamed_calls == calls
        assert (streamed_content.strip() if calls else streamed_content) == content
        if not calls:
            assert streamed_content == text  # nothing is lost


def test_content_streams_while_a_call_is_held():
    streamer = ToolCallStreamer("hermes")
    assert streamer.push("Checking the weather") == [streamer_event("Checking the weather")]
    assert streamer.push(" now.\n<tool_") == [streamer_event(" now.\n")]  # "<tool_" might open a call
    assert streamer.holding
    assert streamer.push('call>\n{"name": "get_weather", ') == []
    out = streamer.push('"arguments": {"city": "Paris"}}\n</tool_call> and')
    assert [e.kind for e in out] == ["tool_call", "content"] and out[0].call == WEATHER and out[1].text == " and"
    assert streamer.push(" <b>bold</b>") == [streamer_event(" <b>bold</b>")]
    assert streamer.finish() == []


def test_llama3_content_streams_when_it_is_not_json():
    streamer = ToolCallStreamer("llama3")
    assert streamer.push("  ") == []
    assert streamer.push("Hello") == [streamer_event("  Hello")]
    assert streamer.push(" {json}") == [streamer_event(" {json}")]


def test_unknown_style():
    with pytest.raises(ValueError, match="style"):
        ToolCallStreamer("xml")


def streamer_event(text: str) -> StreamEvent:
    return StreamEvent("content", text)
