"""Cross-wire upstreams: a client on one wire, an upstream speaking the other.

The client's request is decoded by its wire adapter into the bus's GenerateRequest, exactly as for the
in-kernel engine; this module writes that request in the upstream's wire, streams the upstream's answer
and turns it back into the engine's reply events (Accepted, TokenChunk…, GenerateDone with tool calls).
So the guard and the client's wire encoder run unchanged: an Anthropic client (Claude Code) can work on a
local OpenAI-compatible server, an OpenAI client on Claude, with tool calls adjudicated on the way.

    GenerateRequest ─▶ openai_request / anthropic_request / responses_request / gemini_request ─▶ upstream
    upstream SSE    ─▶ openai_events  / anthropic_events  / responses_events  / gemini_events  ─▶ TokenChunk… GenerateDone

(always streamed; Gemini's with `?alt=sse`, the model in the path)

Custom (freeform) tools travel as function tools with one string argument (ToolSpec.kind "custom"): to a
chat or messages upstream that is what they stay, and their calls come back as such; to a Responses
upstream they are custom tools again, with their grammar.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from typing import Any

from fak_gateway.errors import WireError
from fak_gateway.upstream import Upstream
from fakcore.protocol import (
    CUSTOM_TOOL_INPUT,
    Accepted,
    GenerateDone,
    GenerateRequest,
    Receipt,
    Sampling,
    TokenChunk,
    ToolCall,
    Usage,
)

ENGINE = "upstream"


def receipt(upstream: Upstream, model: str) -> Receipt:
    """Names what produced the answer: the upstream (no weights of ours)."""
    return Receipt(engine=ENGINE, worker=upstream.name, backend=upstream.wire, device=upstream.spec.url, model=model,
                   weights_digest="")


# ---------------------------------------------------------------------------------------------------------
# GenerateRequest -> the upstream's wire
# ---------------------------------------------------------------------------------------------------------


def openai_request(req: GenerateRequest, model: str) -> dict[str, Any]:
    messages: list[dict[str, Any]] = []
    for m in req.messages:
        if m.role == "tool":
            messages.append({"role": "tool", "tool_call_id": m.tool_call_id, "content": m.content})
        elif m.role == "assistant":
            msg: dict[str, Any] = {"role": "assistant", "content": m.content or None}
            if m.tool_calls:
                msg["tool_calls"] = [{"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                                     for c in m.tool_calls]
            messages.append(msg)
        else:
            messages.append({"role": m.role, "content": m.content})
    s = req.sampling
    body: dict[str, Any] = {"model": model, "messages": messages, "stream": True, "stream_options": {"include_usage": True},
                            "max_tokens": s.max_tokens, **_knobs(s, temperature="temperature", top_p="top_p")}
    if s.stop:
        body["stop"] = list(s.stop)
    if s.seed is not None:
        body["seed"] = s.seed
    if req.tools:
        body["tools"] = [{"type": "function", "function": {"name": t.name, "description": t.description,
                                                           "parameters": t.parameters or {"type": "object", "properties": {}}}}
                         for t in req.tools]
        body["tool_choice"] = ({"type": "function", "function": {"name": req.tool_choice_name}}
                               if req.tool_choice == "function" else req.tool_choice)
    if req.response_schema is not None:
        body["response_format"] = {"type": "json_schema", "json_schema": {"name": "response", "schema": req.response_schema}}
    return body


def _knobs(s: Sampling, **names: str) -> dict[str, Any]:
    """The sampling knobs the client set, under the upstream's names; one left unset is not sent (the upstream's
    default applies, as it would for the client talking to it directly). top_k 0 is "off": not sent either."""
    values = {"temperature": s.temperature, "top_p": s.top_p, "top_k": s.top_k or None}
    return {wire: values[ours] for ours, wire in names.items() if values[ours] is not None}


def _arguments(text: str) -> Any:
    try:
        return json.loads(text or "{}")
    except ValueError:
        return {}


def anthropic_request(req: GenerateRequest, model: str) -> dict[str, Any]:
    """Anthropic wants the system prompt apart, turns that alternate, and tool results inside a user turn."""
    system = "\n\n".join(m.content for m in req.messages if m.role == "system")
    turns: list[dict[str, Any]] = []

    def add(role: str, blocks: list[dict[str, Any]]) -> None:
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"] += blocks
        else:
            turns.append({"role": role, "content": blocks})

    for m in req.messages:
        if m.role == "system":
            continue
        if m.role == "tool":
            add("user", [{"type": "tool_result", "tool_use_id": m.tool_call_id, "content": m.content}])
        elif m.role == "assistant":
            blocks = [{"type": "text", "text": m.content}] if m.content else []
            blocks += [{"type": "tool_use", "id": c.id, "name": c.name, "input": _arguments(c.arguments)} for c in m.tool_calls]
            add("assistant", blocks or [{"type": "text", "text": ""}])
        else:
            add("user", [{"type": "text", "text": m.content}])
    s = req.sampling
    body: dict[str, Any] = {"model": model, "messages": turns, "max_tokens": s.max_tokens, "stream": True,
                            **_knobs(s, temperature="temperature", top_p="top_p", top_k="top_k")}
    if "temperature" in body:
        body["temperature"] = min(1.0, body["temperature"])  # Anthropic's range is 0..1
    if system:
        body["system"] = system
    if s.stop:
        body["stop_sequences"] = list(s.stop)
    if req.tools:
        body["tools"] = [{"name": t.name, "description": t.description,
                          "input_schema": t.parameters or {"type": "object", "properties": {}}} for t in req.tools]
        body["tool_choice"] = {"auto": {"type": "auto"}, "none": {"type": "none"}, "required": {"type": "any"},
                               "function": {"type": "tool", "name": req.tool_choice_name}}[req.tool_choice]
    return body


def _custom_input(arguments: str) -> str:
    value = _arguments(arguments)
    return value[CUSTOM_TOOL_INPUT] if isinstance(value, dict) and isinstance(value.get(CUSTOM_TOOL_INPUT), str) else arguments


def responses_request(req: GenerateRequest, model: str) -> dict[str, Any]:
    """The conversation as Responses input items; custom tools (and their calls and outputs) as custom again.
    Nothing is stored upstream (`store: false`): the gateway sends the whole conversation every time."""
    custom = {t.name for t in req.tools if t.kind == "custom"}
    called = {c.id: c.name for m in req.messages for c in m.tool_calls}
    items: list[dict[str, Any]] = []
    for m in req.messages:
        if m.role == "tool":
            kind = "custom_tool_call_output" if called.get(m.tool_call_id, m.name) in custom else "function_call_output"
            items.append({"type": kind, "call_id": m.tool_call_id, "output": m.content})
        elif m.role == "assistant":
            if m.content:
                items.append({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": m.content}]})
            for c in m.tool_calls:
                if c.name in custom:
                    items.append({"type": "custom_tool_call", "call_id": c.id, "name": c.name, "input": _custom_input(c.arguments)})
                else:
                    items.append({"type": "function_call", "call_id": c.id, "name": c.name, "arguments": c.arguments})
        else:
            items.append({"type": "message", "role": m.role, "content": [{"type": "input_text", "text": m.content}]})
    s = req.sampling
    body: dict[str, Any] = {"model": model, "input": items, "stream": True, "store": False,
                            "max_output_tokens": s.max_tokens, **_knobs(s, temperature="temperature", top_p="top_p")}
    if req.tools:
        body["tools"] = [{"type": "custom", "name": t.name, "description": t.description, "format": t.format or {"type": "text"}}
                         if t.kind == "custom" else
                         {"type": "function", "name": t.name, "description": t.description,
                          "parameters": t.parameters or {"type": "object", "properties": {}}} for t in req.tools]
        body["tool_choice"] = ({"type": "custom" if req.tool_choice_name in custom else "function", "name": req.tool_choice_name}
                               if req.tool_choice == "function" else req.tool_choice)
    if req.response_schema is not None:
        body["text"] = {"format": {"type": "json_schema", "name": "response", "schema": req.response_schema}}
    return body


# Gemini 3 refuses a replayed function call without the thought signature it came with; the bus keeps none,
# and this is the value Google documents for calls whose signature is not at hand.
SKIP_THOUGHT_SIGNATURE = "skip_thought_signature_validator"


def gemini_request(req: GenerateRequest) -> dict[str, Any]:
    """System messages as systemInstruction, turns of role user / model (consecutive ones merged), tool
    results as functionResponse parts ({"output": text}), tool schemas as parametersJsonSchema."""
    system = "\n\n".join(m.content for m in req.messages if m.role == "system")
    contents: list[dict[str, Any]] = []

    def add(role: str, parts: list[dict[str, Any]]) -> None:
        if contents and contents[-1]["role"] == role:
            contents[-1]["parts"] += parts
        else:
            contents.append({"role": role, "parts": parts})

    for m in req.messages:
        if m.role == "system":
            continue
        if m.role == "tool":
            add("user", [{"functionResponse": {"id": m.tool_call_id, "name": m.name, "response": {"output": m.content}}}])
        elif m.role == "assistant":
            parts: list[dict[str, Any]] = [{"text": m.content}] if m.content else []
            for i, c in enumerate(m.tool_calls):
                part: dict[str, Any] = {"functionCall": {"id": c.id, "name": c.name, "args": _arguments(c.arguments)}}
                if i == 0:
                    part["thoughtSignature"] = SKIP_THOUGHT_SIGNATURE
                parts.append(part)
            add("model", parts or [{"text": ""}])
        else:
            add("user", [{"text": m.content}])
    s = req.sampling
    config: dict[str, Any] = {"maxOutputTokens": s.max_tokens, **_knobs(s, temperature="temperature", top_p="topP", top_k="topK")}
    if s.stop:
        config["stopSequences"] = list(s.stop)
    if s.seed is not None:
        config["seed"] = s.seed
    if req.response_schema is not None:
        config["responseMimeType"] = "application/json"
        if req.response_schema:
            config["responseJsonSchema"] = req.response_schema
    body: dict[str, Any] = {"contents": contents, "generationConfig": config}
    if system:
        body["systemInstruction"] = {"parts": [{"text": system}]}
    if req.tools:
        body["tools"] = [{"functionDeclarations": [{"name": t.name, "description": t.description,
                                                    "parametersJsonSchema": t.parameters or {"type": "object", "properties": {}}}
                                                   for t in req.tools]}]
        mode = {"auto": "AUTO", "none": "NONE", "required": "ANY", "function": "ANY"}[req.tool_choice]
        calling: dict[str, Any] = {"mode": mode}
        if req.tool_choice == "function":
            calling["allowedFunctionNames"] = [req.tool_choice_name]
        body["toolConfig"] = {"functionCallingConfig": calling}
    return body


# ---------------------------------------------------------------------------------------------------------
# The upstream's stream -> engine reply events
# ---------------------------------------------------------------------------------------------------------

OPENAI_FINISH = {"stop": "stop", "length": "length", "tool_calls": "tool_calls", "function_call": "tool_calls",
                 "content_filter": "stop"}
ANTHROPIC_STOP = {"end_turn": "stop", "stop_sequence": "stop", "max_tokens": "length", "tool_use": "tool_calls",
                  "pause_turn": "stop", "refusal": "stop", "model_context_window_exceeded": "length"}


async def sse_data(lines: AsyncIterator[str]) -> AsyncIterator[tuple[str, str]]:
    """(event name, data) of each server-sent event."""
    name, data = "", []
    async for line in lines:
        if not line:
            if data:
                yield name, "\n".join(data)
            name, data = "", []
        elif line.startswith("event:"):
            name = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].lstrip())
    if data:
        yield name, "\n".join(data)


def _json(data: str, upstream: str) -> dict[str, Any]:
    try:
        obj = json.loads(data)
    except ValueError:
        raise WireError("bad_gateway", f"upstream {upstream!r} sent an event that is not JSON: {data[:200]!r}") from None
    if not isinstance(obj, dict):
        raise WireError("bad_gateway", f"upstream {upstream!r} sent an event that is not a JSON object")
    return obj


async def openai_events(req: GenerateRequest, upstream: Upstream, rcpt: Receipt,
                        lines: AsyncIterator[str]) -> AsyncIterator[TokenChunk | GenerateDone]:
    seq, finish = 0, ""
    calls: dict[int, dict[str, str]] = {}
    usage = Usage()
    async for _, data in sse_data(lines):
        if data.strip() == "[DONE]":
            break
        obj = _json(data, upstream.name)
        if "error" in obj:
            raise WireError("bad_gateway", f"upstream {upstream.name!r}: {obj['error']}")
        if obj.get("usage"):
            u = obj["usage"]
            usage = Usage(prompt_tokens=u.get("prompt_tokens") or 0, completion_tokens=u.get("completion_tokens") or 0,
                          cached_tokens=(u.get("prompt_tokens_details") or {}).get("cached_tokens") or 0)
        for choice in obj.get("choices") or []:
            delta = choice.get("delta") or {}
            if delta.get("content"):
                yield TokenChunk(request_id=req.request_id, seq=seq, text=delta["content"])
                seq += 1
            for tc in delta.get("tool_calls") or []:
                c = calls.setdefault(tc.get("index", len(calls)), {"id": "", "name": "", "arguments": ""})
                fn = tc.get("function") or {}
                c["id"] = tc.get("id") or c["id"]
                c["name"] += fn.get("name") or ""
                c["arguments"] += fn.get("arguments") or ""
            if choice.get("finish_reason"):
                finish = OPENAI_FINISH.get(choice["finish_reason"], "stop")
    if not finish:
        raise WireError("bad_gateway", f"upstream {upstream.name!r} ended its stream without a finish reason")
    tool_calls = [ToolCall(id=c["id"] or f"call_{req.request_id[-12:]}_{i}", name=c["name"], arguments=c["arguments"] or "{}")
                  for i, c in sorted(calls.items())]
    yield GenerateDone(request_id=req.request_id, seq=seq, finish_reason="tool_calls" if tool_calls else finish, usage=usage,
                       receipt=rcpt, tool_calls=tool_calls)


async def anthropic_events(req: GenerateRequest, upstream: Upstream, rcpt: Receipt,
                           lines: AsyncIterator[str]) -> AsyncIterator[TokenChunk | GenerateDone]:
    seq, stop, stop_sequence = 0, "", ""
    blocks: dict[int, dict[str, str]] = {}
    prompt = cached = output = 0
    async for name, data in sse_data(lines):
        obj = _json(data, upstream.name)
        kind = obj.get("type") or name
        if kind == "error":
            err = obj.get("error") or {}
            raise WireError("bad_gateway", f"upstream {upstream.name!r}: {err.get('message') or err}")
        if kind == "message_start":
            u = (obj.get("message") or {}).get("usage") or {}
            cached = u.get("cache_read_input_tokens") or 0
            prompt = (u.get("input_tokens") or 0) + cached + (u.get("cache_creation_input_tokens") or 0)
            output = u.get("output_tokens") or 0
        elif kind == "content_block_start":
            b = obj.get("content_block") or {}
            if b.get("type") == "tool_use":
                blocks[obj.get("index", len(blocks))] = {"id": b.get("id", ""), "name": b.get("name", ""), "arguments": ""}
        elif kind == "content_block_delta":
            d = obj.get("delta") or {}
            if d.get("type") == "text_delta" and d.get("text"):
                yield TokenChunk(request_id=req.request_id, seq=seq, text=d["text"])
                seq += 1
            elif d.get("type") == "input_json_delta" and obj.get("index") in blocks:
                blocks[obj["index"]]["arguments"] += d.get("partial_json") or ""
        elif kind == "message_delta":
            d = obj.get("delta") or {}
            stop = ANTHROPIC_STOP.get(d.get("stop_reason") or "", "stop")
            stop_sequence = d.get("stop_sequence") or ""
            output = (obj.get("usage") or {}).get("output_tokens", output)
        elif kind == "message_stop":
            break
    if not stop:
        raise WireError("bad_gateway", f"upstream {upstream.name!r} ended its stream without a stop reason")
    tool_calls = [ToolCall(id=b["id"], name=b["name"], arguments=b["arguments"] or "{}") for _, b in sorted(blocks.items())]
    yield GenerateDone(request_id=req.request_id, seq=seq, finish_reason="tool_calls" if tool_calls else stop,
                       usage=Usage(prompt_tokens=prompt, completion_tokens=output, cached_tokens=cached), receipt=rcpt,
                       tool_calls=tool_calls, stop_sequence=stop_sequence)


async def responses_events(req: GenerateRequest, upstream: Upstream, rcpt: Receipt,
                           lines: AsyncIterator[str]) -> AsyncIterator[TokenChunk | GenerateDone]:
    seq = 0
    calls: list[ToolCall] = []
    async for name, data in sse_data(lines):
        obj = _json(data, upstream.name)
        kind = obj.get("type") or name
        if kind == "response.output_text.delta" and obj.get("delta"):
            yield TokenChunk(request_id=req.request_id, seq=seq, text=obj["delta"])
            seq += 1
        elif kind == "response.output_item.done":
            item = obj.get("item") or {}
            if item.get("type") == "function_call":
                calls.append(ToolCall(id=item.get("call_id") or item.get("id", ""), name=item.get("name", ""),
                                      arguments=item.get("arguments") or "{}"))
            elif item.get("type") == "custom_tool_call":
                calls.append(ToolCall(id=item.get("call_id") or item.get("id", ""), name=item.get("name", ""),
                                      arguments=json.dumps({CUSTOM_TOOL_INPUT: item.get("input", "")}, ensure_ascii=False)))
        elif kind in ("error", "response.failed"):
            err = obj.get("error") or ((obj.get("response") or {}).get("error")) or obj
            raise WireError("bad_gateway", f"upstream {upstream.name!r}: {err.get('message') or err}")
        elif kind in ("response.completed", "response.incomplete"):
            u = (obj.get("response") or {}).get("usage") or {}
            usage = Usage(prompt_tokens=u.get("input_tokens") or 0, completion_tokens=u.get("output_tokens") or 0,
                          cached_tokens=(u.get("input_tokens_details") or {}).get("cached_tokens") or 0)
            finish = "length" if kind == "response.incomplete" else "tool_calls" if calls else "stop"
            yield GenerateDone(request_id=req.request_id, seq=seq, finish_reason=finish, usage=usage, receipt=rcpt,
                               tool_calls=calls)
            return
    raise WireError("bad_gateway", f"upstream {upstream.name!r} ended its stream without response.completed")


GEMINI_FINISH = {"STOP": "stop", "MAX_TOKENS": "length"}  # the rest (SAFETY, RECITATION, …) end the answer: stop


async def gemini_events(req: GenerateRequest, upstream: Upstream, rcpt: Receipt,
                        lines: AsyncIterator[str]) -> AsyncIterator[TokenChunk | GenerateDone]:
    """Each event is a whole GenerateContentResponse: its text parts are deltas (thoughts skipped), its
    functionCall parts whole calls; the one with a finishReason ends the answer."""
    seq, finish = 0, ""
    calls: list[ToolCall] = []
    usage = Usage()
    async for _, data in sse_data(lines):
        obj = _json(data, upstream.name)
        if "error" in obj:
            err = obj["error"]
            raise WireError("bad_gateway", f"upstream {upstream.name!r}: {err.get('message') if isinstance(err, dict) else err}")
        if obj.get("usageMetadata"):
            u = obj["usageMetadata"]
            usage = Usage(prompt_tokens=u.get("promptTokenCount") or 0,
                          completion_tokens=(u.get("candidatesTokenCount") or 0) + (u.get("thoughtsTokenCount") or 0),
                          cached_tokens=u.get("cachedContentTokenCount") or 0)
        for candidate in (obj.get("candidates") or [])[:1]:
            for part in (candidate.get("content") or {}).get("parts") or []:
                if part.get("functionCall"):
                    fc = part["functionCall"]
                    calls.append(ToolCall(id=fc.get("id") or f"call_{req.request_id[-12:]}_{len(calls)}",
                                          name=fc.get("name", ""), arguments=json.dumps(fc.get("args") or {})))
                elif part.get("text") and not part.get("thought"):
                    yield TokenChunk(request_id=req.request_id, seq=seq, text=part["text"])
                    seq += 1
            if candidate.get("finishReason"):
                finish = GEMINI_FINISH.get(candidate["finishReason"], "stop")
    if not finish:
        raise WireError("bad_gateway", f"upstream {upstream.name!r} ended its stream without a finishReason")
    yield GenerateDone(request_id=req.request_id, seq=seq, finish_reason="tool_calls" if calls else finish, usage=usage,
                       receipt=rcpt, tool_calls=calls)


class Translated:
    """An upstream behind the engine's reply protocol: `generate` yields Accepted, TokenChunk…, GenerateDone.
    It cannot hold a request at a verdict barrier, so the guard screens before sending."""

    can_hold = False

    def __init__(self, upstream: Upstream, target: str, client_headers: Mapping[str, str]):
        self.upstream, self.target, self.client_headers = upstream, target, client_headers

    async def generate(self, req: GenerateRequest) -> AsyncIterator[Any]:
        u = self.upstream
        query = ""
        if u.wire == "openai":
            op, body, events = "chat", openai_request(req, self.target), openai_events
        elif u.wire == "responses":
            op, body, events = "responses", responses_request(req, self.target), responses_events
        elif u.wire == "gemini":
            op, body, events, query = "stream", gemini_request(req), gemini_events, "alt=sse"
        else:
            op, body, events = "messages", anthropic_request(req, self.target), anthropic_events
        rcpt = receipt(u, self.target)
        async with u.open(op, json.dumps(body).encode(), u.headers(self.client_headers, same_wire=False), query,
                          model=self.target) as response:
            yield Accepted(request_id=req.request_id, receipt=rcpt)
            async for event in events(req, u, rcpt, u.lines(response)):
                yield event
