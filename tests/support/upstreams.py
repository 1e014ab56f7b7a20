"""Scripted upstreams: small real HTTP servers that speak the Anthropic, OpenAI and Gemini wires.

A test points fak (or an SDK, or a real client) at one of them, scripts what it answers, and reads back
exactly what it received:

    with AnthropicUpstream([tool_use("Bash", {"command": "echo hi"}), text("done")]) as up:
        client = anthropic.Anthropic(base_url=up.url, api_key="k")
        ...
        assert up.requests[0].json()["model"] == "claude-x"

Each model call (POST /v1/messages, POST /v1/chat/completions, POST …/models/{m}:generateContent) takes the next reply of the script; other
endpoints (count_tokens, /v1/models, anything unknown) answer without consuming one. A reply is a
`Message` (text, tool-use and thinking blocks), an `Error` (status, body, retry-after), a `Delay` around
another reply, or a `Cut` (the response is dropped midway). Instead of a list the script can be a function
of the recorded request, for clients that make side calls in an order a test should not depend on.

Every request is recorded as received (raw body bytes, header list, path, query), also unknown paths and
requests that get an error. The server is uvicorn on a socket bound to 127.0.0.1:0 in a background thread;
leaving the context stops it and joins the thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import uvicorn

# ===================================================================================== the script


@dataclass(frozen=True)
class Usage:
    """Token counts reported with a message; OpenAI gets cache_read as prompt_tokens_details.cached_tokens."""

    input_tokens: int = 10
    output_tokens: int = 5
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0


@dataclass(frozen=True)
class Text:
    text: str


@dataclass(frozen=True)
class ToolUse:
    name: str
    input: dict[str, Any]
    id: str | None = None  # None: a deterministic toolu_/call_ id per upstream


@dataclass(frozen=True)
class Thinking:
    """An Anthropic thinking block (dropped on the OpenAI wire)."""

    thinking: str
    signature: str = "c2NyaXB0ZWQ="


Block = Text | ToolUse | Thinking


@dataclass(frozen=True)
class Message:
    blocks: tuple[Block, ...]
    stop_reason: str | None = None  # None: "tool_use" if a block is a tool use, else "end_turn"
    usage: Usage | None = None  # None: the upstream's default usage
    pace_s: float = 0.0  # pause between stream events, for tests that watch deltas arrive


@dataclass(frozen=True)
class Error:
    """A fixed answer: an error status with its body (the side endpoints use it with status 200 too)."""

    status: int
    body: Any = None  # None: the wire's error object; a str or bytes is sent as is, anything else as JSON
    retry_after: str | None = None
    headers: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Delay:
    """Wait before answering with `then` (the wait ends early if the client goes away or the server stops)."""

    seconds: float
    then: Reply


@dataclass(frozen=True)
class Cut:
    """Start `then` and drop the connection midway: after `after_events` stream events (a ping counts), or
    after half the JSON body of a non-stream reply."""

    then: Message
    after_events: int = 2


Reply = Message | Error | Delay | Cut
Script = Iterable[Reply] | Callable[["RecordedRequest"], Reply]


def text(s: str, **kw: Any) -> Message:
    return Message((Text(s),), **kw)


def tool_use(name: str, input: dict[str, Any], id: str | None = None, **kw: Any) -> Message:
    return Message((ToolUse(name, input, id),), **kw)


def error(status: int, body: Any = None, retry_after: str | None = None) -> Error:
    return Error(status, body, retry_after)


# ============================================================================ what was received


@dataclass
class RecordedRequest:
    method: str
    path: str  # without the query
    query: str  # raw query string, "" if none ("beta=true")
    headers: list[tuple[str, str]]  # in order, duplicates kept (names lower-cased by the HTTP parser)
    body: bytes
    disconnected: bool = False  # the client went away before the response was complete

    def header(self, name: str) -> str | None:
        name = name.lower()
        return next((v for k, v in self.headers if k == name), None)

    def json(self) -> Any:
        return json.loads(self.body)


# ==================================================================================== the servers


class _CutStream(Exception):
    """Raised inside the app to make uvicorn drop the connection; filtered from its error log."""


class _DropCutLogs(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], _CutStream))


logging.getLogger("uvicorn.error").addFilter(_DropCutLogs())


class ScriptedUpstream:
    """The server shared by both wires: recording, the script, the thread. Subclasses encode the wire."""

    model_paths: frozenset[str] = frozenset()

    def __init__(self, replies: Script = (), *, usage: Usage = Usage(), default: Reply | None = None):
        self.usage = usage
        self.default = default  # the reply once the script is exhausted; None: a 500 saying so
        self._lock = threading.Lock()
        self._requests: list[RecordedRequest] = []
        self._responder = replies if callable(replies) else None
        self._replies: list[Reply] = [] if callable(replies) else list(replies)
        self._ids = 0
        self._loop: asyncio.AbstractEventLoop | None = None  # the server thread's loop, once a request came
        self._live: set[asyncio.Event] = set()  # per in-flight request: set when it should give up
        self._server: uvicorn.Server | None = None
        self._sock: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self.url = ""

    # ------------------------------------------------------------------------------ test-side API

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._requests)

    def requests_to(self, path: str) -> list[RecordedRequest]:
        return [r for r in self.requests if r.path == path]

    def script(self, *replies: Reply) -> None:
        """Append replies to the script."""
        with self._lock:
            self._replies.extend(replies)

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._replies)

    def __enter__(self) -> ScriptedUpstream:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self, timeout: float = 10.0) -> ScriptedUpstream:
        sock = socket.socket()
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # accepted sockets inherit it: no 40 ms ACK waits
        sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        config = uvicorn.Config(self._app, interface="asgi3", lifespan="off", log_config=None, log_level="warning",
                                access_log=False, proxy_headers=False, timeout_graceful_shutdown=2)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [sock]},
                                        name=f"{type(self).__name__}:{self.url}", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"{type(self).__name__} did not start on {self.url}")
            time.sleep(0.01)
        self._sock = sock
        return self

    def stop(self) -> None:
        with self._lock:
            if self._loop is not None and self._live:
                live = list(self._live)
                self._loop.call_soon_threadsafe(lambda: [g.set() for g in live])  # end pending delays now
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)
            if self._thread.is_alive():
                raise RuntimeError(f"{self._thread.name} did not stop")
        self._server = self._thread = self._loop = None
        if self._sock is not None:
            self._sock.close()  # the asyncio server closed it already unless startup failed
            self._sock = None

    # ---------------------------------------------------------------------------------- the app

    async def _app(self, scope: dict, receive: Callable, send: Callable) -> None:
        assert scope["type"] == "http"
        body = bytearray()
        while True:
            event = await receive()
            body += event.get("body", b"")
            if not event.get("more_body"):
                break
        req = RecordedRequest(method=scope["method"], path=scope["path"],
                              query=scope.get("query_string", b"").decode("latin-1"),
                              headers=[(k.decode("latin-1"), v.decode("latin-1")) for k, v in scope["headers"]],
                              body=bytes(body))
        gone = asyncio.Event()
        with self._lock:
            self._requests.append(req)
            self._loop = asyncio.get_running_loop()
            self._live.add(gone)
        watcher = asyncio.create_task(self._watch_disconnect(receive, req, gone))
        try:
            await self._respond(req, send, gone)
        finally:
            watcher.cancel()
            with self._lock:
                self._live.discard(gone)

    async def _watch_disconnect(self, receive: Callable, req: RecordedRequest, gone: asyncio.Event) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        req.disconnected = True
        gone.set()

    async def _respond(self, req: RecordedRequest, send: Callable, gone: asyncio.Event) -> None:
        if self.is_model_call(req):
            reply = self._next_reply(req)
        else:
            reply = self.other(req)
        while isinstance(reply, Delay):
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(gone.wait(), reply.seconds)
            if gone.is_set():  # the client left (this answer goes nowhere), or the server is stopping
                reply = Error(503, self.error_body(503, "scripted upstream: stopped during a delay"))
                break
            reply = reply.then
        payload = _json_object(req.body)
        streamed = self.streams(req, payload)
        match reply:
            case Error():
                await self._send_error(send, reply)
            case Message() if streamed:
                await self._send_stream(send, self.events(reply, req, payload), reply.pace_s, None, gone,
                                        self.stream_media_type(req))
            case Message():
                await _send_json(send, 200, self.body(reply, req, payload))
            case Cut() if streamed:
                await self._send_stream(send, self.events(reply.then, req, payload), reply.then.pace_s,
                                        reply.after_events, gone, self.stream_media_type(req))
            case Cut():
                raw = json.dumps(self.body(reply.then, req, payload)).encode()
                await send({"type": "http.response.start", "status": 200,
                            "headers": [(b"content-type", b"application/json")]})
                await send({"type": "http.response.body", "body": raw[: len(raw) // 2], "more_body": True})
                raise _CutStream

    def _next_reply(self, req: RecordedRequest) -> Reply:
        if self._responder is not None:
            return self._responder(req)  # outside the lock: a responder may read .requests
        with self._lock:
            if self._replies:
                return self._replies.pop(0)
        if self.default is not None:
            return self.default
        return Error(500, self.error_body(500, "scripted upstream: the script has no reply left"))

    async def _send_error(self, send: Callable, e: Error) -> None:
        body = self.error_body(e.status, f"scripted error {e.status}") if e.body is None else e.body
        raw = body if isinstance(body, bytes) else body.encode() if isinstance(body, str) else json.dumps(body).encode()
        headers = [(b"content-type", b"application/json")]
        if e.retry_after is not None:
            headers.append((b"retry-after", e.retry_after.encode()))
        headers += [(k.encode(), v.encode()) for k, v in e.headers]
        await send({"type": "http.response.start", "status": e.status, "headers": headers})
        await send({"type": "http.response.body", "body": raw})

    async def _send_stream(self, send: Callable, events: Iterator[bytes], pace_s: float, cut_after: int | None,
                           gone: asyncio.Event, media_type: str = "text/event-stream") -> None:
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", media_type.encode()), (b"cache-control", b"no-cache")]})
        for n, event in enumerate(events):
            if cut_after is not None and n >= cut_after:
                raise _CutStream
            if gone.is_set():
                return
            await send({"type": "http.response.body", "body": event, "more_body": True})
            if pace_s:
                await asyncio.sleep(pace_s)
        await send({"type": "http.response.body", "body": b""})

    def next_id(self, prefix: str) -> str:
        with self._lock:
            self._ids += 1
            return f"{prefix}{self._ids:04d}"

    # -------------------------------------------------------------------- what a wire must define

    def is_model_call(self, req: RecordedRequest) -> bool:
        return req.method == "POST" and req.path in self.model_paths

    def streams(self, req: RecordedRequest, payload: dict) -> bool:
        """Whether the reply to a model call is a stream (the Anthropic and OpenAI wires: `stream` in the body)."""
        return bool(payload.get("stream"))

    def stream_media_type(self, req: RecordedRequest) -> str:
        return "text/event-stream"

    def events(self, m: Message, req: RecordedRequest, payload: dict) -> Iterator[bytes]:
        return self.stream_events(m, payload)

    def body(self, m: Message, req: RecordedRequest, payload: dict) -> dict:
        return self.encode(m, payload)

    def other(self, req: RecordedRequest) -> Reply:
        """The answer to anything that is not a model call: by default a 404 in the wire's shape."""
        return Error(404, self.error_body(404, f"scripted upstream: no route for {req.method} {req.path}"))

    def error_body(self, status: int, message: str) -> Any:
        raise NotImplementedError

    def encode(self, m: Message, request: dict) -> dict:
        raise NotImplementedError

    def stream_events(self, m: Message, request: dict) -> Iterator[bytes]:
        raise NotImplementedError


def _json_object(body: bytes) -> dict:
    """The request as a JSON object, or {} for anything else (the reply then ignores `stream` and `model`)."""
    try:
        payload = json.loads(body)
    except ValueError:
        return {}
    return payload if isinstance(payload, dict) else {}


async def _send_json(send: Callable, status: int, obj: Any) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": json.dumps(obj).encode()})


def _pieces(s: str, size: int = 0) -> list[str]:
    """Split text into word-sized deltas (or `size`-char chunks for JSON), never none for a non-empty s."""
    if size:
        return [s[i:i + size] for i in range(0, len(s), size)]
    return re.findall(r"\s*\S+\s*|\s+", s) or [s]


# ============================================================================== Anthropic wire

_ANTHROPIC_ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                          404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error",
                          500: "api_error", 529: "overloaded_error"}


class AnthropicUpstream(ScriptedUpstream):
    """POST /v1/messages (JSON or SSE), POST /v1/messages/count_tokens; the query (?beta=true) is ignored."""

    model_paths = frozenset({"/v1/messages"})

    def __init__(self, replies: Script = (), *, count_tokens: int | None = None, **kw: Any):
        super().__init__(replies, **kw)
        self.count_tokens = count_tokens  # None: a quarter of the request's byte length

    def other(self, req: RecordedRequest) -> Reply:
        if req.method == "POST" and req.path == "/v1/messages/count_tokens":
            n = self.count_tokens if self.count_tokens is not None else max(1, len(req.body) // 4)
            return Error(200, {"input_tokens": n})
        return super().other(req)

    def error_body(self, status: int, message: str) -> Any:
        kind = _ANTHROPIC_ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
        return {"type": "error", "error": {"type": kind, "message": message}}

    def _blocks(self, m: Message) -> list[dict]:
        out: list[dict] = []
        for b in m.blocks:
            match b:
                case Text():
                    out.append({"type": "text", "text": b.text})
                case ToolUse():
                    out.append({"type": "tool_use", "id": b.id or self.next_id("toolu_scripted_"),
                                "name": b.name, "input": b.input})
                case Thinking():
                    out.append({"type": "thinking", "thinking": b.thinking, "signature": b.signature})
        return out

    def _usage(self, m: Message) -> dict:
        u = m.usage or self.usage
        return {"input_tokens": u.input_tokens, "cache_creation_input_tokens": u.cache_creation_input_tokens,
                "cache_read_input_tokens": u.cache_read_input_tokens, "output_tokens": u.output_tokens}

    def encode(self, m: Message, request: dict, content: list[dict] | None = None) -> dict:
        return {"id": self.next_id("msg_scripted_"), "type": "message", "role": "assistant",
                "model": request.get("model", "scripted"),
                "content": self._blocks(m) if content is None else content,
                "stop_reason": _stop_reason(m), "stop_sequence": None, "usage": self._usage(m)}

    def stream_events(self, m: Message, request: dict) -> Iterator[bytes]:
        blocks = self._blocks(m)
        start = self.encode(m, request, content=[])
        start["stop_reason"] = None
        start["usage"] = {**start["usage"], "output_tokens": 1}
        yield _sse("message_start", {"type": "message_start", "message": start})
        yield _sse("ping", {"type": "ping"})
        for i, b in enumerate(blocks):
            match b["type"]:
                case "text":
                    opened, deltas = {"type": "text", "text": ""}, [
                        {"type": "text_delta", "text": p} for p in _pieces(b["text"])]
                case "tool_use":
                    opened, deltas = {**b, "input": {}}, [
                        {"type": "input_json_delta", "partial_json": p} for p in _pieces(json.dumps(b["input"]), 8)]
                case _:
                    opened = {"type": "thinking", "thinking": "", "signature": ""}
                    deltas = [{"type": "thinking_delta", "thinking": p} for p in _pieces(b["thinking"])]
                    deltas.append({"type": "signature_delta", "signature": b["signature"]})
            yield _sse("content_block_start", {"type": "content_block_start", "index": i, "content_block": opened})
            for d in deltas:
                yield _sse("content_block_delta", {"type": "content_block_delta", "index": i, "delta": d})
            yield _sse("content_block_stop", {"type": "content_block_stop", "index": i})
        yield _sse("message_delta", {"type": "message_delta",
                                     "delta": {"stop_reason": _stop_reason(m), "stop_sequence": None},
                                     "usage": {"output_tokens": (m.usage or self.usage).output_tokens}})
        yield _sse("message_stop", {"type": "message_stop"})


def _stop_reason(m: Message) -> str:
    if m.stop_reason is not None:
        return m.stop_reason
    return "tool_use" if any(isinstance(b, ToolUse) for b in m.blocks) else "end_turn"


def _sse(event: str, data: dict) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


# ================================================================================= OpenAI wire


class OpenAIUpstream(ScriptedUpstream):
    """POST /v1/chat/completions (JSON or SSE chat.completion.chunk ... data: [DONE]), GET /v1/models."""

    model_paths = frozenset({"/v1/chat/completions"})

    def __init__(self, replies: Script = (), *, models: tuple[str, ...] = ("scripted",), **kw: Any):
        super().__init__(replies, **kw)
        self.models = models

    def other(self, req: RecordedRequest) -> Reply:
        if req.method == "GET" and req.path == "/v1/models":
            return Error(200, {"object": "list", "data": [
                {"id": m, "object": "model", "created": 0, "owned_by": "scripted"} for m in self.models]})
        return super().other(req)

    def error_body(self, status: int, message: str) -> Any:
        kind = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error",
                429: "rate_limit_exceeded"}.get(status, "server_error")
        return {"error": {"message": message, "type": kind, "param": None, "code": kind}}

    def _calls(self, m: Message) -> list[dict]:
        return [{"id": b.id or self.next_id("call_scripted_"), "type": "function",
                 "function": {"name": b.name, "arguments": json.dumps(b.input)}}
                for b in m.blocks if isinstance(b, ToolUse)]

    def _usage(self, m: Message) -> dict:
        u = m.usage or self.usage
        return {"prompt_tokens": u.input_tokens, "completion_tokens": u.output_tokens,
                "total_tokens": u.input_tokens + u.output_tokens,
                "prompt_tokens_details": {"cached_tokens": u.cache_read_input_tokens}}

    def _finish(self, m: Message) -> str:
        reason = _stop_reason(m)
        return {"end_turn": "stop", "tool_use": "tool_calls", "max_tokens": "length",
                "stop_sequence": "stop"}.get(reason, reason)

    def encode(self, m: Message, request: dict) -> dict:
        content = "".join(b.text for b in m.blocks if isinstance(b, Text)) or None
        message: dict[str, Any] = {"role": "assistant", "content": content, "refusal": None}
        if calls := self._calls(m):
            message["tool_calls"] = calls
        return {"id": self.next_id("chatcmpl-scripted-"), "object": "chat.completion", "created": int(time.time()),
                "model": request.get("model", "scripted"),
                "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": self._finish(m)}],
                "usage": self._usage(m)}

    def stream_events(self, m: Message, request: dict) -> Iterator[bytes]:
        head = {"id": self.next_id("chatcmpl-scripted-"), "object": "chat.completion.chunk",
                "created": int(time.time()), "model": request.get("model", "scripted")}

        def chunk(delta: dict, finish: str | None = None) -> bytes:
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
            return b"data: " + json.dumps({**head, "choices": [choice]}).encode() + b"\n\n"

        yield chunk({"role": "assistant", "content": ""})
        calls = iter(self._calls(m))
        n_call = 0
        for b in m.blocks:
            if isinstance(b, Text):
                for p in _pieces(b.text):
                    yield chunk({"content": p})
            elif isinstance(b, ToolUse):
                call = next(calls)
                yield chunk({"tool_calls": [{"index": n_call, "id": call["id"], "type": "function",
                                             "function": {"name": call["function"]["name"], "arguments": ""}}]})
                for p in _pieces(call["function"]["arguments"], 8):
                    yield chunk({"tool_calls": [{"index": n_call, "function": {"arguments": p}}]})
                n_call += 1
        yield chunk({}, self._finish(m))
        if (request.get("stream_options") or {}).get("include_usage"):
            yield b"data: " + json.dumps({**head, "choices": [], "usage": self._usage(m)}).encode() + b"\n\n"
        yield b"data: [DONE]\n\n"


# ================================================================================= Gemini wire

_GEMINI_STATUS = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 404: "NOT_FOUND",
                  429: "RESOURCE_EXHAUSTED", 500: "INTERNAL", 503: "UNAVAILABLE", 504: "DEADLINE_EXCEEDED"}
_GEMINI_MODEL_CALL = re.compile(r"^/v1(beta)?/models/[^/:]+:(generateContent|streamGenerateContent)$")


class GeminiUpstream(ScriptedUpstream):
    """The Gemini API (generativelanguage.googleapis.com): POST /v1beta/models/{model}:generateContent and
    :streamGenerateContent (SSE with ?alt=sse, else one JSON array sent piece by piece), :countTokens,
    GET /v1beta/models and /v1beta/models/{model}; also under /v1/. The key arrives as x-goog-api-key or ?key=.

    A ToolUse becomes a `functionCall` part (with `id` only when the block names one, as Gemini 2.x sends
    none), a Thinking block a `thought: true` text part; every reply's finishReason is STOP unless the
    message's stop_reason says max_tokens."""

    def __init__(self, replies: Script = (), *, models: tuple[str, ...] = ("gemini-2.5-flash",),
                 count_tokens: int | None = None, **kw: Any):
        super().__init__(replies, **kw)
        self.models, self.count_tokens = models, count_tokens

    def is_model_call(self, req: RecordedRequest) -> bool:
        return req.method == "POST" and bool(_GEMINI_MODEL_CALL.match(req.path))

    def streams(self, req: RecordedRequest, payload: dict) -> bool:
        return req.path.endswith(":streamGenerateContent")

    def stream_media_type(self, req: RecordedRequest) -> str:
        return "text/event-stream" if "alt=sse" in req.query else "application/json"

    def model_of(self, req: RecordedRequest) -> str:
        return req.path.rsplit("/", 1)[-1].split(":", 1)[0]

    def _model(self, name: str) -> dict:
        return {"name": f"models/{name}", "version": "001", "displayName": name, "description": "scripted",
                "inputTokenLimit": 1048576, "outputTokenLimit": 65536,
                "supportedGenerationMethods": ["generateContent", "countTokens"], "temperature": 1, "topP": 0.95,
                "topK": 64, "maxTemperature": 2, "thinking": True}

    def other(self, req: RecordedRequest) -> Reply:
        path = re.sub(r"^/v1(beta)?", "", req.path)
        if req.method == "POST" and path.endswith(":countTokens"):
            n = self.count_tokens if self.count_tokens is not None else max(1, len(req.body) // 4)
            return Error(200, {"totalTokens": n, "promptTokensDetails": [{"modality": "TEXT", "tokenCount": n}]})
        if req.method == "GET" and path == "/models":
            return Error(200, {"models": [self._model(m) for m in self.models]})
        if req.method == "GET" and path.startswith("/models/") and path[len("/models/"):] in self.models:
            return Error(200, self._model(path[len("/models/"):]))
        return super().other(req)

    def error_body(self, status: int, message: str) -> Any:
        return {"error": {"code": status, "message": message,
                          "status": _GEMINI_STATUS.get(status, "INTERNAL" if status >= 500 else "INVALID_ARGUMENT")}}

    def _parts(self, m: Message) -> list[dict]:
        out: list[dict] = []
        for b in m.blocks:
            match b:
                case Text():
                    out.append({"text": b.text})
                case ToolUse():
                    call: dict[str, Any] = {"name": b.name, "args": b.input}
                    if b.id:
                        call["id"] = b.id
                    out.append({"functionCall": call})
                case Thinking():
                    out.append({"text": b.thinking, "thought": True})
        return out

    def _usage(self, m: Message) -> dict:
        u = m.usage or self.usage
        prompt = u.input_tokens + u.cache_read_input_tokens
        usage = {"promptTokenCount": prompt, "candidatesTokenCount": u.output_tokens,
                 "totalTokenCount": prompt + u.output_tokens,
                 "promptTokensDetails": [{"modality": "TEXT", "tokenCount": prompt}]}
        if u.cache_read_input_tokens:
            usage["cachedContentTokenCount"] = u.cache_read_input_tokens
        return usage

    def _finish(self, m: Message) -> str:
        return "MAX_TOKENS" if m.stop_reason == "max_tokens" else "STOP"

    def _response(self, parts: list[dict], model: str, finish: str | None, usage: dict | None) -> dict:
        candidate: dict[str, Any] = {"content": {"parts": parts, "role": "model"}, "index": 0}
        if finish:
            candidate["finishReason"] = finish
        out: dict[str, Any] = {"candidates": [candidate], "modelVersion": model, "responseId": self.next_id("scripted-")}
        if usage:
            out["usageMetadata"] = usage
        return out

    def encode(self, m: Message, request: dict) -> dict:
        return self._response(self._parts(m), "scripted", self._finish(m), self._usage(m))

    def body(self, m: Message, req: RecordedRequest, payload: dict) -> dict:
        return {**self.encode(m, payload), "modelVersion": self.model_of(req)}

    def events(self, m: Message, req: RecordedRequest, payload: dict) -> Iterator[bytes]:
        model = self.model_of(req)
        pieces: list[dict] = []
        for part in self._parts(m):
            if "text" in part:
                pieces += [{**part, "text": p} for p in _pieces(part["text"])]
            else:
                pieces.append(part)  # Gemini sends a function call whole, in one chunk
        chunks = [self._response([p], model, None, None) for p in pieces] or [self._response([{"text": ""}], model, None, None)]
        chunks[-1]["candidates"][0]["finishReason"] = self._finish(m)
        chunks[-1]["usageMetadata"] = self._usage(m)
        if "alt=sse" in req.query:
            for c in chunks:
                yield b"data: " + json.dumps(c).encode() + b"\r\n\r\n"
            return
        for i, c in enumerate(chunks):  # the JSON array, one element a write
            yield (b"[" if i == 0 else b",\r\n") + json.dumps(c).encode()
        yield b"]"


__all__ = ["AnthropicUpstream", "Cut", "Delay", "Error", "GeminiUpstream", "Message", "OpenAIUpstream", "RecordedRequest", "Reply",
           "ScriptedUpstream", "Text", "Thinking", "ToolUse", "Usage", "error", "text", "tool_use"]
