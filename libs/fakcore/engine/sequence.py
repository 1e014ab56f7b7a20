"""One generation in flight: its prompt, cache, sampler, detokenizer and stop rules.

The scheduler owns a set of these and feeds each the logits of its newest position; a Sequence turns them
into a token, a text delta and, eventually, a finish reason. Nothing here knows about NATS.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fakcore.engine.loader import LoadedModel
from fakcore.engine.sampling import Sampler
from fakcore.protocol import ChatMessage, GenerateRequest, ToolSpec
from fakcore.text.tokenizer import StreamDecoder


class RequestError(Exception):
    """The request cannot be served as asked; `code` is a protocol ErrorCode."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code


def template_messages(messages: list[ChatMessage]) -> list[dict[str, Any]]:
    """Bus messages -> HuggingFace chat-template messages."""
    import json

    out = []
    for m in messages:
        d: dict[str, Any] = {"role": m.role, "content": m.content}
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


def template_tools(tools: list[ToolSpec]) -> list[dict[str, Any]] | None:
    if not tools:
        return None
    return [{"type": "function", "function": {"name": t.name, "description": t.description,
                                              "parameters": t.parameters or {"type": "object", "properties": {}}}}
            for t in tools]


def render_prompt(model: LoadedModel, messages: list[ChatMessage], tools: list[ToolSpec], prompt: str | None) -> str:
    if prompt is not None:
        return prompt
    if model.template is None:
        raise RequestError("unsupported", f"model {model.name} has no chat template: use /v1/completions with a raw prompt")
    if not messages:
        raise RequestError("invalid_request", "messages must not be empty")
    return model.template.render(template_messages(messages), tools=template_tools(tools), add_generation_prompt=True)


def prompt_ids(model: LoadedModel, request: GenerateRequest | Any) -> list[int]:
    """The request's prompt as token ids. A chat template writes its own BOS (as HF's apply_chat_template
    does); a raw prompt gets one when the tokenizer asks for it."""
    text = render_prompt(model, request.messages, request.tools, request.prompt)
    return model.tokenizer.encode(text, add_bos=request.prompt is not None and model.tokenizer.add_bos)


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
    emitted: int = 0  # messages sent so far (TokenChunk.seq)
    generated: list[int] = field(default_factory=list)
    finish_reason: str = ""
    cached_tokens: int = 0  # prompt tokens that were already in `cache` (prefix reuse)
    started: float = field(default_factory=time.monotonic)
    first_token_at: float = 0.0

    def __post_init__(self) -> None:
        self.sampler = Sampler(self.request.sampling)
        self.decoder = StreamDecoder(self.model.tokenizer)
        self.stops = StopMatcher(list(self.request.sampling.stop))
        self.eos = set(self.model.config.eos_ids) | set(self.model.tokenizer.eos_ids)

    @property
    def pending_prompt(self) -> list[int]:
        """Prompt tokens not in the cache yet (prefill still to do)."""
        return self.prompt[self.cache.length:] if self.cache.length < len(self.prompt) else []

    @property
    def next_input(self) -> int:
        return self.generated[-1]

    @property
    def done(self) -> bool:
        return bool(self.finish_reason)

    def accept(self, logits: np.ndarray) -> str:
        """Sample from the newest position's logits; return the text to stream (may be empty)."""
        token = self.sampler(logits)
        if not self.first_token_at:
            self.first_token_at = time.monotonic()
        if token in self.eos:
            self.finish_reason = "stop"
            return self._final_text()
        self.generated.append(token)
        text, stopped = self.stops.push(self.decoder.push(token))
        if stopped:
            self.finish_reason = "stop"
        elif (len(self.generated) >= self.request.sampling.max_tokens
              or len(self.prompt) + len(self.generated) >= self.model.config.context_length):
            self.finish_reason = "length"
            text += self._final_text()
        return text

    def _final_text(self) -> str:
        text, stopped = self.stops.push(self.decoder.flush())
        return text if stopped else text + self.stops.flush()
