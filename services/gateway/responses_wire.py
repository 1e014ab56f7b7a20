"""The OpenAI Responses wire: POST /v1/responses (+SSE), as Codex CLI and the OpenAI Agents SDK speak it.

A request's `input` (a string, or items: messages, function and custom tool calls, their outputs, reasoning)
becomes the engine's conversation, after the conversation of `previous_response_id` (the response store,
responses_store.py). Tool outputs become tool messages, so they are screened and quarantined like any tool
result; proposed calls come back through the guard's adjudication before the client sees them.

Custom (freeform) tools, such as Codex's `apply_patch`, are function tools with one string argument on the
bus (CUSTOM_INPUT): every backend can carry them, and a call to one is turned back into a
`custom_tool_call` here. Their `format` (a lark or regex grammar) travels in ToolSpec.format; in-kernel it
constrains the input of every call to the tool, forced or chosen by the model (engine/sequence.py).

The stream follows OpenAI's event order: response.created, response.in_progress, then per output item
response.output_item.added, its parts and deltas, response.output_item.done, and response.completed
(response.incomplete at the token limit; response.failed / error when the request fails mid-way).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import msgspec

from fak_gateway.errors import WireError
from fak_gateway.openai_wire import MaxTokens, decode, name_tool_results, sampling_range, tool_choice_mode
from fakcore.protocol import (
    CUSTOM_TOOL_INPUT,
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

DEFAULT_MAX_OUTPUT_TOKENS = 1024
CUSTOM_INPUT = CUSTOM_TOOL_INPUT

# Fields the real API takes that the in-kernel engine accepts without acting on (named in x-fak-ignored).
IGNORED_FIELDS = ("reasoning", "truncation", "service_tier", "prompt_cache_key", "safety_identifier", "user",
                  "background", "max_tool_calls", "prompt", "conversation", "top_logprobs", "stream_options")
# Input items that carry nothing the model should read again (earlier reasoning, hosted tools' traffic).
DROPPED_ITEMS = ("reasoning", "web_search_call", "file_search_call", "computer_call", "computer_call_output",
                 "image_generation_call", "code_interpreter_call", "mcp_list_tools", "mcp_approval_request",
                 "mcp_approval_response", "mcp_call")
TEXT_PARTS = ("input_text", "output_text", "text", "summary_text", "reasoning_text", "refusal")


class ResponsesRequest(msgspec.Struct, kw_only=True):
    model: str = ""
    input: str | list[dict[str, Any]] = []
    instructions: str | None = None
    previous_response_id: str | None = None
    store: bool | None = None
    stream: bool = False
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    max_output_tokens: MaxTokens | None = None
    temperature: float | None = None
    top_p: float | None = None
    text: dict[str, Any] | None = None
    metadata: dict[str, str] | None = None
    include: list[str] | None = None
    reasoning: dict[str, Any] | None = None
    truncation: str | None = None
    service_tier: str | None = None
    prompt_cache_key: str | None = None
    safety_identifier: str | None = None
    user: str | None = None
    background: bool | None = None
    max_tool_calls: int | None = None
    prompt: dict[str, Any] | None = None
    conversation: str | dict[str, Any] | None = None
    top_logprobs: int | None = None
    stream_options: dict[str, Any] | None = None


class InputTokensRequest(msgspec.Struct, kw_only=True):
    model: str = ""
    input: str | list[dict[str, Any]] = []
    instructions: str | None = None
    previous_response_id: str | None = None
    tools: list[dict[str, Any]] | None = None


def decode_request(body: bytes) -> ResponsesRequest:
    return decode(body, ResponsesRequest)


def ignored(r: ResponsesRequest, items: list[dict[str, Any]]) -> list[str]:
    """What the in-kernel engine accepted without acting on: fields, hosted tools, dropped item types."""
    out = [f for f in IGNORED_FIELDS if getattr(r, f, None) not in (None, {}, [], "disabled")]
    out += sorted({f"tool:{t.get('type')}" for t in r.tools or [] if t.get("type") not in SERVED_TOOLS})
    out += sorted({f"item:{i.get('type')}" for i in items if i.get("type") in DROPPED_ITEMS})
    return out


# ---------------------------------------------------------------------------------------------------------
# Input items -> the engine's conversation
# ---------------------------------------------------------------------------------------------------------


def input_items(value: str | list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`input` as items: a string is one user message."""
    if isinstance(value, str):
        return [{"type": "message", "role": "user", "content": value}]
    return list(value)


def _text(content: Any, where: str, strict: bool) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    if not isinstance(content, list):
        raise WireError("invalid_request", f"{where}: content must be a string or a list of parts", param=where)
    parts = []
    for i, p in enumerate(content):
        if not isinstance(p, dict) or not isinstance(p.get("type"), str):
            raise WireError("invalid_request", f"{where}[{i}] must be an object with a type", param=f"{where}[{i}]")
        if p["type"] in TEXT_PARTS:
            text = p.get("text", p.get("refusal", ""))
            if not isinstance(text, str):
                raise WireError("invalid_request", f"{where}[{i}].text must be a string", param=f"{where}[{i}].text")
            parts.append(text)
        elif strict:
            raise WireError("invalid_request", f"{where}[{i}]: content type {p['type']!r} cannot be served by this model "
                                               "(it reads text only)", param=f"{where}[{i}].type")
    return "".join(parts)


def _str(item: dict[str, Any], key: str, where: str, default: str | None = None) -> str:
    value = item.get(key, default)
    if not isinstance(value, str):
        raise WireError("invalid_request", f"{where}.{key} must be a string", param=f"{where}.{key}")
    return value


def to_messages(items: list[dict[str, Any]], instructions: str | None, strict: bool = True) -> list[ChatMessage]:
    """Items in order; consecutive tool calls join the assistant message before them, as chat wants."""
    messages: list[ChatMessage] = []
    if instructions:
        messages.append(ChatMessage(role="system", content=instructions))

    def assistant() -> ChatMessage:
        last = messages[-1] if messages else None
        if last is not None and last.role == "assistant":
            return last
        messages.append(ChatMessage(role="assistant", content=""))
        return messages[-1]

    for i, item in enumerate(items):
        where = f"input[{i}]"
        if not isinstance(item, dict):
            raise WireError("invalid_request", f"{where} must be an object", param=where)
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            if role not in ("user", "system", "developer", "assistant"):
                raise WireError("invalid_request", f"{where}.role {role!r} is not one of user, system, developer, assistant",
                                param=f"{where}.role")
            text = _text(item.get("content"), f"{where}.content", strict)
            if role == "assistant":
                a = assistant()
                if a.tool_calls:  # text after this turn's calls: a new assistant message
                    messages.append(ChatMessage(role="assistant", content=text))
                else:
                    a.content += text
            elif role in ("system", "developer") and messages and messages[-1].role == "system":
                messages[-1].content += "\n\n" + text  # consecutive instructions: one system message, as templates want
            else:
                messages.append(ChatMessage(role="system" if role == "developer" else role, content=text))
        elif kind in ("function_call", "custom_tool_call"):
            call_id = _str(item, "call_id", where)
            name = _str(item, "name", where)
            if kind == "function_call":
                arguments = _str(item, "arguments", where, "{}")
            else:
                arguments = json.dumps({CUSTOM_INPUT: _str(item, "input", where, "")}, ensure_ascii=False)
            assistant().tool_calls.append(ToolCall(id=call_id, name=name, arguments=arguments))
        elif kind in ("function_call_output", "custom_tool_call_output"):
            call_id = _str(item, "call_id", where)
            output = item.get("output", "")
            text = output if isinstance(output, str) else _text(output, f"{where}.output", strict)
            messages.append(ChatMessage(role="tool", content=text, tool_call_id=call_id, block=block_id(text)))
        elif kind in DROPPED_ITEMS:
            continue
        elif kind == "item_reference":
            raise WireError("invalid_request", f"{where}: item_reference is not supported; send the item itself, or "
                                               "previous_response_id", param=f"{where}.type")
        elif strict:
            raise WireError("invalid_request", f"{where}: input item type {kind!r} is not supported", param=f"{where}.type")
    name_tool_results(messages)
    return messages


# ---------------------------------------------------------------------------------------------------------
# Tools
# ---------------------------------------------------------------------------------------------------------


def custom_parameters(description: str = "") -> dict[str, Any]:
    """A custom tool's arguments on the bus: one string, the tool's freeform input."""
    prop: dict[str, Any] = {"type": "string"}
    if description:
        prop["description"] = description
    return {"type": "object", "properties": {CUSTOM_INPUT: prop}, "required": [CUSTOM_INPUT]}


SERVED_TOOLS = ("function", "custom", "namespace")  # others (hosted: web_search, tool_search, …) are ignored


def to_tools(tools: list[dict[str, Any]] | None, namespaces: dict[str, str] | None = None) -> list[ToolSpec]:
    """Function and custom tools, and the function tools inside a `namespace` (their names kept; the
    namespace goes into `namespaces`, name -> namespace, and back onto each call). Hosted tools are
    served by OpenAI only: skipped here and named in x-fak-ignored."""
    out = []
    for i, t in enumerate(tools or []):
        where = f"tools[{i}]"
        if not isinstance(t, dict):
            raise WireError("invalid_request", f"{where} must be an object", param=where)
        kind = t.get("type")
        if kind == "namespace":
            inner = t.get("tools")
            if not isinstance(inner, list):
                raise WireError("invalid_request", f"{where}.tools must be a list", param=f"{where}.tools")
            for spec in to_tools(inner):
                if namespaces is not None:
                    namespaces[spec.name] = _str(t, "name", where)
                out.append(spec)
        elif kind == "function":
            params = t.get("parameters") or {"type": "object", "properties": {}}
            if not isinstance(params, dict):
                raise WireError("invalid_request", f"{where}.parameters must be a JSON Schema object", param=f"{where}.parameters")
            out.append(ToolSpec(name=_str(t, "name", where), description=t.get("description") or "", parameters=params))
        elif kind == "custom":
            fmt = t.get("format") or {"type": "text"}
            if not isinstance(fmt, dict) or fmt.get("type") not in ("text", "grammar"):
                raise WireError("invalid_request", f"{where}.format must be {{'type': 'text'}} or a grammar", param=f"{where}.format")
            if fmt["type"] == "grammar" and (fmt.get("syntax") not in ("lark", "regex") or not isinstance(fmt.get("definition"), str)):
                raise WireError("invalid_request", f"{where}.format: a grammar needs syntax lark or regex and a definition",
                                param=f"{where}.format")
            description = t.get("description") or ""
            out.append(ToolSpec(name=_str(t, "name", where), description=description, kind="custom",
                                parameters=custom_parameters(), format=fmt))
        elif not isinstance(kind, str):
            raise WireError("invalid_request", f"{where}.type must be a string", param=f"{where}.type")
    return out


def _tool_choice(choice: str | dict[str, Any] | None, tools: list[ToolSpec]) -> tuple[str, str]:
    if choice is None or isinstance(choice, str):
        mode, _ = tool_choice_mode(choice, tools)
        return (mode if tools else "none"), ""
    if choice.get("type") in ("function", "custom") and isinstance(choice.get("name"), str):
        if choice["name"] not in {t.name for t in tools}:
            raise WireError("invalid_request", f"tool_choice names {choice['name']!r}, which is not in tools", param="tool_choice")
        return "function", choice["name"]
    if choice.get("type") == "allowed_tools":
        return ("required" if choice.get("mode") == "required" else "auto"), ""
    raise WireError("invalid_request", "tool_choice must be none, auto, required, or {'type': 'function'|'custom', 'name': …}",
                    param="tool_choice")


def _response_schema(text: dict[str, Any] | None) -> dict[str, Any] | None:
    fmt = (text or {}).get("format") or {}
    if not isinstance(fmt, dict) or fmt.get("type") in (None, "text"):
        return None
    if fmt["type"] == "json_object":
        return {"type": "object"}
    if fmt["type"] == "json_schema":
        if not isinstance(fmt.get("schema"), dict):
            raise WireError("invalid_request", "text.format.schema must be a JSON Schema object", param="text.format.schema")
        return fmt["schema"]
    raise WireError("invalid_request", f"text.format type {fmt['type']!r} is not supported", param="text.format.type")


def _sampling(r: ResponsesRequest) -> Sampling:
    temperature, top_p = sampling_range(r.temperature, r.top_p)
    return Sampling(max_tokens=r.max_output_tokens or DEFAULT_MAX_OUTPUT_TOKENS, temperature=temperature, top_p=top_p)


@dataclass
class Turn:
    """One Responses request as the pipeline runs it: the bus request and what the response echoes."""

    request: ResponsesRequest
    req: GenerateRequest
    items: list[dict[str, Any]]  # this request's input items (stored, for the next turn)
    history: list[dict[str, Any]] = field(default_factory=list)  # the previous responses' items, oldest first
    custom: set[str] = field(default_factory=set)  # names of custom tools
    namespaces: dict[str, str] = field(default_factory=dict)  # tool name -> the namespace it came in
    created: int = field(default_factory=lambda: int(time.time()))

    @property
    def id(self) -> str:
        return self.req.request_id


def to_bus(r: ResponsesRequest, history: list[dict[str, Any]], session: str, strict: bool = True) -> Turn:
    items = input_items(r.input)
    if not items and not history:
        raise WireError("invalid_request", "input must not be empty", param="input")
    namespaces: dict[str, str] = {}
    tools = to_tools(r.tools, namespaces)
    req = GenerateRequest(request_id=f"resp_{uuid.uuid4().hex}", model=r.model,
                          messages=to_messages([*history, *items], r.instructions, strict), tools=tools, session=session)
    if not req.messages:
        raise WireError("invalid_request", "input has nothing for the model to read", param="input")
    if strict:
        req.tool_choice, req.tool_choice_name = _tool_choice(r.tool_choice, tools)
        req.response_schema = _response_schema(r.text)
        req.sampling = _sampling(r)
    else:
        req.sampling = Sampling(max_tokens=r.max_output_tokens or DEFAULT_MAX_OUTPUT_TOKENS)
    return Turn(request=r, req=req, items=items, history=history, custom={t.name for t in tools if t.kind == "custom"},
                namespaces=namespaces)


# ---------------------------------------------------------------------------------------------------------
# The response
# ---------------------------------------------------------------------------------------------------------


def _item_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


def message_item(text: str, status: str = "completed", item_id: str = "") -> dict[str, Any]:
    return {"type": "message", "id": item_id or _item_id("msg"), "status": status, "role": "assistant",
            "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}] if status == "completed" else []}


def call_item(turn: Turn, call: ToolCall, item_id: str = "") -> dict[str, Any]:
    if call.name in turn.custom:
        return {"type": "custom_tool_call", "id": item_id or _item_id("ctc"), "status": "completed", "call_id": call.id,
                "name": call.name, "input": custom_input(call.arguments)}
    item = {"type": "function_call", "id": item_id or _item_id("fc"), "status": "completed", "call_id": call.id,
            "name": call.name, "arguments": call.arguments}
    if call.name in turn.namespaces:
        item["namespace"] = turn.namespaces[call.name]
    return item


def custom_input(arguments: str) -> str:
    """A custom tool's input from its bus arguments ({"input": "…"}); text that is not that shape as it is."""
    try:
        value = json.loads(arguments)
    except ValueError:
        return arguments
    if isinstance(value, dict) and isinstance(value.get(CUSTOM_INPUT), str):
        return value[CUSTOM_INPUT]
    return arguments


def usage_of(done: GenerateDone) -> dict[str, Any]:
    u = done.usage
    return {"input_tokens": u.prompt_tokens, "input_tokens_details": {"cached_tokens": u.cached_tokens},
            "output_tokens": u.completion_tokens, "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": u.prompt_tokens + u.completion_tokens}


def response_object(turn: Turn, status: str, output: list[dict[str, Any]], usage: dict[str, Any] | None = None,
                    error: dict[str, Any] | None = None) -> dict[str, Any]:
    r = turn.request
    incomplete = {"reason": "max_output_tokens"} if status == "incomplete" else None
    return {"id": turn.id, "object": "response", "created_at": turn.created, "status": status, "error": error,
            "incomplete_details": incomplete, "instructions": r.instructions, "max_output_tokens": r.max_output_tokens,
            "model": r.model, "output": output, "parallel_tool_calls": r.parallel_tool_calls is not False,
            "previous_response_id": r.previous_response_id, "reasoning": {"effort": None, "summary": None},
            "store": r.store is not False, "temperature": r.temperature, "top_p": r.top_p,
            "text": r.text or {"format": {"type": "text"}}, "tool_choice": r.tool_choice or "auto",
            "tools": r.tools or [], "truncation": r.truncation or "disabled", "usage": usage, "user": r.user,
            "metadata": r.metadata or {}}


def _calls(turn: Turn, done: GenerateDone) -> list[ToolCall]:
    """The calls to hand out: only the first when the client turned parallel tool calls off."""
    return done.tool_calls[:1] if turn.request.parallel_tool_calls is False else done.tool_calls


def _status(done: GenerateDone) -> str:
    return "incomplete" if done.finish_reason == "length" else "completed"


async def response(turn: Turn, replies: AsyncIterator[Any]) -> dict[str, Any]:
    parts: list[str] = []
    async for r in replies:
        if isinstance(r, TokenChunk):
            parts.append(r.text)
        elif isinstance(r, GenerateDone):
            text = "".join(parts)
            output = [message_item(text)] if text or not r.tool_calls else []
            output += [call_item(turn, c) for c in _calls(turn, r)]
            return response_object(turn, _status(r), output, usage_of(r))
    raise WireError("internal", "engine stream ended without a final message")


class Events:
    """The SSE events of one streamed response, numbered in order."""

    def __init__(self) -> None:
        self.n = 0

    def __call__(self, kind: str, **fields: Any) -> bytes:
        event = {"type": kind, "sequence_number": self.n, **fields}
        self.n += 1
        return f"event: {kind}\ndata: ".encode() + json.dumps(event, ensure_ascii=False, separators=(",", ":")).encode() + b"\n\n"


async def stream(turn: Turn, first: Accepted, replies: AsyncIterator[Any], done_cb: Any = None) -> AsyncIterator[bytes]:
    """`done_cb(response)` is awaited with the final response object before response.completed is sent (the store)."""
    ev = Events()
    yield ev("response.created", response=response_object(turn, "in_progress", []))
    yield ev("response.in_progress", response=response_object(turn, "in_progress", []))
    output: list[dict[str, Any]] = []
    text: list[str] | None = None
    msg_id = _item_id("msg")

    def open_message() -> list[bytes]:
        return [ev("response.output_item.added", output_index=0, item=message_item("", "in_progress", msg_id)),
                ev("response.content_part.added", item_id=msg_id, output_index=0, content_index=0,
                   part={"type": "output_text", "text": "", "annotations": [], "logprobs": []})]

    def close_message(body: str) -> list[bytes]:
        item = message_item(body, item_id=msg_id)
        output.append(item)
        return [ev("response.output_text.done", item_id=msg_id, output_index=0, content_index=0, text=body, logprobs=[]),
                ev("response.content_part.done", item_id=msg_id, output_index=0, content_index=0, part=item["content"][0]),
                ev("response.output_item.done", output_index=0, item=item)]

    try:
        async for r in replies:
            if isinstance(r, TokenChunk) and r.text:
                if text is None:
                    text = []
                    for e in open_message():
                        yield e
                text.append(r.text)
                yield ev("response.output_text.delta", item_id=msg_id, output_index=0, content_index=0, delta=r.text, logprobs=[])
            elif isinstance(r, GenerateDone):
                if text is None and not r.tool_calls:
                    text = []
                    for e in open_message():
                        yield e
                if text is not None:
                    for e in close_message("".join(text)):
                        yield e
                for call in _calls(turn, r):
                    item, events = _call_events(ev, turn, call, len(output))
                    for e in events:
                        yield e
                    output.append(item)
                final = response_object(turn, _status(r), output, usage_of(r))
                if done_cb is not None:
                    await done_cb(final)
                yield ev(f"response.{final['status']}", response=final)
                return
    except WireError as err:
        status, body = err.openai()
        failed = response_object(turn, "failed", output, error={"code": body["error"].get("code") or body["error"]["type"],
                                                                "message": err.message})
        yield ev("error", code=body["error"].get("code") or body["error"]["type"], message=err.message,
                 param=body["error"].get("param"))
        yield ev("response.failed", response=failed)
        return
    raise WireError("internal", "engine stream ended without a final message")


def _call_events(ev: Events, turn: Turn, call: ToolCall, index: int) -> tuple[dict[str, Any], list[bytes]]:
    """A call arrives whole (after adjudication): added, one delta, done, item done."""
    item = call_item(turn, call)
    pending = {**item, "status": "in_progress", **({"input": ""} if item["type"] == "custom_tool_call" else {"arguments": ""})}
    events = [ev("response.output_item.added", output_index=index, item=pending)]  # numbered in the order sent
    if item["type"] == "custom_tool_call":
        events += [ev("response.custom_tool_call_input.delta", item_id=item["id"], output_index=index, delta=item["input"]),
                   ev("response.custom_tool_call_input.done", item_id=item["id"], output_index=index, input=item["input"])]
    else:
        events += [ev("response.function_call_arguments.delta", item_id=item["id"], output_index=index, delta=item["arguments"]),
                   ev("response.function_call_arguments.done", item_id=item["id"], output_index=index, name=item["name"],
                      arguments=item["arguments"])]
    return item, [*events, ev("response.output_item.done", output_index=index, item=item)]


def stream_error(err: WireError) -> bytes:
    status, body = err.openai()
    return Events()("error", code=body["error"].get("code") or body["error"]["type"], message=err.message,
                    param=body["error"].get("param"))
