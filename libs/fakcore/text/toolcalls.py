"""Tool calls in model output: which syntax a model uses, and parsing it (whole or while streaming).

Styles (see `chat.ChatTemplate.tool_style`):
- "hermes":  `<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>` (Qwen2.5, Hermes); several blocks
             may follow each other, and content may come before them.
- "fak":     fak's own format for templates without tool support (documented in `chat`), the same
             `<tool_call>` JSON on one line: parsed exactly like "hermes", constrained without the newlines.
- "llama3":  the whole reply is `{"name": ..., "parameters": {...}}` (optionally after `<|python_tag|>`,
             several separated by ";").
- "mistral": `[TOOL_CALLS] [{"name": ..., "arguments": {...}, "id": ...}, ...]` to the end of the reply.
             `[TOOL_CALLS]` is a special token in Mistral vocabularies: decode with skip_special=False.

Malformed JSON inside a tool-call marker is never an error: that text stays content.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from .chat import ChatTemplate

STYLES = ("hermes", "fak", "llama3", "mistral")


@dataclass(frozen=True)
class ParsedCall:
    name: str
    arguments: str  # a JSON object, as text
    id: str | None = None  # the call id when the model writes one (mistral)


@dataclass(frozen=True)
class StreamEvent:
    kind: Literal["content", "tool_call"]
    text: str  # content text, or the raw text of the tool call
    call: ParsedCall | None = None


def detect_style(template: ChatTemplate | None) -> str:
    """The tool-call syntax to expect from a model rendered with this template."""
    return template.tool_style if template is not None else "fak"


# How a constrained call is written (constrain.Grammar.tool_call / .calls): the text before its JSON object,
# the object with `", "` and `": "` separators (as json.dumps writes it), the text after it.
CALL_OPEN = {"hermes": "<tool_call>\n", "fak": "<tool_call>", "llama3": "", "mistral": "[TOOL_CALLS] ["}
CALL_CLOSE = {"hermes": "\n</tool_call>", "fak": "</tool_call>", "llama3": "", "mistral": "]"}
ARGUMENTS_KEY = {"hermes": "arguments", "fak": "arguments", "llama3": "parameters", "mistral": "arguments"}


def call_opening(style: str, name: str) -> str:
    """The text of a constrained call of `name` up to its arguments object, in the style's syntax."""
    return f'{CALL_OPEN[style]}{{"name": {json.dumps(name, ensure_ascii=False)}, "{ARGUMENTS_KEY[style]}": '


def freeform_opening(style: str, name: str, key: str) -> str:
    """The text of a custom (freeform) tool call up to where its raw input begins: the opening of its one
    string argument `key` (Grammar.calls writes the input after it, unescaped, to the end of the output)."""
    return f'{call_opening(style, name)}{{{json.dumps(key)}: "'


def parse_tool_calls(text: str, style: str) -> tuple[str, list[ParsedCall]]:
    """(content, calls) from a finished reply. When there are calls the content is stripped of the
    whitespace that separated it from them."""
    streamer = ToolCallStreamer(style)
    events = streamer.push(text) + streamer.finish()
    content = "".join(e.text for e in events if e.kind == "content")
    calls = [e.call for e in events if e.call is not None]
    return (content.strip() if calls else content), calls


# ---- JSON -> calls ---------------------------------------------------------------------------------------


def _call_from_object(obj: Any, args_key: str) -> ParsedCall | None:
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or not obj["name"]:
        return None
    args = obj.get(args_key, obj.get("arguments", obj.get("parameters", {})))
    if isinstance(args, str):  # double-encoded arguments
        try:
            args = json.loads(args)
        except json.JSONDecodeError:
            return None
    if not isinstance(args, dict):
        return None
    call_id = obj.get("id")
    return ParsedCall(obj["name"], json.dumps(args, ensure_ascii=False), call_id if isinstance(call_id, str) else None)


def _json_values(text: str, separators: str = "") -> list[Any] | None:
    """Every JSON value in `text`, separated by whitespace (and `separators`); None if anything else is there."""
    decoder = json.JSONDecoder()
    values, pos = [], 0
    while True:
        while pos < len(text) and (text[pos].isspace() or text[pos] in separators):
            pos += 1
        if pos == len(text):
            return values
        try:
            value, pos = decoder.raw_decode(text, pos)
        except json.JSONDecodeError:
            return None
        values.append(value)


def _calls_from_json(text: str, args_key: str, separators: str = "") -> list[ParsedCall] | None:
    values = _json_values(text, separators)
    if not values:
        return None
    objects = []
    for v in values:
        objects.extend(v if isinstance(v, list) else [v])
    calls = [_call_from_object(o, args_key) for o in objects]
    if not calls or any(c is None for c in calls):
        return None
    return calls  # type: ignore[return-value]


# ---- streaming -------------------------------------------------------------------------------------------


def _held_suffix(text: str, marker: str) -> int:
    """Length of the longest end of `text` that could be the start of `marker`."""
    for n in range(min(len(text), len(marker) - 1), 0, -1):
        if marker.startswith(text[-n:]):
            return n
    return 0


_PYTHON_TAG = "<|python_tag|>"


class ToolCallStreamer:
    """Split streamed model text into content that is safely not part of a tool call, and tool calls.

    push(delta) returns the events that became certain; text that may still turn out to be (part of) a
    tool call is held, so content streams while a `<tool_call>` waits for its closing tag. finish()
    returns what is left at the end of the reply.
    """

    def __init__(self, style: str):
        if style not in STYLES:
            raise ValueError(f"unknown tool-call style {style!r} (known: {', '.join(STYLES)})")
        self.style = style
        self._buf = ""
        self._in_call = False
        self._decided = False  # llama3: whether the reply is known to be content or a call

    @property
    def holding(self) -> bool:
        """Whether text is being held back (a tool call may be in progress)."""
        return bool(self._buf)

    def held_call(self) -> str:
        """The text of the call in progress, from its opening marker (empty when none is open)."""
        return self._buf if self._in_call else ""

    def take_held(self) -> str:
        """Hand over the text held back and forget it (the caller takes the call over)."""
        out, self._buf, self._in_call = self._buf, "", False
        return out

    def push(self, delta: str) -> list[StreamEvent]:
        self._buf += delta
        if self.style in ("hermes", "fak"):
            return self._tagged("<tool_call>", "</tool_call>", final=False)
        if self.style == "mistral":
            return self._tagged("[TOOL_CALLS]", None, final=False)
        return self._llama3(final=False)

    def finish(self) -> list[StreamEvent]:
        if self.style in ("hermes", "fak"):
            events = self._tagged("<tool_call>", "</tool_call>", final=True)
        elif self.style == "mistral":
            events = self._tagged("[TOOL_CALLS]", None, final=True)
        else:
            events = self._llama3(final=True)
        self._buf, self._in_call = "", False
        return events

    def _tagged(self, open_tag: str, close_tag: str | None, *, final: bool) -> list[StreamEvent]:
        events: list[StreamEvent] = []
        while self._buf:
            if not self._in_call:
                start = self._buf.find(open_tag)
                if start < 0:
                    keep = 0 if final else _held_suffix(self._buf, open_tag)
                    cut = len(self._buf) - keep
                    if cut:
                        events.append(StreamEvent("content", self._buf[:cut]))
                    self._buf = self._buf[cut:]
                    break
                if start:
                    events.append(StreamEvent("content", self._buf[:start]))
                self._buf = self._buf[start:]
                self._in_call = True
            end = self._buf.find(close_tag, len(open_tag)) if close_tag else -1
            if end < 0 and not final:
                break  # hold until the closing tag (or the end of the reply)
            raw = self._buf if end < 0 else self._buf[: end + len(close_tag or "")]
            inner = self._buf[len(open_tag) : end if end >= 0 else len(self._buf)]
            self._buf = self._buf[len(raw) :]
            self._in_call = False
            calls = _calls_from_json(inner, "arguments")
            if calls is None:
                events.append(StreamEvent("content", raw))
            else:
                events.extend(StreamEvent("tool_call", raw if n == 0 else "", c) for n, c in enumerate(calls))
        return events

    def _llama3(self, *, final: bool) -> list[StreamEvent]:
        if not self._decided:
            head = self._buf.lstrip()
            if head.startswith(_PYTHON_TAG):
                head = head[len(_PYTHON_TAG) :].lstrip()
            if head.startswith("{"):
                self._in_call = self._decided = True
            elif head and not _PYTHON_TAG.startswith(head):
                self._decided = True
        if self._decided and not self._in_call:
            out, self._buf = self._buf, ""
            return [StreamEvent("content", out)] if out else []
        if not final:
            return []
        raw, self._buf = self._buf, ""
        body = raw.strip()
        if body.startswith(_PYTHON_TAG):
            body = body[len(_PYTHON_TAG) :]
        calls = _calls_from_json(body, "parameters", separators=";")
        if calls is None:
            return [StreamEvent("content", raw)] if raw else []
        return [StreamEvent("tool_call", raw if n == 0 else "", c) for n, c in enumerate(calls)]
