"""From a request to prompt token ids, with the span map of every message block.

The chat template is rendered once with the real contents and once with a sentinel in place of each
message's content; splitting the second at the sentinels tells, character for character, where each
message's content sits in the prompt. Two things follow:

- The span map: which token range holds which content block (by content hash), for the KV-MMU.
- Safe tokenization: the prompt is tokenized as HuggingFace does (special-token text parsed as specials),
  unless a special token would come from inside a message's content - a tool result that writes
  "<|im_start|>system" to open a turn of its own. Then every content is tokenized literally, and only the
  template's own markup produces special tokens.
"""

from __future__ import annotations

import bisect
import json
import re
from dataclasses import dataclass, field
from typing import Any

from fakcore.protocol import (
    ChatMessage,
    CountTokensRequest,
    ErrorCode,
    GenerateRequest,
    Span,
    ToolSpec,
    block_id,
)


class RequestError(Exception):
    """The request cannot be served as asked; `code` is a protocol ErrorCode."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code


@dataclass
class Prompt:
    ids: list[int]
    text: str
    spans: list[Span] = field(default_factory=list)  # which token range holds which message content
    literal: bool = False  # contents were tokenized literally (special-token text found inside them)


_SENTINEL = "\ue000fak{}\ue001"
_SENTINEL_RE = re.compile("\ue000fak(\\d+)\ue001")


def template_messages(messages: list[ChatMessage], contents: list[str] | None = None) -> list[dict[str, Any]]:
    """Bus messages -> HuggingFace chat-template messages (optionally with replaced contents)."""
    out = []
    for i, m in enumerate(messages):
        d: dict[str, Any] = {"role": m.role, "content": m.content if contents is None else contents[i]}
        if m.tool_calls:
            calls = []
            for c in m.tool_calls:
                try:
                    args: Any = json.loads(c.arguments or "{}")
                except ValueError:
                    args = c.arguments
                calls.append({"id": c.id, "type": "function", "function": {"name": c.name, "arguments": args}})
            d["tool_calls"] = calls
        if m.tool_call_id:
            d["tool_call_id"] = m.tool_call_id
        if m.name:
            d["name"] = m.name
        out.append(d)
    return out


def uses_tools(request: GenerateRequest) -> bool:
    """The generation may call the request's tools (they are rendered into its prompt)."""
    return bool(request.tools) and request.tool_choice != "none" and request.prompt is None


def template_tools(tools: list[ToolSpec]) -> list[dict[str, Any]] | None:
    if not tools:
        return None
    return [{"type": "function", "function": {"name": t.name, "description": t.description,
                                              "parameters": t.parameters or {"type": "object", "properties": {}}}}
            for t in tools]


def build_prompt(model: Any, request: GenerateRequest | CountTokensRequest) -> Prompt:
    """The prompt of a request on `model` (a LoadedModel), rendered and tokenized, with its span map.

    A count renders every tool it is given; a generation renders them only when it may call them."""
    tok = model.tokenizer
    if request.prompt is not None:  # raw completion: the caller wrote every token, specials included
        return Prompt(ids=tok.encode(request.prompt, add_bos=tok.add_bos), text=request.prompt)
    if model.template is None:
        raise RequestError(ErrorCode.UNSUPPORTED, f"model {model.name} has no chat template: use /v1/completions with a raw prompt")
    messages: list[ChatMessage] = request.messages
    if not messages:
        raise RequestError(ErrorCode.INVALID, "messages must not be empty")
    with_tools = uses_tools(request) if isinstance(request, GenerateRequest) else True
    tools = template_tools(request.tools) if with_tools else None
    contents = [m.content for m in messages]
    try:
        text = model.template.render(template_messages(messages), tools=tools, add_generation_prompt=True)
        marked = model.template.render(template_messages(messages, [_SENTINEL.format(i) if c else c for i, c in enumerate(contents)]),
                                       tools=tools, add_generation_prompt=True)
    except Exception as exc:  # the template refuses this conversation (roles out of order…)
        raise RequestError(ErrorCode.INVALID, f"cannot render the prompt: {exc}") from exc
    places = _locate(text, marked, contents)
    blocks = [m.block or block_id(m.content) for m in messages]

    ids, offsets = tok.encode_with_offsets(text)
    inside = _Inside(places)
    literal = any(tok.is_special(t) and inside(o) for t, o in zip(ids, offsets, strict=True))
    if literal:
        ids, offsets = _encode_literal_contents(tok, text, places)
    placed = {p[0] for p in places}
    unplaced = [i for i, c in enumerate(contents) if c and i not in placed]
    for i in unplaced:  # the template transformed this content: it cannot be tokenized literally
        if tok.encode(contents[i]) != tok.encode_literal(contents[i]):
            raise RequestError(ErrorCode.UNSUPPORTED, f"messages[{i}] holds special-token text and this model's chat template "
                                                      "rewrites message contents, so it cannot be tokenized safely")
    return Prompt(ids=ids, text=text, spans=_token_spans(places, offsets, blocks), literal=literal)


def _locate(text: str, marked: str, contents: list[str]) -> list[tuple[int, int, int]]:
    """(message index, start char, end char) of each content occurrence in the rendered text."""
    parts = _SENTINEL_RE.split(marked)
    rebuilt, places, pos = [], [], 0
    for k, part in enumerate(parts):
        if k % 2 == 0:
            rebuilt.append(part)
            pos += len(part)
        else:
            i = int(part)
            places.append((i, pos, pos + len(contents[i])))
            rebuilt.append(contents[i])
            pos += len(contents[i])
    if "".join(rebuilt) == text:
        return places
    # The template changed contents (trimmed, split…): find them verbatim, in order, where they survive.
    places, cursor = [], 0
    for i, c in enumerate(contents):
        at = text.find(c, cursor) if c else -1
        if at >= 0:
            places.append((i, at, at + len(c)))
            cursor = at + len(c)
    return places


class _Inside:
    """Whether a token's character range lies inside one content: places are disjoint, so bisect over
    them sorted by start (a conversation of 10k messages costs milliseconds, not a scan per token)."""

    def __init__(self, places: list[tuple[int, int, int]]):
        ordered = sorted((s, e) for _, s, e in places)
        self.starts = [s for s, _ in ordered]
        self.ends = [e for _, e in ordered]

    def __call__(self, offset: tuple[int, int]) -> bool:
        start, end = offset
        k = bisect.bisect_right(self.starts, start) - 1
        return k >= 0 and end <= self.ends[k] and end > start


def _encode_literal_contents(tok: Any, text: str, places: list[tuple[int, int, int]]) -> tuple[list[int], list[tuple[int, int]]]:
    """Template text with specials, contents literally; offsets are per-segment (each token gets its
    segment's character range, which is all the span map needs)."""
    ids: list[int] = []
    offsets: list[tuple[int, int]] = []
    pos = 0
    for _, start, end in sorted(places, key=lambda p: p[1]):
        if start > pos:
            seg_ids, seg_off = tok.encode_with_offsets(text[pos:start])
            ids += seg_ids
            offsets += [(pos + a, pos + b) for a, b in seg_off]
        lit = tok.encode_literal(text[start:end])
        ids += lit
        offsets += [(start, end)] * len(lit)
        pos = end
    if pos < len(text):
        seg_ids, seg_off = tok.encode_with_offsets(text[pos:])
        ids += seg_ids
        offsets += [(pos + a, pos + b) for a, b in seg_off]
    return ids, offsets


def _token_spans(places: list[tuple[int, int, int]], offsets: list[tuple[int, int]], blocks: list[str]) -> list[Span]:
    """Tokens overlapping each content's characters (offsets are non-decreasing, so bisect)."""
    starts = [a for a, _ in offsets]
    ends = [b for _, b in offsets]
    spans = []
    for i, start, end in places:
        first = bisect.bisect_right(ends, start)  # first token ending after `start`
        last = bisect.bisect_left(starts, end)  # first token starting at or after `end`
        if first < last:
            spans.append(Span(block=blocks[i], start=first, end=last))
    return spans
