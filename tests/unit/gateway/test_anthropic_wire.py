"""The Anthropic wire accepts every request real Claude Code sends (captured in tests/data/claude_code) and
everything else the real API accepts; fields a local model cannot act on are named, not refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fak_gateway.anthropic_wire import decode_messages, ignored, messages_to_bus
from fak_gateway.errors import WireError

CAPTURES = Path(__file__).parents[2] / "data" / "claude_code"


def body_of(name: str) -> dict:
    data = json.loads((CAPTURES / name).read_text())
    return data.get("body", data)


@pytest.mark.parametrize("name", ["messages_1.json", "messages_2.json", "messages_custom_model_nothink.json"])
def test_every_captured_claude_code_request_is_served(name):
    body = body_of(name)
    req = messages_to_bus(decode_messages(json.dumps(body).encode()), session="")
    assert req.messages[0].role == "system" and all(m.role != "system" for m in req.messages[1:])
    system_texts = [m["content"] if isinstance(m["content"], str) else m["content"][0]["text"]
                    for m in body["messages"] if m["role"] == "system"]
    assert all(t[:40] in req.messages[0].content for t in system_texts)  # system-role entries joined the system prompt
    assert {t.name for t in req.tools} == {t["name"] for t in body["tools"]}
    assert req.sampling.max_tokens == body["max_tokens"]
    if any(b.get("type") == "tool_result" for m in body["messages"] if isinstance(m["content"], list) for b in m["content"]):
        [tool] = [m for m in req.messages if m.role == "tool"]
        assert tool.name == "Bash" and tool.block


def test_thinking_and_friends_are_accepted_and_named():
    body = body_of("messages_1.json")
    r = decode_messages(json.dumps(body).encode())
    assert {"thinking", "context_management", "output_config", "metadata"} <= set(ignored(r))


def test_fields_and_blocks_of_the_real_api_are_accepted():
    body = {"model": "m", "max_tokens": 10, "service_tier": "auto", "thinking": {"type": "enabled", "budget_tokens": 2048},
            "tool_choice": {"type": "auto", "disable_parallel_tool_use": True},
            "tools": [{"type": "web_search_20250305", "name": "web_search", "max_uses": 3},
                      {"name": "get", "input_schema": {"type": "object"}, "cache_control": {"type": "ephemeral"}}],
            "messages": [{"role": "user", "content": [{"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}]},
                         {"role": "assistant", "content": [{"type": "thinking", "thinking": "hm", "signature": "s"},
                                                           {"type": "redacted_thinking", "data": "x"},
                                                           {"type": "text", "text": "ok"}]},
                         {"role": "user", "content": "go", "output_config": {"effort": "low"}}]}
    r = decode_messages(json.dumps(body).encode())
    req = messages_to_bus(r, "")
    assert [t.name for t in req.tools] == ["get"] and [m.content for m in req.messages] == ["hi", "ok", "go"]
    assert {"thinking", "service_tier", "tool:web_search", "block:thinking", "block:redacted_thinking"} <= set(ignored(r))


def test_disabled_thinking_is_not_reported():
    r = decode_messages(json.dumps({"model": "m", "max_tokens": 4, "thinking": {"type": "disabled"},
                                    "messages": [{"role": "user", "content": "hi"}]}).encode())
    assert "thinking" not in ignored(r)


@pytest.mark.parametrize("content,match", [
    ([{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA=="}}], "image"),
    ([{"type": "tool_result", "tool_use_id": "t", "content": [{"type": "image", "source": {}}]}], "reads text only"),
])
def test_what_a_text_model_cannot_read_is_a_clear_400(content, match):
    r = decode_messages(json.dumps({"model": "m", "max_tokens": 4, "messages": [{"role": "user", "content": content}]}).encode())
    with pytest.raises(WireError, match=match) as e:
        messages_to_bus(r, "")
    assert e.value.kind == "invalid_request"
