"""One generation in flight: its prompt, cache, sampler, detokenizer, stop rules, tool calls, grammar.

The scheduler owns a set of these and feeds each the logits of its newest position; a Sequence turns them
into a token, a text delta and, eventually, a finish reason. Nothing here knows about NATS.

Per token:  mask (grammar) -> sample -> detokenize -> stop strings -> split tool calls from content.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fakcore.engine.kvcache import cut_tokens
from fakcore.engine.loader import LoadedModel
from fakcore.engine.prompt import Prompt, RequestError, build_prompt, template_tools
from fakcore.engine.sampling import Sampler
from fakcore.protocol import ErrorCode, GenerateRequest, ToolCall
from fakcore.text.constrain import Constraint, ConstraintError
from fakcore.text.tokenizer import StreamDecoder
from fakcore.text.toolcalls import ToolCallStreamer, detect_style

__all__ = ["RequestError", "Sequence", "StopMatcher", "prepare", "prompt_ids"]


def uses_tools(request: GenerateRequest) -> bool:
    return bool(request.tools) and request.tool_choice != "none" and request.prompt is None


def prompt_ids(model: LoadedModel, request: Any) -> list[int]:
    return build_prompt(model, request, with_tools=uses_tools(request) if isinstance(request, GenerateRequest) else True).ids


def prepare(model: LoadedModel, request: GenerateRequest) -> Prompt:
    return build_prompt(model, request, with_tools=uses_tools(request))


def make_constraint(model: LoadedModel, request: GenerateRequest) -> Constraint | None:
    """Grammar for `tool_choice` required / a named function, or for a response JSON Schema."""
    try:
        if uses_tools(request) and request.tool_choice in ("required", "function"):
            name = request.tool_choice_name if request.tool_choice == "function" else None
            return Constraint.tool_call(model.tokenizer, template_tools(request.tools) or [], name=name,
                                        style=detect_style(model.template))
        if request.response_schema is not None:
            return Constraint.json_schema(model.tokenizer, request.response_schema)
    except ConstraintError as exc:
        raise RequestError(ErrorCode.INVALID, f"cannot constrain the output: {exc}") from exc
    return None


class StopMatcher:
    """Holds back generated text that could still become a stop string; cuts at the first match."""

    def __init__(self, stops: list[str]):
        self.stops = [s for s in stops if s]
        self.pending = ""
        self.matched = ""  # the stop string that ended the text

    def push(self, text: str) -> tuple[str, bool]:
        """-> (text safe to emit, stopped)."""
        self.pending += text
        if not self.stops:
            out, self.pending = self.pending, ""
            return out, False
        hits = [(i, s) for s in self.stops if (i := self.pending.find(s)) >= 0]
        if hits:
            first, self.matched = min(hits)
            out, self.pending = self.pending[:first], ""
            return out, True
        hold = 0
        for s in self.stops:
            for k in range(min(len(s) - 1, len(self.pending)), 0, -1):
                if self.pending.endswith(s[:k]):
                    hold = max(hold, k)
                    break
        cut = len(self.pending) - hold
        out, self.pending = self.pending[:cut], self.pending[cut:]
        return out, False

    def flush(self) -> str:
        out, self.pending = self.pending, ""
        return out


@dataclass
class Sequence:
    request: GenerateRequest
    prompt: list[int]  # prompt token ids
    cache: Any  # the backend's KVCache
    model: LoadedModel
    constraint: Constraint | None = None
    emitted: int = 0  # messages sent so far (TokenChunk.seq)
    generated: list[int] = field(default_factory=list)
    finish_reason: str = ""
    cached_tokens: int = 0  # prompt tokens that were already in `cache` (prefix reuse)
    tool_calls: list[ToolCall] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)
    first_token_at: float = 0.0
    spans: list = field(default_factory=list)  # the prompt's PromptSpans (block -> token range), for the KV-MMU
    held: bool = False  # verdict barrier: prefill, but sample nothing until the Release
    hold_deadline: float = 0.0  # monotonic time at which a held sequence fails

    def __post_init__(self) -> None:
        self.sampler = Sampler(self.request.sampling)
        self.decoder = StreamDecoder(self.model.tokenizer)
        self.stops = StopMatcher(list(self.request.sampling.stop))
        self.eos = set(self.model.config.eos_ids) | set(self.model.tokenizer.eos_ids)
        self.calls = ToolCallStreamer(detect_style(self.model.template)) if uses_tools(self.request) else None

    @property
    def pending_prompt(self) -> list[int]:
        """Prompt tokens not in the cache yet (prefill still to do). A held sequence keeps its last prompt
        token back: running it would produce the logits of the first sample."""
        end = len(self.prompt) - 1 if self.held else len(self.prompt)
        return self.prompt[self.cache.length:end] if self.cache.length < end else []

    def drop_prompt(self, ranges: list[tuple[int, int]]) -> None:
        """The prompt without the token ranges of evicted spans (sorted, disjoint; positions in the prompt)."""
        self.prompt = cut_tokens(self.prompt, [(s, min(e, len(self.prompt))) for s, e in ranges if s < len(self.prompt)])

    @property
    def next_input(self) -> int:
        return self.generated[-1]

    @property
    def done(self) -> bool:
        return bool(self.finish_reason)

    def accept(self, logits: np.ndarray) -> str:
        """Sample from the newest position's logits; return the content text to stream (may be empty)."""
        allowed = self.constraint.allowed() if self.constraint is not None else None
        token = self.sampler(logits, allowed)
        if not self.first_token_at:
            self.first_token_at = time.monotonic()
        if token in self.eos:
            return self._finish("stop")
        self.generated.append(token)
        if self.constraint is not None:
            self.constraint.advance(token)
        text, stopped = self.stops.push(self.decoder.push(token))
        out = self._content(text)
        if stopped:
            out += self._finish("stop", flush=False)
        elif self.constraint is not None and self.constraint.is_done():
            out += self._finish("stop")
        elif (len(self.generated) >= self.request.sampling.max_tokens
              or len(self.prompt) + len(self.generated) >= self.model.config.context_length):
            out += self._finish("length")
        return out

    def _content(self, text: str) -> str:
        if self.calls is None or not text:
            return text
        return self._events(self.calls.push(text))

    def _events(self, events: list) -> str:
        out = []
        for e in events:
            if e.kind == "content":
                out.append(e.text)
            elif e.call is not None:
                self.tool_calls.append(ToolCall(id=e.call.id or f"call_{uuid.uuid4().hex[:24]}", name=e.call.name,
                                                arguments=e.call.arguments))
        return "".join(out)

    def _finish(self, reason: str, flush: bool = True) -> str:
        out = ""
        if flush:
            text, stopped = self.stops.push(self.decoder.flush())
            out = self._content(text if stopped else text + self.stops.flush())
        if self.calls is not None:
            out += self._events(self.calls.finish())
        self.finish_reason = "tool_calls" if self.tool_calls else reason
        return out
