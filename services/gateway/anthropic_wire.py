"""The Anthropic wire: /v1/messages (+SSE) and /v1/messages/count_tokens.

Content blocks are translated into the engine's chat messages: `tool_use` blocks become an assistant
message's tool calls, each `tool_result` block becomes a tool message (with its content hash as block id).
`max_tokens` is required, as on Anthropic's API. The stream follows Anthropic's event order: message_start,
content_block_start / content_block_delta… / content_block_stop per block, message_delta, message_stop.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import msgspec

from fak_gateway.errors import WireError
from fak_gateway.openai_wire import decode
from fakcore.protocol import (
    Accepted,
    ChatMessage,
    CountTokensRequest,
    GenerateDone,
    GenerateRequest,
    Sampling,
    TokenChunk,
    ToolCall,
    ToolSpec,
    block_id,
)


class ResultPart(msgspec.Struct):
    type: str
    text: str | None = None


class Block(msgspec.Struct):
    type: str
    text: str | None = None
    id: str | None = None  # tool_use
    name: str | None = None  # tool_use
    input: Any = None  # tool_use
    tool_use_id: str | None = None  # tool_result
    content: str | list[ResultPart] | None = None  # tool_result
    is_error: bool | None = None  # tool_result


class Message(msgspec.Struct):
    role: str
    content: str | list[Block]


class TextBlock(msgspec.Struct):
    type: str
    text: str


class Tool(msgspec.Struct):
    name: str
    input_schema: dict[str, Any] | None = None
    description: str | None = None
    type: str | None = None


class CountRequest(msgspec.Struct, kw_only=True):
    model: str
    messages: list[Message]
    system: str | list[TextBlock] | None = None
    tools: list[Tool] | None = None
    tool_choice: dict[str, Any] | None = None


class MessagesRequest(CountRequest, kw_only=True):
    max_tokens: int
    stop_sequences: list[str] | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    stream: bool = False
    metadata: dict[str, Any] | None = None
    thinking: dict[str, Any] | None = None


def decode_messages(body: bytes) -> MessagesRequest:
    return decode(body, MessagesRequest)


def decode_count(body: bytes) -> CountRequest:
    return decode(body, CountRequest)


# ---------------------------------------------------------------------------------------------------------
# Translation to the bus
# ---------------------------------------------------------------------------------------------------------


def _result_text(block: Block, where: str) -> str:
    if block.content is None or isinstance(block.content, str):
        return block.content or ""
    parts = []
    for p in block.content:
        if p.type != "text":
            raise WireError("invalid_request", f"{where}: tool_result content type {p.type!r} is not supported (text only)")
        parts.append(p.text or "")
    return "".join(parts)


def to_chat(r: CountRequest) -> tuple[list[ChatMessage], list[ToolSpec]]:
    messages: list[ChatMessage] = []
    if r.system:
        system = r.system if isinstance(r.system, str) else "".join(b.text for b in r.system)
        messages.append(ChatMessage(role="system", content=system))
    if not r.messages:
        raise WireError("invalid_request", "messages: at least one message is required")
    for i, m in enumerate(r.messages):
        where = f"messages.{i}"
        if m.role not in ("user", "assistant"):
            raise WireError("invalid_request", f"{where}.role: {m.role!r} is not user or assistant")
        if isinstance(m.content, str):
            messages.append(ChatMessage(role=m.role, content=m.content))
            continue
        text: list[str] = []
        calls: list[ToolCall] = []
        for j, b in enumerate(m.content):
            if b.type == "text":
                text.append(b.text or "")
            elif b.type == "tool_use" and m.role == "assistant":
                if not b.id or not b.name:
                    raise WireError("invalid_request", f"{where}.content.{j}: tool_use needs id and name")
                calls.append(ToolCall(id=b.id, name=b.name, arguments=json.dumps(b.input if b.input is not None else {})))
            elif b.type == "tool_result" and m.role == "user":
                if not b.tool_use_id:
                    raise WireError("invalid_request", f"{where}.content.{j}: tool_result needs tool_use_id")
                if text:  # keep order: text that came before the result
                    messages.append(ChatMessage(role="user", content="".join(text)))
                    text = []
                content = _result_text(b, f"{where}.content.{j}")
                messages.append(ChatMessage(role="tool", content=content, tool_call_id=b.tool_use_id, block=block_id(content)))
            else:
                raise WireError("invalid_request", f"{where}.content.{j}: block type {b.type!r} is not supported in a {m.role} message")
        if m.role == "assistant":
            messages.append(ChatMessage(role="assistant", content="".join(text), tool_calls=calls))
        elif text:
            messages.append(ChatMessage(role="user", content="".join(text)))
    names = {c.id: c.name for m in messages for c in m.tool_calls}
    for m in messages:
        if m.role == "tool":
            m.name = names.get(m.tool_call_id, "")
    tools = []
    for t in r.tools or []:
        if t.type not in (None, "custom"):
            raise WireError("invalid_request", f"tool {t.name!r}: server tool type {t.type!r} is not supported")
        tools.append(ToolSpec(name=t.name, description=t.description or "", parameters=t.input_schema or {}))
    return messages, tools


def _tool_choice(choice: dict[str, Any] | None, tools: list[ToolSpec]) -> tuple[str, str]:
    if not choice:
        return ("auto" if tools else "none"), ""
    kind = choice.get("type")
    if kind == "auto" or kind == "none":
        return kind, ""
    if kind == "any":
        if not tools:
            raise WireError("invalid_request", "tool_choice 'any' needs tools")
        return "required", ""
    if kind == "tool":
        name = choice.get("name")
        if name not in {t.name for t in tools}:
            raise WireError("invalid_request", f"tool_choice names {name!r}, which is not in tools")
        return "function", name
    raise WireError("invalid_request", f"tool_choice type {kind!r} is not auto, any, tool or none")


def messages_to_bus(r: MessagesRequest, session: str) -> GenerateRequest:
    if r.max_tokens < 1:
        raise WireError("invalid_request", "max_tokens: must be at least 1")
    if r.thinking and r.thinking.get("type") not in (None, "disabled"):
        raise WireError("invalid_request", "thinking is not supported by this model")
    temperature = 1.0 if r.temperature is None else r.temperature
    if not 0.0 <= temperature <= 1.0:
        raise WireError("invalid_request", "temperature: must be between 0 and 1")
    messages, tools = to_chat(r)
    choice, name = _tool_choice(r.tool_choice, tools)
    sampling = Sampling(max_tokens=r.max_tokens, temperature=temperature, top_p=1.0 if r.top_p is None else r.top_p,
                        top_k=r.top_k or 0, stop=list(r.stop_sequences or []))
    return GenerateRequest(request_id=f"msg_{uuid.uuid4().hex[:24]}", model=r.model, messages=messages, tools=tools,
                           tool_choice=choice, tool_choice_name=name, sampling=sampling, session=session)


def count_to_bus(r: CountRequest) -> CountTokensRequest:
    messages, tools = to_chat(r)
    return CountTokensRequest(model=r.model, messages=messages, tools=tools)


# ---------------------------------------------------------------------------------------------------------
# Responses
# ---------------------------------------------------------------------------------------------------------

STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}


def stop_reason(done: GenerateDone) -> str:
    if done.finish_reason == "stop" and done.stop_sequence:
        return "stop_sequence"
    return STOP_REASONS.get(done.finish_reason, "end_turn")


def usage_of(done: GenerateDone) -> dict[str, int]:
    u = done.usage
    return {"input_tokens": u.prompt_tokens - u.cached_tokens, "output_tokens": u.completion_tokens,
            "cache_read_input_tokens": u.cached_tokens, "cache_creation_input_tokens": 0}


def _tool_use(c: ToolCall) -> dict[str, Any]:
    try:
        args = json.loads(c.arguments or "{}")
    except ValueError:
        args = {}
    # Anthropic's ids read toolu_…; the engine's neutral call_… ids are renamed, keeping their suffix.
    tool_id = "toolu_" + c.id[len("call_"):] if c.id.startswith("call_") else c.id
    return {"type": "tool_use", "id": tool_id, "name": c.name, "input": args}


async def message_response(req: GenerateRequest, replies: AsyncIterator[Any]) -> dict[str, Any]:
    parts: list[str] = []
    done: GenerateDone | None = None
    async for r in replies:
        if isinstance(r, TokenChunk):
            parts.append(r.text)
        elif isinstance(r, GenerateDone):
            done = r
    if done is None:
        raise WireError("internal", "engine stream ended without a final message")
    text = "".join(parts)
    content: list[dict[str, Any]] = [{"type": "text", "text": text}] if text or not done.tool_calls else []
    content += [_tool_use(c) for c in done.tool_calls]
    return {"id": req.request_id, "type": "message", "role": "assistant", "model": req.model, "content": content,
            "stop_reason": stop_reason(done), "stop_sequence": done.stop_sequence or None, "usage": usage_of(done)}


def event(name: str, data: dict[str, Any]) -> bytes:
    return f"event: {name}\ndata: ".encode() + json.dumps({"type": name, **data}, ensure_ascii=False,
                                                          separators=(",", ":")).encode() + b"\n\n"


async def message_stream(req: GenerateRequest, first: Accepted, replies: AsyncIterator[Any],
                         prompt_tokens: int = 0) -> AsyncIterator[bytes]:
    yield event("message_start", {"message": {
        "id": req.request_id, "type": "message", "role": "assistant", "model": req.model, "content": [],
        "stop_reason": None, "stop_sequence": None,
        "usage": {"input_tokens": prompt_tokens, "output_tokens": 0, "cache_read_input_tokens": 0,
                  "cache_creation_input_tokens": 0}}})
    index = 0
    text_open = False
    async for r in replies:
        if isinstance(r, TokenChunk) and r.text:
            if not text_open:
                yield event("content_block_start", {"index": index, "content_block": {"type": "text", "text": ""}})
                yield event("ping", {})
                text_open = True
            yield event("content_block_delta", {"index": index, "delta": {"type": "text_delta", "text": r.text}})
        elif isinstance(r, GenerateDone):
            if text_open or not r.tool_calls:
                if not text_open:
                    yield event("content_block_start", {"index": index, "content_block": {"type": "text", "text": ""}})
                yield event("content_block_stop", {"index": index})
                index += 1
            for c in r.tool_calls:
                block = _tool_use(c)
                yield event("content_block_start", {"index": index, "content_block": {**block, "input": {}}})
                yield event("content_block_delta", {"index": index, "delta": {"type": "input_json_delta",
                                                                              "partial_json": json.dumps(block["input"])}})
                yield event("content_block_stop", {"index": index})
                index += 1
            usage = usage_of(r)
            yield event("message_delta", {"delta": {"stop_reason": stop_reason(r), "stop_sequence": r.stop_sequence or None},
                                          "usage": usage})
            yield event("message_stop", {})


def stream_error(err: WireError) -> bytes:
    status, body = err.anthropic()
    return f"event: error\ndata: {json.dumps(body)}\n\n".encode()
