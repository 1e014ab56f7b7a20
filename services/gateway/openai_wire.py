"""The OpenAI wire: /v1/chat/completions and /v1/completions, request schemas in, response shapes out.

Requests are decoded straight into typed Structs (unknown fields tolerated, as OpenAI's clients send new
ones; known fields type-checked) and translated into one GenerateRequest. Features fak cannot honour are an
explicit 400, never silently ignored.
"""

from __future__ import annotations

import codecs
import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Annotated, Any

import msgspec

from fak_gateway.errors import WireError
from fakcore.protocol import (
    Accepted,
    ChatMessage,
    GenerateDone,
    GenerateRequest,
    Sampling,
    TokenChunk,
    TokenLogprob,
    ToolCall,
    ToolSpec,
    block_id,
)

DEFAULT_MAX_TOKENS = 1024
MAX_TOP_LOGPROBS = 20  # chat `top_logprobs`, as OpenAI
MAX_LEGACY_LOGPROBS = 5  # /v1/completions `logprobs`, as OpenAI
MAX_DEPTH = 64  # JSON nesting a request may have: ample for tool schemas, far below any recursion limit behind

# Integers go on to the engines in msgpack (64 bits); a count beyond 2**31 asks for more than any context
# holds. The bounds live in the types, so the decoder refuses them (400) and the published schema says so.
MaxTokens = Annotated[int, msgspec.Meta(ge=1, le=2**31 - 1)]
Count = Annotated[int, msgspec.Meta(ge=0, le=2**31 - 1)]
TopK = Annotated[int, msgspec.Meta(ge=-(2**31), le=2**31 - 1)]  # vLLM's -1 (off) goes through to such upstreams
# A seed may be any 64-bit value, signed or not (msgpack carries both); msgspec bounds stop at int64, so the
# top is the body walk's (no integer beyond 64 bits).
Seed = Annotated[int, msgspec.Meta(ge=-(2**63))]


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
    max_tokens: MaxTokens | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: TopK | None = None
    n: Count | None = None
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    stop: str | list[str] | None = None
    seed: Seed | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    logprobs: bool | Count | None = None
    user: str | None = None


class ChatRequest(SamplingFields, kw_only=True):
    messages: list[Message]
    cache_salt: str | None = None  # vLLM's: a scope for prefix-cache reuse beyond the API key
    max_completion_tokens: MaxTokens | None = None
    tools: list[Tool] | None = None
    tool_choice: str | dict[str, Any] | None = None
    response_format: dict[str, Any] | None = None
    top_logprobs: Count | None = None


class CompletionRequest(SamplingFields, kw_only=True):
    prompt: str | list[str]
    echo: bool = False


def decode(body: bytes, kind: type) -> Any:
    if not body:
        raise WireError("invalid_request", "request body is empty; expected a JSON object")
    try:
        request = msgspec.json.decode(body, type=kind)
    except msgspec.ValidationError as exc:
        raise WireError("invalid_request", f"invalid request: {exc}", param=_path_of(str(exc))) from None
    except msgspec.DecodeError as exc:
        raise WireError("invalid_request", f"malformed JSON body: {exc}") from None
    except RecursionError:  # msgspec stops at the interpreter's recursion limit, also in fields it skips
        raise WireError("invalid_request", f"the JSON body is nested deeper than {MAX_DEPTH} levels") from None
    _check_values(request)
    return request


def _check_values(request: msgspec.Struct) -> None:
    """Free-form values (tool schemas, tool inputs, response formats…) travel on to the engines in msgpack,
    which holds 64-bit integers, and are walked again by encoders, templates and validators that recurse: a
    request nested deeper than MAX_DEPTH, or with an integer msgpack cannot carry, is a 400 here, never an
    OverflowError or a RecursionError there."""
    stack: list[tuple[Any, int]] = [(request, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise WireError("invalid_request", f"the JSON body is nested deeper than {MAX_DEPTH} levels")
        if isinstance(value, msgspec.Struct):
            children: Any = (getattr(value, f) for f in value.__struct_fields__)
        else:
            children = value.values() if isinstance(value, dict) else value
        for child in children:
            if isinstance(child, (dict, list, msgspec.Struct)):
                stack.append((child, depth + 1))
            elif isinstance(child, int) and not -(2**63) <= child < 2**64:
                raise WireError("invalid_request", "an integer in the body is beyond 64 bits")


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


def _sampling(r: SamplingFields, max_tokens: int | None, logprobs: tuple[bool, int] = (False, 0)) -> Sampling:
    """logprobs: (report them, alternatives per token), read by the wire's own rules (_chat_logprobs,
    _legacy_logprobs)."""
    if r.n not in (None, 1):
        raise WireError("invalid_request", "n > 1 is not supported", param="n")
    for name in ("presence_penalty", "frequency_penalty"):
        if getattr(r, name):
            raise WireError("invalid_request", f"{name} is not supported (must be 0 or absent)", param=name)
    if max_tokens is not None and max_tokens < 1:
        raise WireError("invalid_request", "max_tokens must be at least 1", param="max_tokens")
    temperature, top_p = sampling_range(r.temperature, r.top_p)
    stop = [r.stop] if isinstance(r.stop, str) else list(r.stop or [])
    if len(stop) > 4:
        raise WireError("invalid_request", "at most 4 stop sequences", param="stop")
    return Sampling(max_tokens=max_tokens or DEFAULT_MAX_TOKENS, temperature=temperature, top_p=top_p,
                    top_k=r.top_k, seed=r.seed, stop=stop, logprobs=logprobs[0], top_logprobs=logprobs[1])


def _chat_logprobs(r: ChatRequest) -> tuple[bool, int]:
    """Chat: `logprobs` true, and `top_logprobs` 0..20 alternatives (only with it, as OpenAI)."""
    if r.logprobs is not None and not isinstance(r.logprobs, bool):
        raise WireError("invalid_request", "logprobs must be true or false on chat completions (top_logprobs asks for "
                        "alternatives)", param="logprobs")
    top = r.top_logprobs or 0
    if not 0 <= top <= MAX_TOP_LOGPROBS:
        raise WireError("invalid_request", f"top_logprobs must be from 0 to {MAX_TOP_LOGPROBS}", param="top_logprobs")
    if top and not r.logprobs:
        raise WireError("invalid_request", "top_logprobs needs logprobs set to true", param="top_logprobs")
    return bool(r.logprobs), top


def _legacy_logprobs(r: CompletionRequest) -> tuple[bool, int]:
    """/v1/completions: `logprobs` is the number of alternatives, 0..5 (0: the chosen token's only)."""
    if r.logprobs is None:
        return False, 0
    if isinstance(r.logprobs, bool) or not 0 <= r.logprobs <= MAX_LEGACY_LOGPROBS:
        raise WireError("invalid_request", f"logprobs must be an integer from 0 to {MAX_LEGACY_LOGPROBS} on completions",
                        param="logprobs")
    return True, r.logprobs


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
    name_tool_results(messages)
    tools = [ToolSpec(name=t.function.name, description=t.function.description or "", parameters=t.function.parameters or {})
             for t in (r.tools or [])]
    request_id = f"chatcmpl-{uuid.uuid4().hex}"
    if not strict:
        return GenerateRequest(request_id=request_id, model=r.model, messages=messages, tools=tools, session=session,
                               sampling=Sampling(max_tokens=r.max_completion_tokens or r.max_tokens or DEFAULT_MAX_TOKENS))
    choice, choice_name = _tool_choice(r.tool_choice, tools)
    return GenerateRequest(request_id=request_id, model=r.model, messages=messages, tools=tools,
                           tool_choice=choice, tool_choice_name=choice_name, response_schema=_response_schema(r.response_format),
                           sampling=_sampling(r, r.max_completion_tokens or r.max_tokens, _chat_logprobs(r)), session=session)


def name_tool_results(messages: list[ChatMessage]) -> None:
    """Give each tool result the name of the call it answers (templates and policies want it)."""
    names = {c.id: c.name for m in messages for c in m.tool_calls}
    for m in messages:
        if m.role == "tool" and not m.name:
            m.name = names.get(m.tool_call_id, "")


def tool_choice_mode(choice: str | None, tools: list[ToolSpec]) -> tuple[str, str]:
    """tool_choice given as a mode (or not given), as both OpenAI wires read it."""
    if choice is None:
        return ("auto" if tools else "none"), ""
    if choice not in ("none", "auto", "required"):
        raise WireError("invalid_request", f"tool_choice {choice!r} is not none, auto or required", param="tool_choice")
    if choice == "required" and not tools:
        raise WireError("invalid_request", "tool_choice 'required' needs tools", param="tool_choice")
    return choice, ""


def sampling_range(temperature: float | None, top_p: float | None) -> tuple[float | None, float | None]:
    """temperature and top_p checked against OpenAI's ranges; absent stays absent (the model's defaults)."""
    if temperature is not None and not 0.0 <= temperature <= 2.0:
        raise WireError("invalid_request", "temperature must be between 0 and 2", param="temperature")
    if top_p is not None and not 0.0 < top_p <= 1.0:
        raise WireError("invalid_request", "top_p must be in (0, 1]", param="top_p")
    return temperature, top_p


def _tool_choice(choice: str | dict[str, Any] | None, tools: list[ToolSpec]) -> tuple[str, str]:
    if choice is None or isinstance(choice, str):
        return tool_choice_mode(choice, tools)
    name = (choice.get("function") or {}).get("name") if isinstance(choice.get("function"), dict) else None
    if choice.get("type") != "function" or not name or not isinstance(name, str):
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
        schema = spec.get("schema") if isinstance(spec, dict) else None
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
                           sampling=_sampling(r, r.max_tokens or 16, _legacy_logprobs(r)), session=session)


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


def chat_logprobs(entries: list[TokenLogprob]) -> dict[str, Any]:
    """A choice's `logprobs` on chat completions."""
    def one(t: TokenLogprob) -> dict[str, Any]:
        return {"token": t.text, "logprob": t.logprob, "bytes": list(t.raw)}

    return {"content": [{**one(t), "top_logprobs": [one(a) for a in t.top]} for t in entries], "refusal": None}


class LegacyLogprobs:
    """A choice's `logprobs` on /v1/completions, for one chunk after another of one completion. A token's
    `text_offset` is the character of the completion its bytes begin in (a token that continues a character
    shares its offset); its `top_logprobs` holds the alternatives and, as OpenAI's, the chosen token."""

    def __init__(self) -> None:
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._offset = 0

    def __call__(self, entries: list[TokenLogprob]) -> dict[str, Any]:
        out: dict[str, list[Any]] = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
        for t in entries:
            top: dict[str, float] = {}
            for a in [*t.top, t]:
                top.setdefault(a.text, a.logprob)
            out["tokens"].append(t.text)
            out["token_logprobs"].append(t.logprob)
            out["top_logprobs"].append(top)
            out["text_offset"].append(self._offset)
            self._offset += len(self._utf8.decode(t.raw))
        return out


async def collect(replies: AsyncIterator[Any]) -> tuple[str, GenerateDone, list[TokenLogprob]]:
    parts: list[str] = []
    logprobs: list[TokenLogprob] = []
    async for r in replies:
        if isinstance(r, TokenChunk):
            parts.append(r.text)
            logprobs.extend(r.logprobs)
        elif isinstance(r, GenerateDone):
            return "".join(parts), r, logprobs
    raise WireError("internal", "engine stream ended without a final message")


async def chat_response(req: GenerateRequest, replies: AsyncIterator[Any]) -> dict[str, Any]:
    text, done, logprobs = await collect(replies)
    message: dict[str, Any] = {"role": "assistant", "content": text if (text or not done.tool_calls) else None}
    if done.tool_calls:
        message["tool_calls"] = _calls_json(done.tool_calls)
    return {"id": req.request_id, "object": "chat.completion", "created": int(time.time()), "model": req.model,
            "system_fingerprint": f"fak-{done.receipt.weights_digest[:12]}",
            "choices": [{"index": 0, "message": message, "finish_reason": done.finish_reason,
                         "logprobs": chat_logprobs(logprobs) if req.sampling.logprobs else None}],
            "usage": usage_of(done)}


async def completion_response(req: GenerateRequest, replies: AsyncIterator[Any]) -> dict[str, Any]:
    text, done, logprobs = await collect(replies)
    return {"id": req.request_id, "object": "text_completion", "created": int(time.time()), "model": req.model,
            "system_fingerprint": f"fak-{done.receipt.weights_digest[:12]}",
            "choices": [{"index": 0, "text": text, "finish_reason": done.finish_reason,
                         "logprobs": LegacyLogprobs()(logprobs) if req.sampling.logprobs else None}],
            "usage": usage_of(done)}


def sse(obj: Any) -> bytes:
    return b"data: " + json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode() + b"\n\n"


async def chat_stream(req: GenerateRequest, first: Accepted, replies: AsyncIterator[Any], include_usage: bool) -> AsyncIterator[bytes]:
    created = int(time.time())
    fingerprint = f"fak-{first.receipt.weights_digest[:12]}"

    def chunk(delta: dict[str, Any], finish: str | None = None, logprobs: dict[str, Any] | None = None) -> bytes:
        return sse({"id": req.request_id, "object": "chat.completion.chunk", "created": created, "model": req.model,
                    "system_fingerprint": fingerprint,
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": logprobs}]})

    yield chunk({"role": "assistant", "content": ""})
    async for r in replies:
        if isinstance(r, TokenChunk) and (r.text or r.logprobs):
            yield chunk({"content": r.text}, logprobs=chat_logprobs(r.logprobs) if req.sampling.logprobs else None)
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
    legacy = LegacyLogprobs() if req.sampling.logprobs else None

    def chunk(text: str, finish: str | None = None, logprobs: dict[str, Any] | None = None) -> bytes:
        return sse({"id": req.request_id, "object": "text_completion", "created": created, "model": req.model,
                    "choices": [{"index": 0, "text": text, "finish_reason": finish, "logprobs": logprobs}]})

    async for r in replies:
        if isinstance(r, TokenChunk) and (r.text or r.logprobs):
            yield chunk(r.text, logprobs=legacy(r.logprobs) if legacy is not None else None)
        elif isinstance(r, GenerateDone):
            yield chunk("", r.finish_reason)
            if include_usage:
                yield sse({"id": req.request_id, "object": "text_completion", "created": created, "model": req.model,
                           "choices": [], "usage": usage_of(r)})
    yield b"data: [DONE]\n\n"


def stream_error(err: WireError) -> bytes:
    return sse(err.openai()[1])
