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
from urllib.parse import quote

import msgspec

from fak_gateway.errors import WireError
from fak_gateway.openai_wire import MaxTokens, TopK, decode
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
    text: str = ""


class Tool(msgspec.Struct):
    name: str
    input_schema: dict[str, Any] | None = None
    description: str | None = None
    type: str | None = None


# Fields of the real API that the in-kernel engine takes without acting on them (the request is served, the
# response header x-fak-ignored names them): they steer features a local model does not have.
IGNORED_FIELDS = ("thinking", "context_management", "output_config", "metadata", "service_tier", "container",
                  "mcp_servers", "betas")
# Content blocks that carry nothing the model should read again: earlier thinking, and server tools' traffic.
DROPPED_BLOCKS = ("thinking", "redacted_thinking", "server_tool_use", "web_search_tool_result", "web_fetch_tool_result",
                  "code_execution_tool_result", "bash_code_execution_tool_result", "text_editor_code_execution_tool_result",
                  "mcp_tool_use", "mcp_tool_result", "container_upload", "search_result")


class CountRequest(msgspec.Struct, kw_only=True):
    model: str
    messages: list[Message]
    system: str | list[TextBlock] | None = None
    tools: list[Tool] | None = None
    tool_choice: dict[str, Any] | None = None
    thinking: dict[str, Any] | None = None
    context_management: dict[str, Any] | None = None
    output_config: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None
    service_tier: str | None = None
    container: Any = None
    mcp_servers: list[Any] | None = None
    betas: list[str] | None = None


class MessagesRequest(CountRequest, kw_only=True):
    max_tokens: MaxTokens
    stop_sequences: list[str] | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: TopK | None = None
    stream: bool = False


def decode_messages(body: bytes) -> MessagesRequest:
    return decode(body, MessagesRequest)


def decode_count(body: bytes) -> CountRequest:
    return decode(body, CountRequest)


def ignored(r: CountRequest) -> list[str]:
    """What the in-kernel engine accepted without acting on: fields, server tools, dropped block types."""
    out = [f for f in IGNORED_FIELDS if getattr(r, f) not in (None, {}, [])
           and not (f == "thinking" and (r.thinking or {}).get("type") == "disabled")]
    # a tool's name is the client's text: quoted, so that it stays one token of an ASCII header
    out += [f"tool:{quote(t.name, safe='')}" for t in r.tools or [] if t.type not in (None, "custom")]
    out += sorted({f"block:{b.type}" for m in r.messages if not isinstance(m.content, str) for b in m.content
                   if b.type in DROPPED_BLOCKS})
    return out


# ---------------------------------------------------------------------------------------------------------
# Translation to the bus
# ---------------------------------------------------------------------------------------------------------


def _result_text(block: Block, where: str, strict: bool = True) -> str:
    if block.content is None or isinstance(block.content, str):
        return block.content or ""
    parts = []
    for p in block.content:
        if p.type != "text" and not strict:
            continue
        if p.type != "text":
            raise WireError("invalid_request", f"{where}: tool_result content type {p.type!r} cannot be served by this "
                                               "model (it reads text only)")
        parts.append(p.text or "")
    return "".join(parts)


def _text(content: str | list[TextBlock] | list[Block], where: str, strict: bool = True) -> str:
    if isinstance(content, str):
        return content
    parts = []
    for j, b in enumerate(content):
        if b.type == "text":
            parts.append(b.text or "")
        elif b.type not in DROPPED_BLOCKS and strict:
            raise WireError("invalid_request", f"{where}.content.{j}: block type {b.type!r} cannot be served by this model")
    return "\n\n".join(parts) if isinstance(content[0] if content else None, TextBlock) else "".join(parts)


def to_chat(r: CountRequest, strict: bool = True) -> tuple[list[ChatMessage], list[ToolSpec]]:
    """Anthropic messages -> the engine's chat messages. System text, whether in `system` or in system-role
    entries among the messages (as Claude Code sends it), becomes the one leading system prompt: chat
    templates of local models take a system prompt only first. Not strict (an Anthropic upstream serves the
    request as sent): blocks a local model could not read are skipped, not refused."""
    system = [_text(r.system, "system", strict)] if r.system else []
    messages: list[ChatMessage] = []
    if not r.messages:
        raise WireError("invalid_request", "messages: at least one message is required")
    for i, m in enumerate(r.messages):
        where = f"messages.{i}"
        if m.role == "system":
            system.append(_text(m.content, where, strict))
            continue
        if m.role not in ("user", "assistant"):
            raise WireError("invalid_request", f"{where}.role: {m.role!r} is not user, assistant or system")
        if isinstance(m.content, str):
            messages.append(ChatMessage(role=m.role, content=m.content))
            continue
        text: list[str] = []
        calls: list[ToolCall] = []
        for j, b in enumerate(m.content):
            if b.type == "text":
                text.append(b.text or "")
            elif b.type in DROPPED_BLOCKS or (not strict and b.type not in ("tool_use", "tool_result")):
                continue
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
                content = _result_text(b, f"{where}.content.{j}", strict)
                messages.append(ChatMessage(role="tool", content=content, tool_call_id=b.tool_use_id, block=block_id(content)))
            else:
                raise WireError("invalid_request", f"{where}.content.{j}: block type {b.type!r} cannot be served in a "
                                                   f"{m.role} message by this model")
        if m.role == "assistant":
            messages.append(ChatMessage(role="assistant", content="".join(text), tool_calls=calls))
        elif text:
            messages.append(ChatMessage(role="user", content="".join(text)))
    if not messages:
        raise WireError("invalid_request", "messages: at least one user or assistant message is required")
    if system:
        messages.insert(0, ChatMessage(role="system", content="\n\n".join(t for t in system if t)))
    names = {c.id: c.name for m in messages for c in m.tool_calls}
    for m in messages:
        if m.role == "tool":
            m.name = names.get(m.tool_call_id, "")
    # server tools (web search, code execution…) run on Anthropic's side: not callable here (see ignored())
    tools = [ToolSpec(name=t.name, description=t.description or "", parameters=t.input_schema or {})
             for t in r.tools or [] if t.type in (None, "custom")]
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
        if not isinstance(name, str) or name not in {t.name for t in tools}:
            raise WireError("invalid_request", f"tool_choice names {name!r}, which is not in tools")
        return "function", name
    raise WireError("invalid_request", f"tool_choice type {kind!r} is not auto, any, tool or none")


def messages_to_bus(r: MessagesRequest, session: str, strict: bool = True) -> GenerateRequest:
    if r.max_tokens < 1:
        raise WireError("invalid_request", "max_tokens: must be at least 1")
    if r.temperature is not None and not 0.0 <= r.temperature <= 1.0:
        raise WireError("invalid_request", "temperature: must be between 0 and 1")
    messages, tools = to_chat(r, strict)
    choice, name = _tool_choice(r.tool_choice, tools) if strict else ("auto", "")
    sampling = Sampling(max_tokens=r.max_tokens, temperature=r.temperature, top_p=r.top_p, top_k=r.top_k,
                        stop=list(r.stop_sequences or []))
    return GenerateRequest(request_id=f"msg_{uuid.uuid4().hex[:24]}", model=r.model, messages=messages, tools=tools,
                           tool_choice=choice, tool_choice_name=name, sampling=sampling, session=session)


def count_to_bus(r: CountRequest) -> CountTokensRequest:
    messages, tools = to_chat(r)
    _tool_choice(r.tool_choice, tools)  # not counted, but refused as /v1/messages would refuse it
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
