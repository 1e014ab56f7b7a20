"""Responses → Responses upstreams (OpenAI's own API): the client's request goes on as it came, so what only
the upstream understands (encrypted reasoning items, hosted tools, `previous_response_id` into its own
store, `include`) keeps working; the boundary is applied to exactly two things, as on the other wires
(passthrough.py).

Requests. The model is rewritten (when a route says so) and the `output` of a quarantined
function_call_output / custom_tool_call_output item is replaced by the placeholder.

Responses. Text flows through undelayed. A function_call or custom_tool_call item is held from its
`response.output_item.added` to its `response.output_item.done`, then judged: an allowed call is released
verbatim, a denied one becomes an assistant message naming the rule. The events are numbered again
(`sequence_number`) and the final response's `output` says what the client was given.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from fak_gateway.passthrough import Judge, Lookup
from fak_gateway.responses_wire import CUSTOM_INPUT, _text
from fakcore.protocol import ToolCall, block_id

OUTPUTS = ("function_call_output", "custom_tool_call_output")
CALLS = ("function_call", "custom_tool_call")


def redact(body: dict[str, Any], lookup: Lookup, model: str) -> tuple[list[str], int]:
    """In place: the model name, and the output of quarantined tool outputs. Returns the blocks replaced and
    the bytes of tool output withheld."""
    body["model"] = model
    replaced, withheld = [], 0
    items = body.get("input")
    for item in items if isinstance(items, list) else []:
        if isinstance(item, dict) and item.get("type") in OUTPUTS:
            output = item.get("output", "")
            text = output if isinstance(output, str) else _text(output, "output", strict=False)
            placeholder = lookup(block_id(text))
            if placeholder is not None:
                item["output"] = placeholder
                replaced.append(block_id(text))
                withheld += len(text.encode())
    return replaced, withheld


def _call(item: dict[str, Any]) -> ToolCall:
    if item.get("type") == "custom_tool_call":
        arguments = json.dumps({CUSTOM_INPUT: item.get("input", "")}, ensure_ascii=False)
    else:
        arguments = item.get("arguments") or "{}"
    return ToolCall(id=item.get("call_id", ""), name=item.get("name", ""), arguments=arguments)


def _refusal_item(item: dict[str, Any], text: str) -> dict[str, Any]:
    return {"type": "message", "id": "msg_" + str(item.get("id", "denied")), "status": "completed", "role": "assistant",
            "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]}


async def _judged(output: list[Any], judge: Judge) -> tuple[list[Any], bool]:
    calls = [i for i in output if isinstance(i, dict) and i.get("type") in CALLS]
    if not calls:
        return output, False
    refusals = dict(zip((id(c) for c in calls), await judge([_call(c) for c in calls]), strict=True))
    if not any(refusals.values()):
        return output, False
    return [_refusal_item(i, refusals[id(i)]) if refusals.get(id(i)) else i for i in output], True  # type: ignore[arg-type]


async def judge_json(body: bytes, judge: Judge) -> bytes:
    data = json.loads(body)
    if not isinstance(data, dict) or not isinstance(data.get("output"), list):
        return body
    data["output"], changed = await _judged(data["output"], judge)
    return json.dumps(data, ensure_ascii=False).encode() if changed else body


def _sse(event: dict[str, Any]) -> bytes:
    return (f"event: {event.get('type', 'message')}\ndata: ".encode()
            + json.dumps(event, ensure_ascii=False, separators=(",", ":")).encode() + b"\n\n")


def _message_events(item: dict[str, Any], index: int) -> list[dict[str, Any]]:
    """The events of one whole assistant message item (a refusal in place of a call)."""
    part = item["content"][0]
    where = {"item_id": item["id"], "output_index": index}
    return [{"type": "response.output_item.added", "output_index": index, "item": {**item, "status": "in_progress", "content": []}},
            {"type": "response.content_part.added", **where, "content_index": 0, "part": {**part, "text": ""}},
            {"type": "response.output_text.delta", **where, "content_index": 0, "delta": part["text"], "logprobs": []},
            {"type": "response.output_text.done", **where, "content_index": 0, "text": part["text"], "logprobs": []},
            {"type": "response.content_part.done", **where, "content_index": 0, "part": part},
            {"type": "response.output_item.done", "output_index": index, "item": item}]


async def relay(lines: AsyncIterator[str], judge: Judge) -> AsyncIterator[bytes]:
    """The upstream's SSE events, calls held until their verdict, numbered again."""
    seq = 0
    held: dict[int, list[dict[str, Any]]] = {}  # output_index -> events of a call item not yet judged
    replaced: dict[int, dict[str, Any]] = {}  # output_index -> the refusal message given instead of its call

    def out(event: dict[str, Any]) -> bytes:
        nonlocal seq
        if "sequence_number" in event or event.get("type", "").startswith("response."):
            event["sequence_number"] = seq
            seq += 1
        return _sse(event)

    data: list[str] = []
    async for line in lines:
        if line.startswith("data:"):
            data.append(line[5:].lstrip())
            continue
        if line or not data:
            continue
        payload, data = "\n".join(data), []
        try:
            event = json.loads(payload)
        except ValueError:
            yield f"data: {payload}\n\n".encode()
            continue
        kind, index = event.get("type", ""), event.get("output_index")
        item = event.get("item") or {}
        if kind == "response.output_item.added" and item.get("type") in CALLS:
            held[index] = [event]
            continue
        if index in held and kind != "response.output_item.done":
            held[index].append(event)
            continue
        if kind == "response.output_item.done" and index in held:
            events = held.pop(index) + [event]
            [refusal] = await judge([_call(item)])
            if refusal is None:
                for e in events:
                    yield out(e)
            else:
                replaced[index] = _refusal_item(item, refusal)
                for e in _message_events(replaced[index], index):
                    yield out(e)
            continue
        if kind in ("response.completed", "response.incomplete", "response.failed") and replaced:  # what the client got
            response = event.get("response") or {}
            output = response.get("output")
            if isinstance(output, list):
                response["output"] = [replaced.get(i, o) for i, o in enumerate(output)]
        yield out(event)
    if data:  # a last event without its blank line
        yield f"data: {chr(10).join(data)}\n\n".encode()
