"""Same-wire upstreams: the client's request goes on as it came, the answer comes back as the upstream sent it,
with the boundary applied to exactly two things.

Requests. Anthropic → Anthropic: the client's bytes, unchanged, unless a tool_result block is quarantined:
then that block's `content` value alone is replaced by the placeholder (every other byte, key order and
`cache_control` marker kept, so prompt caching still works). OpenAI → OpenAI: the client's JSON with the
model rewritten (when a route says so) and quarantined tool messages replaced.

Responses. Text flows through undelayed. Tool calls are held until their verdict: an allowed call is
released verbatim, a denied one becomes the wire-correct refusal (a text block / content delta naming the
tool, reason and rule), and when no call is left the stop reason reads end_turn / stop.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from fakcore.protocol import ToolCall, block_id

# judge(calls) -> refusal text per call (None: allowed)
Judge = Callable[[list[ToolCall]], Awaitable[list[str | None]]]
# quarantined(block id) -> the placeholder text, or None when the block may pass
Lookup = Callable[[str], str | None]

_WS = re.compile(r"[ \t\n\r]*")
_scan = json.JSONDecoder().scan_once
_scanstring = json.decoder.scanstring  # type: ignore[attr-defined]


# ---------------------------------------------------------------------------------------------------------
# Finding values in JSON text without re-serialising it
# ---------------------------------------------------------------------------------------------------------


def _ws(s: str, i: int) -> int:
    return _WS.match(s, i).end()  # type: ignore[union-attr]


def members(s: str, i: int) -> dict[str, tuple[int, int]]:
    """The object starting at s[i]: each key's value as a (start, end) character span."""
    out: dict[str, tuple[int, int]] = {}
    i = _ws(s, i + 1)
    if s[i] == "}":
        return out
    while True:
        key, i = _scanstring(s, i + 1)
        i = _ws(s, _ws(s, i) + 1)  # past ':'
        _, end = _scan(s, i)
        out[key] = (i, end)
        i = _ws(s, end)
        if s[i] == "}":
            return out
        i = _ws(s, i + 1)  # past ','


def elements(s: str, i: int) -> list[tuple[int, int]]:
    """The array starting at s[i]: each element's (start, end) character span."""
    out: list[tuple[int, int]] = []
    i = _ws(s, i + 1)
    if s[i] == "]":
        return out
    while True:
        _, end = _scan(s, i)
        out.append((i, end))
        i = _ws(s, end)
        if s[i] == "]":
            return out
        i = _ws(s, i + 1)


def result_text(content: Any) -> str:
    """A tool result's text as the wire decoders see it (its block id is the hash of this)."""
    if content is None or isinstance(content, str):
        return content or ""
    return "".join(p.get("text") or "" for p in content if isinstance(p, dict) and p.get("type") == "text")


def _splice(s: str, edits: list[tuple[int, int, str]]) -> str:
    for start, end, text in sorted(edits, reverse=True):
        s = s[:start] + text + s[end:]
    return s


def redact_anthropic(body: bytes, lookup: Lookup, model: str | None = None) -> tuple[bytes, list[str], int]:
    """Replace the content of every quarantined tool_result block in an Anthropic request body (and the
    model name, when a route rewrites it). Returns (body, blocks replaced, bytes withheld); the body is the
    very same bytes when nothing is replaced."""
    s = body.decode("utf-8")
    edits: list[tuple[int, int, str]] = []
    replaced: list[str] = []
    top = members(s, _ws(s, 0))
    if model is not None and "model" in top:
        edits.append((*top["model"], json.dumps(model)))
    if "messages" in top and s[top["messages"][0]] == "[":
        for m0, _ in elements(s, top["messages"][0]):
            if s[m0] != "{":
                continue
            content = members(s, m0).get("content")
            if content is None or s[content[0]] != "[":
                continue
            for b0, _ in elements(s, content[0]):
                if s[b0] != "{":
                    continue
                fields = members(s, b0)
                kind = fields.get("type")
                if kind is None or json.loads(s[kind[0]:kind[1]]) != "tool_result" or "content" not in fields:
                    continue
                a, b = fields["content"]
                block = block_id(result_text(json.loads(s[a:b])))
                text = lookup(block)
                if text is not None:
                    edits.append((a, b, json.dumps(text, ensure_ascii=False)))
                    replaced.append(block)
    if not edits:
        return body, [], 0
    withheld = sum(len(s[a:b].encode()) for a, b, _ in edits[1 if model is not None and "model" in top else 0:])
    return _splice(s, edits).encode("utf-8"), replaced, withheld


def redact_openai(body: dict[str, Any], lookup: Lookup, model: str) -> tuple[list[str], int]:
    """In place: the model name, and the content of quarantined tool messages. Returns the blocks replaced
    and the bytes of tool output withheld (the body is re-serialised: its length says nothing of that)."""
    body["model"] = model
    replaced, withheld = [], 0
    for m in body.get("messages") or []:
        if isinstance(m, dict) and m.get("role") == "tool":
            original = result_text(m.get("content"))
            block = block_id(original)
            text = lookup(block)
            if text is not None:
                m["content"] = text
                replaced.append(block)
                withheld += len(original.encode())
    return replaced, withheld


# ---------------------------------------------------------------------------------------------------------
# Anthropic responses
# ---------------------------------------------------------------------------------------------------------


def _event(name: str, data: dict[str, Any]) -> bytes:
    return f"event: {name}\ndata: ".encode() + json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode() + b"\n\n"


def _call(block: dict[str, Any], arguments: str) -> ToolCall:
    return ToolCall(id=block.get("id", ""), name=block.get("name", ""), arguments=arguments or "{}")


async def anthropic_json(body: bytes, judge: Judge) -> bytes:
    """A non-streamed message: denied tool_use blocks become text; the bytes are the upstream's otherwise."""
    data = json.loads(body)
    blocks = data.get("content") or []
    uses = [b for b in blocks if isinstance(b, dict) and b.get("type") == "tool_use"]
    if not uses:
        return body
    refusals = await judge([_call(b, json.dumps(b.get("input", {}))) for b in uses])
    if not any(refusals):
        return body
    verdict = dict(zip(map(id, uses), refusals, strict=True))
    data["content"] = [{"type": "text", "text": verdict[id(b)]} if verdict.get(id(b)) else b for b in blocks]
    if data.get("stop_reason") == "tool_use" and all(refusals):
        data["stop_reason"] = "end_turn"
    return json.dumps(data, ensure_ascii=False).encode()


async def anthropic_stream(lines: AsyncIterator[str], judge: Judge) -> AsyncIterator[bytes]:
    """Relay an Anthropic SSE stream event by event; each tool_use block is held until its verdict."""
    held: list[bytes] | None = None  # the events of the tool_use block being held
    block: dict[str, Any] = {}
    arguments = ""
    allowed = denied = 0
    raw: list[str] = []
    async for line in lines:
        if line:
            raw.append(line)
            continue
        if not raw:
            continue
        event, raw = "\n".join(raw).encode() + b"\n\n", []
        data_line = next((x for x in event.decode().splitlines() if x.startswith("data:")), "")
        try:
            data = json.loads(data_line[5:]) if data_line else {}
        except ValueError:
            data = {}
        kind = data.get("type", "")
        if kind == "content_block_start" and (data.get("content_block") or {}).get("type") == "tool_use":
            held, block, arguments = [event], data["content_block"], ""
            continue
        if held is not None:
            held.append(event)
            if kind == "content_block_delta":
                arguments += (data.get("delta") or {}).get("partial_json") or ""
            if kind == "content_block_stop":
                [refusal] = await judge([_call(block, arguments)])
                if refusal is None:
                    allowed += 1
                    for e in held:
                        yield e
                else:
                    denied += 1
                    index = data.get("index", 0)
                    yield _event("content_block_start", {"type": "content_block_start", "index": index,
                                                         "content_block": {"type": "text", "text": ""}})
                    yield _event("content_block_delta", {"type": "content_block_delta", "index": index,
                                                         "delta": {"type": "text_delta", "text": refusal}})
                    yield _event("content_block_stop", {"type": "content_block_stop", "index": index})
                held = None
            continue
        if kind == "message_delta" and denied and not allowed and (data.get("delta") or {}).get("stop_reason") == "tool_use":
            data["delta"]["stop_reason"] = "end_turn"
            event = _event("message_delta", data)
        yield event
    if raw:
        yield "\n".join(raw).encode() + b"\n\n"


# ---------------------------------------------------------------------------------------------------------
# OpenAI responses
# ---------------------------------------------------------------------------------------------------------


async def openai_json(body: bytes, judge: Judge) -> bytes:
    data = json.loads(body)
    changed = False
    for choice in data.get("choices") or []:
        message = choice.get("message") or {}
        calls = message.get("tool_calls") or []
        if not calls:
            continue
        refusals = await judge([ToolCall(id=c.get("id", ""), name=(c.get("function") or {}).get("name", ""),
                                         arguments=(c.get("function") or {}).get("arguments") or "{}") for c in calls])
        if not any(refusals):
            continue
        changed = True
        kept = [c for c, r in zip(calls, refusals, strict=True) if r is None]
        text = "\n".join(r for r in refusals if r)
        message["content"] = (message.get("content") or "") + ("\n\n" if message.get("content") else "") + text
        if kept:
            message["tool_calls"] = kept
        else:
            message.pop("tool_calls", None)
            choice["finish_reason"] = "stop"
    return json.dumps(data, ensure_ascii=False).encode() if changed else body


async def openai_stream(lines: AsyncIterator[str], judge: Judge) -> AsyncIterator[bytes]:
    """Relay chat.completion.chunk events; tool-call deltas are held until the finish chunk, then judged."""
    held: list[dict[str, Any]] = []  # chunks carrying tool-call deltas
    calls: dict[int, dict[str, str]] = {}
    async for line in lines:
        if not line.startswith("data:"):
            continue
        payload = line[5:].strip()
        if payload == "[DONE]":
            yield b"data: [DONE]\n\n"
            continue
        try:
            chunk = json.loads(payload)
        except ValueError:
            yield f"data: {payload}\n\n".encode()
            continue
        choices = chunk.get("choices") or []
        delta = (choices[0].get("delta") or {}) if choices else {}
        finish = choices[0].get("finish_reason") if choices else None
        if delta.get("tool_calls"):
            for tc in delta["tool_calls"]:
                c = calls.setdefault(tc.get("index", 0), {"id": "", "name": "", "arguments": ""})
                fn = tc.get("function") or {}
                c["id"] = tc.get("id") or c["id"]
                c["name"] += fn.get("name") or ""
                c["arguments"] += fn.get("arguments") or ""
            held.append(chunk)
            if not finish:
                continue
        if finish and calls:
            order = sorted(calls)
            refusals = dict(zip(order, await judge([ToolCall(id=calls[i]["id"], name=calls[i]["name"],
                                                             arguments=calls[i]["arguments"] or "{}") for i in order]),
                                strict=True))
            for h in held:
                d = h["choices"][0]["delta"]
                d["tool_calls"] = [tc for tc in d["tool_calls"] if refusals.get(tc.get("index", 0)) is None]
                if d["tool_calls"] or d.get("content") or h["choices"][0].get("finish_reason"):
                    if not d["tool_calls"]:
                        d.pop("tool_calls")
                    if h is not chunk:
                        yield _sse(h)
            text = "\n".join(r for r in refusals.values() if r)
            if text:
                yield _sse({**chunk, "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]})
                if all(refusals.values()):
                    chunk["choices"][0]["finish_reason"] = "stop"
            held, calls = [], {}
        yield _sse(chunk)


def _sse(obj: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode() + b"\n\n"
