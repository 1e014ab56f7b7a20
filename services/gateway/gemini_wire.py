"""The Gemini wire: POST /v1beta/models/{model}:generateContent, :streamGenerateContent and :countTokens, as the
google-genai SDKs and Gemini CLI speak it (also under /v1/, the Python SDK's default version).

The model is in the path, not the body. `contents` (turns of role `user` or `model`, each a list of parts)
and `systemInstruction` become the engine's conversation: text parts are read, a model turn's
`functionCall` parts become its tool calls and each `functionResponse` part becomes a tool message, so it
is screened and quarantined like any tool result; proposed calls come back through the guard's
adjudication before the client sees them. A call or response without an `id` (Gemini 2.x sends none) is
paired with the earliest unanswered call of its name.

`tools[].functionDeclarations` (`parameters` in Gemini's OpenAPI-style Schema, or `parametersJsonSchema`),
`toolConfig.functionCallingConfig` (AUTO / ANY / NONE / VALIDATED, `allowedFunctionNames`) and
`generationConfig` (sampling, stop sequences, `responseMimeType: application/json` with `responseSchema`
or `responseJsonSchema`, constrained in-kernel like response_format json_schema, logprobs) are served.
Gemini's Schema is turned into JSON Schema once (`json_schema`: upper-case types lowered, `nullable`,
integer-valued strings, Gemini-only keywords dropped). What only Google's side has (safety settings, cached
contents, hosted tools such as googleSearch, thinking) is accepted and named in x-fak-ignored; a 400 only
for what a text model truly cannot serve (images, other modalities, candidateCount > 1, penalties).

The stream is GenerateContentResponse objects: server-sent events with `?alt=sse` (what the SDKs ask for),
else one JSON array written element by element. The last carries finishReason and usageMetadata; a text
chunk is held one step so that the last one carries them too (Gemini CLI wants no empty final part).
"""

from __future__ import annotations

import functools
import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import msgspec

from fak_gateway.errors import WireError
from fak_gateway.gemini_schema import json_schema
from fak_gateway.openai_wire import Count, MaxTokens, Seed, TopK, decode, name_tool_results, sampling_range
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

DEFAULT_MAX_OUTPUT_TOKENS = 8192  # Gemini's own default for most models
MAX_STOP_SEQUENCES = 5  # as Google's API
MAX_LOGPROBS = 20
ACTIONS = ("generateContent", "streamGenerateContent", "countTokens")

# ---------------------------------------------------------------------------------------------------------
# Request schemas (camelCase on the wire; Google's JSON mapping of its protos)
# ---------------------------------------------------------------------------------------------------------


class FunctionCall(msgspec.Struct, kw_only=True, rename="camel"):
    name: str = ""
    args: dict[str, Any] | None = None
    id: str | None = None


class FunctionResponse(msgspec.Struct, kw_only=True, rename="camel"):
    name: str = ""
    response: dict[str, Any] | None = None
    id: str | None = None
    parts: list[dict[str, Any]] | None = None  # multimodal function responses (inline data)
    will_continue: bool | None = None
    scheduling: str | None = None


class Part(msgspec.Struct, kw_only=True, rename="camel"):
    text: str | None = None
    thought: bool | None = None
    thought_signature: str | None = None
    function_call: FunctionCall | None = None
    function_response: FunctionResponse | None = None
    inline_data: dict[str, Any] | None = None
    file_data: dict[str, Any] | None = None
    executable_code: dict[str, Any] | None = None
    code_execution_result: dict[str, Any] | None = None
    video_metadata: dict[str, Any] | None = None
    part_metadata: dict[str, Any] | None = None
    media_resolution: Any = None


class Content(msgspec.Struct, kw_only=True):
    parts: list[Part] = []
    role: str | None = None


class FunctionDeclaration(msgspec.Struct, kw_only=True, rename="camel"):
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    parameters_json_schema: Any = None
    response: dict[str, Any] | None = None
    response_json_schema: Any = None
    behavior: str | None = None


class FunctionCallingConfig(msgspec.Struct, kw_only=True, rename="camel"):
    mode: str | None = None
    allowed_function_names: list[str] | None = None


class ToolConfig(msgspec.Struct, kw_only=True, rename="camel"):
    function_calling_config: FunctionCallingConfig | None = None
    retrieval_config: dict[str, Any] | None = None
    include_server_side_tool_invocations: bool | None = None


class GenerationConfig(msgspec.Struct, kw_only=True, rename="camel"):
    stop_sequences: list[str] | None = None
    response_mime_type: str | None = None
    response_schema: dict[str, Any] | None = None
    response_json_schema: Any = None
    response_modalities: list[str] | None = None
    candidate_count: Count | None = None
    max_output_tokens: MaxTokens | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: TopK | None = None
    seed: Seed | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    response_logprobs: bool | None = None
    logprobs: Count | None = None
    enable_enhanced_civic_answers: bool | None = None
    speech_config: dict[str, Any] | None = None
    thinking_config: dict[str, Any] | None = None
    image_config: dict[str, Any] | None = None
    media_resolution: str | None = None
    audio_timestamp: bool | None = None


class GenerateContentRequest(msgspec.Struct, kw_only=True, rename="camel"):
    contents: list[Content] = []
    system_instruction: Content | None = None
    tools: list[dict[str, Any]] | None = None
    tool_config: ToolConfig | None = None
    generation_config: GenerationConfig | None = None
    safety_settings: list[dict[str, Any]] | None = None
    cached_content: str | None = None
    labels: dict[str, str] | None = None
    model: str | None = None  # countTokens' generateContentRequest names it; the path's wins
    service_tier: str | None = None
    store: bool | None = None


class CountRequest(msgspec.Struct, kw_only=True, rename="camel"):
    contents: list[Content] | None = None
    generate_content_request: GenerateContentRequest | None = None


@functools.cache
def type_info(kind: Any) -> Any:
    return msgspec.inspect.type_info(kind)


def _snake(name: str) -> str:
    return "".join(f"_{ch.lower()}" if ch.isupper() else ch for ch in name)


def proto_names(value: Any, t: Any) -> Any:
    """Google's JSON parser takes each field by its JSON name or by its proto name (the Python SDK sends
    `parameters_json_schema`): the snake_case keys of a known message become camelCase here. Free-form values
    (args, responses, schemas, labels) are left as they are: their keys are the client's."""
    if isinstance(t, msgspec.inspect.UnionType):
        want = msgspec.inspect.StructType if isinstance(value, dict) else msgspec.inspect.ListType
        t = next((x for x in t.types if isinstance(x, want)), None)
    if isinstance(t, msgspec.inspect.ListType) and isinstance(value, list):
        return [proto_names(v, t.item_type) for v in value]
    if not isinstance(t, msgspec.inspect.StructType) or not isinstance(value, dict):
        return value
    fields = {f.encode_name: f.type for f in t.fields}
    by_proto = {_snake(name): name for name in fields}
    out = {}
    for key, v in value.items():
        name = key if key in fields else by_proto.get(key, key)
        out[name] = proto_names(v, fields[name]) if name in fields else v
    return out


def _decode(body: bytes, kind: type) -> Any:
    if body:
        try:
            raw = msgspec.json.decode(body)
        except msgspec.DecodeError as exc:
            raise WireError("invalid_request", f"malformed JSON body: {exc}") from None
        except RecursionError:
            raise WireError("invalid_request", "the JSON body is nested too deeply") from None
        named = proto_names(raw, type_info(kind))
        if named != raw:
            body = msgspec.json.encode(named)
    return decode(body, kind)


def decode_request(body: bytes) -> GenerateContentRequest:
    return _decode(body, GenerateContentRequest)


def decode_count(body: bytes) -> GenerateContentRequest:
    """countTokens takes `contents`, or a whole `generateContentRequest`: either way one request to count."""
    c = _decode(body, CountRequest)
    if c.generate_content_request is not None:
        return c.generate_content_request
    return GenerateContentRequest(contents=c.contents or [])


def split_action(name: str) -> tuple[str, str]:
    """`models/{model}:{action}`'s path tail -> (model, action); a tail without an action is a model name."""
    model, _, action = name.strip("/").removeprefix("models/").rpartition(":")
    return (model, action) if model else (action, "")


# Fields the real API takes that fak accepts without acting on (named in x-fak-ignored).
IGNORED_FIELDS = ("safety_settings", "cached_content", "labels", "service_tier", "store")
IGNORED_GENERATION = ("thinking_config", "speech_config", "image_config", "media_resolution",
                      "enable_enhanced_civic_answers", "audio_timestamp")
DROPPED_PARTS = ("executable_code", "code_execution_result", "video_metadata")


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(w.title() for w in rest)


def ignored(r: GenerateContentRequest) -> list[str]:
    """What the served request lost: fields, hosted tools, dropped parts."""
    out = [_camel(f) for f in IGNORED_FIELDS if getattr(r, f) not in (None, [], {})]
    g = r.generation_config
    out += [f"generationConfig.{_camel(f)}" for f in IGNORED_GENERATION if g is not None and getattr(g, f) is not None]
    if r.tool_config is not None and r.tool_config.retrieval_config:
        out.append("toolConfig.retrievalConfig")
    # a tool's key is the client's text: quoted, so that it stays one token of an ASCII header
    out += sorted({f"tool:{quote(_camel(k), safe='')}" for t in r.tools or [] if isinstance(t, dict) for k in t
                   if k not in ("functionDeclarations", "function_declarations")})
    parts = [p for c in r.contents for p in c.parts]
    out += sorted({f"part:{_camel(f)}" for p in parts for f in DROPPED_PARTS if getattr(p, f) is not None})
    if any(p.thought for p in parts):
        out.append("part:thought")
    if any(p.thought_signature for p in parts):
        out.append("part:thoughtSignature")
    return out


# ---------------------------------------------------------------------------------------------------------
# contents -> the engine's conversation
# ---------------------------------------------------------------------------------------------------------


def response_text(fr: FunctionResponse) -> str:
    """A functionResponse as the tool result the model reads (and the guard screens; its block id is the hash
    of this): the one string of `{"output": "…"}` (Gemini CLI's shape) or any other one-string object, else
    the object as compact JSON; text parts of a multimodal response follow."""
    r = fr.response or {}
    values = list(r.values())
    text = values[0] if len(values) == 1 and isinstance(values[0], str) else (
        json.dumps(r, ensure_ascii=False, separators=(",", ":")) if r else "")
    texts = [p["text"] for p in fr.parts or [] if isinstance(p, dict) and isinstance(p.get("text"), str)]
    return "\n".join([text, *texts]) if texts else text


def _unreadable(p: Part, where: str, strict: bool) -> None:
    if strict and (p.inline_data is not None or p.file_data is not None):
        raise WireError("invalid_request", f"{where}: inlineData and fileData parts cannot be served by this model "
                                           "(it reads text only)", param=where)


class _Pairing:
    """Tool-call ids: a call keeps its own, or gets one; a response names its call, or takes the earliest
    unanswered call of its name (Gemini 2.x sends no ids)."""

    def __init__(self) -> None:
        self.open: list[ToolCall] = []
        self.n = 0

    def call(self, fc: FunctionCall) -> ToolCall:
        self.n += 1
        args = json.dumps(fc.args or {}, ensure_ascii=False)
        call = ToolCall(id=fc.id or f"call_{self.n}_{fc.name}", name=fc.name, arguments=args)
        self.open.append(call)
        return call

    def answer(self, fr: FunctionResponse) -> str:
        match = next((c for c in self.open if c.id == fr.id), None) if fr.id else None
        match = match or next((c for c in self.open if c.name == fr.name), None)
        if match is not None:
            self.open.remove(match)
            return match.id
        return fr.id or f"call_{fr.name}"


def to_messages(r: GenerateContentRequest, strict: bool = True) -> list[ChatMessage]:
    messages: list[ChatMessage] = []
    if r.system_instruction is not None:
        system = "\n\n".join(p.text for p in r.system_instruction.parts if p.text)
        if system:
            messages.append(ChatMessage(role="system", content=system))
    if not r.contents:
        raise WireError("invalid_request", "* GenerateContentRequest.contents: contents is not specified", param="contents")
    pairing = _Pairing()
    for i, c in enumerate(r.contents):
        where = f"contents[{i}]"
        role = c.role or "user"
        if role not in ("user", "model", "function"):
            raise WireError("invalid_request", f"{where}.role {c.role!r}: please use a valid role: user, model",
                            param=f"{where}.role")
        if role == "model":  # one answer's parts (stream chunks, replayed): text joined as it was sent
            text, calls = [], []
            for j, p in enumerate(c.parts):
                _unreadable(p, f"{where}.parts[{j}]", strict)
                if p.function_call is not None:
                    calls.append(pairing.call(p.function_call))
                elif p.text and not p.thought:
                    text.append(p.text)
            messages.append(ChatMessage(role="assistant", content="".join(text), tool_calls=calls))
            continue
        text = []
        for j, p in enumerate(c.parts):
            _unreadable(p, f"{where}.parts[{j}]", strict)
            if p.function_response is not None:
                if text:  # keep order: text that came before the result
                    messages.append(ChatMessage(role="user", content="\n\n".join(text)))
                    text = []
                fr = p.function_response
                content = response_text(fr)
                messages.append(ChatMessage(role="tool", content=content, tool_call_id=pairing.answer(fr), name=fr.name,
                                            block=block_id(content)))
            elif p.text and not p.thought:
                text.append(p.text)
        if text:
            messages.append(ChatMessage(role="user", content="\n\n".join(text)))
    name_tool_results(messages)
    if not any(m.role != "system" for m in messages):
        raise WireError("invalid_request", "contents has nothing for the model to read", param="contents")
    return messages


def to_tools(tools: list[dict[str, Any]] | None) -> list[ToolSpec]:
    """Function declarations; other tools (googleSearch, codeExecution, urlContext…) run on Google's side
    only: skipped here and named in x-fak-ignored."""
    out = []
    for i, t in enumerate(tools or []):
        if not isinstance(t, dict):
            raise WireError("invalid_request", f"tools[{i}] must be an object", param=f"tools[{i}]")
        raw = t.get("functionDeclarations") or t.get("function_declarations") or []
        try:
            declarations = msgspec.convert(proto_names(raw, type_info(list[FunctionDeclaration])), list[FunctionDeclaration])
        except msgspec.ValidationError as exc:
            raise WireError("invalid_request", f"tools[{i}].functionDeclarations: {exc}", param=f"tools[{i}]") from None
        for d in declarations:
            schema = d.parameters_json_schema if d.parameters_json_schema is not None else d.parameters
            if schema is not None and not isinstance(schema, dict):
                raise WireError("invalid_request", f"tools[{i}] {d.name!r}: parameters must be a schema object", param=f"tools[{i}]")
            out.append(ToolSpec(name=d.name, description=d.description or "",
                                parameters=json_schema(schema) if schema else {"type": "object", "properties": {}}))
    return out


def _tool_choice(config: ToolConfig | None, tools: list[ToolSpec]) -> tuple[str, str, list[ToolSpec]]:
    """(mode, name, the tools offered): ANY with allowedFunctionNames offers only those."""
    fcc = config.function_calling_config if config is not None else None
    mode = ((fcc.mode if fcc is not None else None) or "AUTO").upper()
    allowed = (fcc.allowed_function_names if fcc is not None else None) or []
    if mode not in ("AUTO", "ANY", "NONE", "VALIDATED", "MODE_UNSPECIFIED"):
        raise WireError("invalid_request", f"functionCallingConfig mode {mode!r} is not AUTO, ANY, NONE or VALIDATED",
                        param="toolConfig.functionCallingConfig.mode")
    if mode == "NONE" or not tools:
        if mode == "ANY":
            raise WireError("invalid_request", "functionCallingConfig mode ANY needs function declarations",
                            param="toolConfig.functionCallingConfig.mode")
        return "none", "", tools
    if mode != "ANY":
        return "auto", "", tools
    unknown = [n for n in allowed if n not in {t.name for t in tools}]
    if unknown:
        raise WireError("invalid_request", f"allowedFunctionNames names {unknown[0]!r}, which is not declared",
                        param="toolConfig.functionCallingConfig.allowedFunctionNames")
    if len(allowed) == 1:
        return "function", allowed[0], tools
    return "required", "", [t for t in tools if t.name in allowed] if allowed else tools


def _response_schema(g: GenerationConfig) -> dict[str, Any] | None:
    mime = (g.response_mime_type or "text/plain").lower()
    schema = g.response_json_schema if g.response_json_schema is not None else g.response_schema
    if mime == "text/plain":
        if schema is not None:
            raise WireError("invalid_request", "responseSchema needs responseMimeType application/json",
                            param="generationConfig.responseMimeType")
        return None
    if mime != "application/json":
        raise WireError("invalid_request", f"responseMimeType {g.response_mime_type!r} is not supported here "
                                           "(text/plain or application/json)", param="generationConfig.responseMimeType")
    if schema is None:
        return {}  # any JSON value
    if not isinstance(schema, dict):
        raise WireError("invalid_request", "responseJsonSchema must be a schema object", param="generationConfig.responseJsonSchema")
    return json_schema(schema)


def _sampling(g: GenerationConfig) -> Sampling:
    if g.candidate_count not in (None, 1):
        raise WireError("invalid_request", "candidateCount must be 1: this server returns one candidate",
                        param="generationConfig.candidateCount")
    for name in ("presence_penalty", "frequency_penalty"):
        if getattr(g, name):
            raise WireError("invalid_request", f"{_camel(name)} is not supported (must be 0 or absent)",
                            param=f"generationConfig.{_camel(name)}")
    if [m for m in g.response_modalities or [] if m.upper() != "TEXT"]:
        raise WireError("invalid_request", "responseModalities: this model answers in TEXT only",
                        param="generationConfig.responseModalities")
    stop = list(g.stop_sequences or [])
    if len(stop) > MAX_STOP_SEQUENCES:
        raise WireError("invalid_request", f"at most {MAX_STOP_SEQUENCES} stopSequences", param="generationConfig.stopSequences")
    top = g.logprobs or 0
    if top > MAX_LOGPROBS or (top and not g.response_logprobs):
        raise WireError("invalid_request", f"logprobs must be from 0 to {MAX_LOGPROBS}, with responseLogprobs true",
                        param="generationConfig.logprobs")
    temperature, top_p = sampling_range(g.temperature, g.top_p)
    return Sampling(max_tokens=g.max_output_tokens or DEFAULT_MAX_OUTPUT_TOKENS, temperature=temperature, top_p=top_p,
                    top_k=None if g.top_k is None else max(0, g.top_k), seed=g.seed, stop=stop,
                    logprobs=bool(g.response_logprobs), top_logprobs=top)


def to_bus(r: GenerateContentRequest, model: str, session: str, strict: bool = True) -> GenerateRequest:
    """strict: the request must be servable here (400 otherwise). Not strict (a Gemini upstream serves it as
    sent): only the conversation is read, for the guard."""
    tools = to_tools(r.tools) if strict else []
    req = GenerateRequest(request_id=f"gen_{uuid.uuid4().hex}", model=model, messages=to_messages(r, strict),
                          session=session)
    g = r.generation_config or GenerationConfig()
    if not strict:
        req.sampling = Sampling(max_tokens=g.max_output_tokens or DEFAULT_MAX_OUTPUT_TOKENS)
        return req
    req.tool_choice, req.tool_choice_name, req.tools = _tool_choice(r.tool_config, tools)
    req.response_schema = _response_schema(g)
    req.sampling = _sampling(g)
    return req


# ---------------------------------------------------------------------------------------------------------
# The response
# ---------------------------------------------------------------------------------------------------------

FINISH = {"stop": "STOP", "tool_calls": "STOP", "length": "MAX_TOKENS"}


def usage_of(done: GenerateDone) -> dict[str, Any]:
    u = done.usage
    return {"promptTokenCount": u.prompt_tokens, "candidatesTokenCount": u.completion_tokens,
            "totalTokenCount": u.prompt_tokens + u.completion_tokens, "cachedContentTokenCount": u.cached_tokens,
            "promptTokensDetails": [{"modality": "TEXT", "tokenCount": u.prompt_tokens}],
            "candidatesTokensDetails": [{"modality": "TEXT", "tokenCount": u.completion_tokens}]}


def call_part(c: ToolCall) -> dict[str, Any]:
    try:
        args = json.loads(c.arguments or "{}")
    except ValueError:
        args = {}
    return {"functionCall": {"id": c.id, "name": c.name, "args": args if isinstance(args, dict) else {}}}


def logprobs_result(entries: list[TokenLogprob]) -> dict[str, Any]:
    def one(t: TokenLogprob) -> dict[str, Any]:
        return {"token": t.text, "tokenId": t.id, "logProbability": t.logprob}

    return {"topCandidates": [{"candidates": [one(a) for a in t.top]} for t in entries],
            "chosenCandidates": [one(t) for t in entries]}


@dataclass
class Turn:
    """One request as the pipeline runs it: the bus request, and the model id the client named."""

    req: GenerateRequest
    model: str
    logprobs: list[TokenLogprob] = field(default_factory=list)

    def chunk(self, parts: list[dict[str, Any]], done: GenerateDone | None = None,
              logprobs: list[TokenLogprob] | None = None) -> dict[str, Any]:
        candidate: dict[str, Any] = {"content": {"parts": parts, "role": "model"}, "index": 0}
        if logprobs is not None and self.req.sampling.logprobs:
            candidate["logprobsResult"] = logprobs_result(logprobs)
            if logprobs:
                candidate["avgLogprobs"] = sum(t.logprob for t in logprobs) / len(logprobs)
        out: dict[str, Any] = {"candidates": [candidate]}
        if done is not None:
            candidate["finishReason"] = FINISH.get(done.finish_reason, "STOP")
            out["usageMetadata"] = usage_of(done)
        out["modelVersion"] = self.model
        out["responseId"] = self.req.request_id
        return out


async def response(turn: Turn, replies: AsyncIterator[Any]) -> dict[str, Any]:
    text: list[str] = []
    logprobs: list[TokenLogprob] = []
    async for r in replies:
        if isinstance(r, TokenChunk):
            text.append(r.text)
            logprobs.extend(r.logprobs)
        elif isinstance(r, GenerateDone):
            body = "".join(text)
            parts = [{"text": body}] if body or not r.tool_calls else []
            return turn.chunk(parts + [call_part(c) for c in r.tool_calls], r, logprobs)
    raise WireError("internal", "engine stream ended without a final message")


def sse_event(obj: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode() + b"\r\n\r\n"


class Framing:
    """How stream chunks are written: SSE events (`alt=sse`), or the elements of one JSON array."""

    def __init__(self, sse: bool):
        self.sse, self.n = sse, 0

    def __call__(self, obj: dict[str, Any]) -> bytes:
        if self.sse:
            return sse_event(obj)
        head = b"[" if self.n == 0 else b",\r\n"
        self.n += 1
        return head + json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode()

    def end(self) -> bytes:
        return b"" if self.sse else (b"]" if self.n else b"[]")


async def stream(turn: Turn, first: Accepted, replies: AsyncIterator[Any], sse: bool = True) -> AsyncIterator[bytes]:
    out = Framing(sse)
    pending: tuple[str, list[TokenLogprob]] | None = None  # the last text chunk, held to carry the finish
    try:
        async for r in replies:
            if isinstance(r, TokenChunk) and (r.text or r.logprobs):
                if pending is not None:
                    yield out(turn.chunk([{"text": pending[0]}], logprobs=pending[1]))
                pending = (r.text, list(r.logprobs))
            elif isinstance(r, GenerateDone):
                text, logprobs = pending if pending is not None else ("", [])
                parts = [{"text": text}] if text or not r.tool_calls else []
                yield out(turn.chunk(parts + [call_part(c) for c in r.tool_calls], r, logprobs))
                tail = out.end()
                if tail:
                    yield tail
                return
    except WireError as err:
        yield out(err.google()[1])
        tail = out.end()
        if tail:
            yield tail
        return
    raise WireError("internal", "engine stream ended without a final message")


def stream_error(err: WireError) -> bytes:
    return sse_event(err.google()[1])


# ---------------------------------------------------------------------------------------------------------
# Models
# ---------------------------------------------------------------------------------------------------------


def model_object(name: str, context_length: int = 0) -> dict[str, Any]:
    """A served model as Google lists one (`name` is `models/{id}`)."""
    return {"name": f"models/{name}", "baseModelId": name, "version": "fak", "displayName": name,
            "description": f"{name}, served through fak", "inputTokenLimit": context_length or 8192,
            "outputTokenLimit": context_length or DEFAULT_MAX_OUTPUT_TOKENS,
            "supportedGenerationMethods": ["generateContent", "countTokens"], "temperature": 1.0, "maxTemperature": 2.0,
            "topP": 1.0, "topK": 0}
