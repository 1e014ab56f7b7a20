"""Gemini → Gemini upstreams (Google's own API): the client's request goes on as it came, so what only Google
understands (thought signatures, thinkingConfig, safety settings, googleSearch and other hosted tools,
cachedContent) keeps working; the boundary is applied to exactly two things, as on the other wires
(passthrough.py).

Requests. The model is the path's (a route's rewrite goes there, not into the body); the `response` of a
quarantined functionResponse part is replaced by `{"output": placeholder}` (and its multimodal `parts`
dropped). The upstream is always asked for SSE; the client gets the framing it asked for (SSE with
`alt=sse`, else one JSON array).

Responses. Text flows through undelayed. Gemini sends each function call whole, in one chunk: that chunk
is held for the calls' verdicts, an allowed call goes on verbatim, a denied one becomes a text part naming
the rule.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import msgspec

from fak_gateway.errors import WireError
from fak_gateway.gemini_wire import Framing, FunctionResponse, proto_names, response_text, type_info
from fak_gateway.passthrough import Judge, Lookup
from fakcore.protocol import ToolCall, block_id

RESPONSE_TYPE = type_info(FunctionResponse)


def redact(body: dict[str, Any], lookup: Lookup) -> tuple[list[str], int]:
    """In place: the response of every quarantined functionResponse. Returns the blocks replaced and the
    bytes of tool output withheld."""
    replaced, withheld = [], 0
    for content in body.get("contents") or []:
        for part in (content.get("parts") or []) if isinstance(content, dict) else []:
            fr = (part.get("functionResponse") or part.get("function_response")) if isinstance(part, dict) else None
            if not isinstance(fr, dict):
                continue
            try:
                text = response_text(msgspec.convert(proto_names(fr, RESPONSE_TYPE), FunctionResponse))
            except msgspec.ValidationError:
                continue  # not a function response the wire could read: the upstream refuses it
            placeholder = lookup(block_id(text))
            if placeholder is not None:
                fr["response"] = {"output": placeholder}
                fr.pop("parts", None)
                replaced.append(block_id(text))
                withheld += len(text.encode())
    return replaced, withheld


def _call(fc: dict[str, Any]) -> ToolCall:
    return ToolCall(id=fc.get("id") or "", name=fc.get("name", ""), arguments=json.dumps(fc.get("args") or {}))


async def judged(chunk: dict[str, Any], judge: Judge) -> dict[str, Any]:
    """One GenerateContentResponse with its denied function calls replaced by text parts."""
    for candidate in chunk.get("candidates") or []:
        parts = (candidate.get("content") or {}).get("parts") if isinstance(candidate, dict) else None
        if not isinstance(parts, list):
            continue
        calls = [p for p in parts if isinstance(p, dict) and isinstance(p.get("functionCall"), dict)]
        if not calls:
            continue
        refusals = dict(zip(map(id, calls), await judge([_call(p["functionCall"]) for p in calls]), strict=True))
        candidate["content"]["parts"] = [{"text": refusals[id(p)]} if refusals.get(id(p)) else p for p in parts]
    return chunk


async def judge_json(body: bytes, judge: Judge) -> bytes:
    data = json.loads(body)
    if not isinstance(data, dict) or "functionCall" not in body.decode("utf-8", "replace"):
        return body
    return json.dumps(await judged(data, judge), ensure_ascii=False).encode()


async def relay(lines: AsyncIterator[str], judge: Judge, sse: bool = True) -> AsyncIterator[bytes]:
    """The upstream's SSE chunks in the client's framing, each chunk with calls held for their verdicts."""
    out = Framing(sse)
    data: list[str] = []

    async def one(payload: str) -> bytes:
        try:
            chunk = json.loads(payload)
        except ValueError:
            raise WireError("bad_gateway", f"the upstream sent a chunk that is not JSON: {payload[:200]!r}") from None
        if isinstance(chunk, dict) and "functionCall" in payload:
            chunk = await judged(chunk, judge)
        return out(chunk)

    try:
        async for line in lines:
            if line.startswith("data:"):
                data.append(line[5:].lstrip())
                continue
            if line or not data:
                continue
            payload, data = "\n".join(data), []
            yield await one(payload)
        if data:  # a last event without its blank line
            yield await one("\n".join(data))
    except WireError as err:
        yield out(err.google()[1])
    tail = out.end()
    if tail:
        yield tail
