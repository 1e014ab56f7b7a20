"""The OpenAI wire: /v1/chat/completions and /v1/completions, request schemas in, response shapes out.

Requests are decoded straight into typed Structs (unknown fields tolerated, as OpenAI's clients send new
ones; known fields type-checked) and translated into one GenerateRequest. Features fak cannot honour are an
explicit 400, never silently ignored.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import msgspec

from fak_gateway.errors import WireError
from fakcore.protocol import (
    Accepted,
    ChatMessage,
    GenerateDone,
    GenerateRequest,
    Sampling,
    TokenChunk,
    ToolCall,
    ToolSpec,
    block_id,
)

DEFAULT_MAX_TOKENS = 1024


# ---------------------------------------------------------------------------------------------------------
# Request schemas
# ---------------------------------------------------------------------------------------------------------


class ContentPart(msgspec.Struct):
    type: str
    text: str | None = None


class FunctionCall(msgspec.Struct):
    name: str
    arguments: str = "{}"


class MessageToolCall(msgspec.Struct):
    function: FunctionCall
    id: str = ""
    type: str = "function"


class Message(msgspec.Struct):
    role: str
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[MessageToolCall] | None = None
    tool_call_id: str | None = None


class FunctionDef(msgspec.Struct):
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class Tool(msgspec.Struct):
    function: FunctionDef
    type: str = "function"


class SamplingFields(msgspec.Struct, kw_only=True):
    model: str = ""
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    n: int | None = None
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    stop: str | list[str] | None = None
    seed: int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    logprobs: bool | int | None = None
    user: str | None = None


class ChatRequest(SamplingFields, kw_only=True):
    messages: list[Message]
    max_completion_tokens: int | None = None
    tools: list[Tool] | None = None
    tool_choice: str | dict[str, Any] | None = None
    response_format: dict[str, Any] | None = None


class CompletionRequest(SamplingFields, kw_only=True):
    prompt: str | list[str]
    echo: bool = False


def decode(body: bytes, kind: type) -> Any:
    if not body:
        raise WireError("invalid_request", "request body is empty; expected a JSON object")
    try:
        return msgspec.json.decode(body, type=kind)
    except msgspec.ValidationError as exc:
        raise WireError("invalid_request", f"invalid request: {exc}", param=_path_of(str(exc))) from None
    except msgspec.DecodeError as exc:
        raise WireError("invalid_request", f"malformed JSON body: {exc}") from None


def _path_of(message: str) -> str | None:
    marker = "at `$."
    if marker in message:
        return message.split(marker, 1)[1].split("`", 1)[0]
    return None


# ---------------------------------------------------------------------------------------------------------
# Translation to the bus
# ---------------------------------------------------------------------------------------------------------


def _text_of(content: str | list[ContentPart] | None, where: str, strict: bool = True) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    parts = []
    for p in content:
        if p.type != "text" and not strict:
            continue
        if p.type != "text":
            raise WireError("invalid_request", f"{where}: content part type {p.type!r} is not supported (text only)",
                            param="messages")
        parts.append(p.text or "")
    return "".join(parts)


def _sampling(r: SamplingFields, max_tokens: int | None) -> Sampling:
    if r.n not in (None, 1):
        raise WireError("invalid_request", "n > 1 is not supported", param="n")
    if r.logprobs:
        raise WireError("invalid_request", "logprobs are not supported", param="logprobs")
    for name in ("presence_penalty", "frequency_penalty"):
        if getattr(r, name):
            raise WireError("invalid_request", f"{name} is not supported (must be 0 or absent)", param=name)
    if max_tokens is not None and max_tokens < 1:
        raise WireError("invalid_request", "max_tokens must be at least 1", param="max_tokens")
    temperature = 1.0 if r.temperature is None else r.temperature
    if not 0.0 <= temperature <= 2.0:
        raise WireError("invalid_request", "temperature must be between 0 and 2", param="temperature")
    top_p = 1.0 if r.top_p is None else r.top_p
    if not 0.0 < top_p <= 1.0:
        raise WireError("invalid_request", "top_p must be in (0, 1]", param="top_p")
    stop = [r.stop] if isinstance(r.stop, str) else list(r.stop or [])
    if len(stop) > 4:
        raise WireError("invalid_request", "at most 4 stop sequences", param="stop")
    return Sampling(max_tokens=max_tokens or DEFAULT_MAX_TOKENS, temperature=temperature, top_p=top_p,
                    top_k=r.top_k or 0, seed=r.seed, stop=stop)


def chat_to_bus(r: ChatRequest, session: str, strict: bool = True) -> GenerateRequest:
    """strict: the request must be servable in-kernel (400 otherwise). Not strict (a same-wire upstream
    serves it as sent): only the conversation's text is read, for the guard; nothing is refused here."""
    if not r.messages:
        raise WireError("invalid_request", "messages must not be empty", param="messages")
    messages = []
    for i, m in enumerate(r.messages):
        role = "system" if m.role == "developer" else m.role
        if role not in ("system", "user", "assistant", "tool"):
            raise WireError("invalid_request", f"messages[{i}].role {m.role!r} is not one of system, developer, user, assistant, tool",
                            param=f"messages[{i}].role")
        text = _text_of(m.content, f"messages[{i}]", strict)
        calls = [ToolCall(id=c.id or f"call_{uuid.uuid4().hex[:24]}", name=c.function.name, arguments=c.function.arguments)
                 for c in (m.tool_calls or [])]
        if role == "tool" and not m.tool_call_id:
            raise WireError("invalid_request", f"messages[{i}]: a tool message needs tool_call_id", param=f"messages[{i}].tool_call_id")
        messages.append(ChatMessage(role=role, content=text, tool_calls=calls, tool_call_id=m.tool_call_id or "",
                                    name=m.name or "", block=block_id(text) if role == "tool" else ""))
    _name_tool_results(messages)
    tools = [ToolSpec(name=t.function.name, description=t.function.description or "", parameters=t.function.parameters or {})
             for t in (r.tools or [])]
    request_id = f"chatcmpl-{uuid.uuid4().hex}"
    if not strict:
        return GenerateRequest(request_id=request_id, model=r.model, messages=messages, tools=tools, session=session,
                               sampling=Sampling(max_tokens=r.max_completion_tokens or r.max_tokens or DEFAULT_MAX_TOKENS))
    choice, choice_name = _tool_choice(r.tool_choice, tools)
    return GenerateRequest(request_id=request_id, model=r.model, messages=messages, tools=tools,
                           tool_choice=choice, tool_choice_name=choice_name, response_schema=_response_schema(r.response_format),
                           sampling=_sampling(r, r.max_completion_tokens or r.max_tokens), session=session)


def _name_tool_results(messages: list[ChatMessage]) -> None:
    """Give each tool result the name of the call it answers (templates and policies want it)."""
    names = {c.id: c.name for m in messages for c in m.tool_calls}
    for m in messages:
        if m.role == "tool" and not m.name:
            m.name = names.get(m.tool_call_id, "")


def _tool_choice(choice: str | dict[str, Any] | None, tools: list[ToolSpec]) -> tuple[str, str]:
    if choice is None:
        return ("auto" if tools else "none"), ""
    if isinstance(choice, str):
        if choice not in ("none", "auto", "required"):
            raise WireError("invalid_request", f"tool_choice {choice!r} is not none, auto or required", param="tool_choice")
        if choice == "required" and not tools:
            raise WireError("invalid_request", "tool_choice 'required' needs tools", param="tool_choice")
        return choice, ""
    name = (choice.get("function") or {}).get("name") if isinstance(choice.get("function"), dict) else None
    if choice.get("type") != "function" or not name:
        raise WireError("invalid_request", "tool_choice must be {'type': 'function', 'function': {'name': …}}", param="tool_choice")
    if name not in {t.name for t in tools}:
        raise WireError("invalid_request", f"tool_choice names {name!r}, which is not in tools", param="tool_choice")
    return "function", name


def _response_schema(fmt: dict[str, Any] | None) -> dict[str, Any] | None:
    if not fmt or fmt.get("type") in (None, "text"):
        return None
    if fmt["type"] == "json_object":
        return {"type": "object"}
    if fmt["type"] == "json_schema":
        spec = fmt.get("json_schema") or {}
        schema = spec.get("schema")
        if not isinstance(schema, dict):
            raise WireError("invalid_request", "response_format.json_schema.schema must be an object", param="response_format")
        return schema
    raise WireError("invalid_request", f"response_format type {fmt['type']!r} is not supported", param="response_format")


def completion_to_bus(r: CompletionRequest, session: str) -> GenerateRequest:
    if r.echo:
        raise WireError("invalid_request", "echo is not supported", param="echo")
    if isinstance(r.prompt, list):
        if len(r.prompt) != 1:
            raise WireError("invalid_request", "exactly one prompt per request is supported", param="prompt")
        prompt = r.prompt[0]
    else:
        prompt = r.prompt
    return GenerateRequest(request_id=f"cmpl-{uuid.uuid4().hex}", model=r.model, prompt=prompt,
                           sampling=_sampling(r, r.max_tokens or 16), session=session)


# ---------------------------------------------------------------------------------------------------------
# Responses
# ---------------------------------------------------------------------------------------------------------


def usage_of(done: GenerateDone) -> dict[str, Any]:
    u = done.usage
    return {"prompt_tokens": u.prompt_tokens, "completion_tokens": u.completion_tokens,
            "total_tokens": u.prompt_tokens + u.completion_tokens,
            "prompt_tokens_details": {"cached_tokens": u.cached_tokens}}


def _calls_json(calls: list[ToolCall]) -> list[dict[str, Any]]:
    return [{"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}} for c in calls]


async def collect(replies: AsyncIterator[Any]) -> tuple[str, GenerateDone]:
    parts: list[str] = []
    async for r in replies:
        if isinstance(r, TokenChunk):
            parts.append(r.text)
        elif isinstance(r, GenerateDone):
            return "".join(parts), r
    raise WireError("internal", "engine stream ended without a final message")


async def chat_response(req: GenerateRequest, replies: AsyncIterator[Any]) -> dict[str, Any]:
    text, done = await collect(replies)
    message: dict[str, Any] = {"role": "assistant", "content": text if (text or not done.tool_calls) else None}
    if done.tool_calls:
        message["tool_calls"] = _calls_json(done.tool_calls)
    return {"id": req.request_id, "object": "chat.completion", "created": int(time.time()), "model": req.model,
            "system_fingerprint": f"fak-{done.receipt.weights_digest[:12]}",
            "choices": [{"index": 0, "message": message, "finish_reason": done.finish_reason, "logprobs": None}],
            "usage": usage_of(done)}


async def completion_response(req: GenerateRequest, replies: AsyncIterator[Any]) -> dict[str, Any]:
    text, done = await collect(replies)
    return {"id": req.request_id, "object": "text_completion", "created": int(time.time()), "model": req.model,
            "system_fingerprint": f"fak-{done.receipt.weights_digest[:12]}",
            "choices": [{"index": 0, "text": text, "finish_reason": done.finish_reason, "logprobs": None}],
            "usage": usage_of(done)}


def sse(obj: Any) -> bytes:
    return b"data: " + json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode() + b"\n\n"


async def chat_stream(req: GenerateRequest, first: Accepted, replies: AsyncIterator[Any], include_usage: bool) -> AsyncIterator[bytes]:
    created = int(time.time())
    fingerprint = f"fak-{first.receipt.weights_digest[:12]}"

    def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
        return sse({"id": req.request_id, "object": "chat.completion.chunk", "created": created, "model": req.model,
                    "system_fingerprint": fingerprint,
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}], **extra})

    yield chunk({"role": "assistant", "content": ""})
    async for r in replies:
        if isinstance(r, TokenChunk) and r.text:
            yield chunk({"content": r.text})
        elif isinstance(r, GenerateDone):
            for i, c in enumerate(r.tool_calls):
                yield chunk({"tool_calls": [{"index": i, **_calls_json([c])[0]}]})
            yield chunk({}, r.finish_reason)
            if include_usage:
                yield sse({"id": req.request_id, "object": "chat.completion.chunk", "created": created, "model": req.model,
                           "system_fingerprint": fingerprint, "choices": [], "usage": usage_of(r)})
    yield b"data: [DONE]\n\n"


async def completion_stream(req: GenerateRequest, first: Accepted, replies: AsyncIterator[Any], include_usage: bool) -> AsyncIterator[bytes]:
    created = int(time.time())

    def chunk(text: str, finish: str | None = None) -> bytes:
        return sse({"id": req.request_id, "object": "text_completion", "created": created, "model": req.model,
                    "choices": [{"index": 0, "text": text, "finish_reason": finish, "logprobs": None}]})

    async for r in replies:
        if isinstance(r, TokenChunk) and r.text:
            yield chunk(r.text)
        elif isinstance(r, GenerateDone):
            yield chunk("", r.finish_reason)
            if include_usage:
                yield sse({"id": req.request_id, "object": "text_completion", "created": created, "model": req.model,
                           "choices": [], "usage": usage_of(r)})
    yield b"data: [DONE]\n\n"


def stream_error(err: WireError) -> bytes:
    return sse(err.openai()[1])
