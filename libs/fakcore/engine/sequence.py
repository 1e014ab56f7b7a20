"""One generation in flight: its prompt, cache, sampler, detokenizer, stop rules, tool calls, grammar.

The scheduler owns a set of these and feeds each the logits of its newest position; a Sequence turns them
into a token, a text delta and, eventually, a finish reason. Nothing here knows about NATS.

Per token:  mask (grammar) -> sample -> detokenize -> stop strings -> split tool calls from content.
With `logprobs` asked for, each token's log-probability follows its text to the content (LogprobLedger).
A custom (freeform) tool's call collects its input instead: from the start when the request forces it, or
from where the model opens a call of one whose grammar constrains it (Grammar.calls writes that opening).
"""

from __future__ import annotations

import collections
import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fakcore.engine.kvcache import cut_tokens
from fakcore.engine.loader import LoadedModel
from fakcore.engine.prompt import RequestError, template_tools, uses_tools
from fakcore.engine.sampling import Sampler, token_logprobs
from fakcore.protocol import (
    CUSTOM_TOOL_INPUT,
    ErrorCode,
    GenerateRequest,
    Span,
    TokenLogprob,
    ToolCall,
    ToolSpec,
)
from fakcore.text.constrain import Grammar, GrammarError
from fakcore.text.stream_decode import StreamDecoder
from fakcore.text.toolcalls import ToolCallStreamer, detect_style, freeform_opening


def forced_custom(request: GenerateRequest) -> ToolSpec | None:
    """The custom (freeform) tool the request forces, whose input is then the whole output: the one named
    by `tool_choice`, or the only tool of a request whose tool_choice is `required`."""
    if not uses_tools(request):
        return None
    if request.tool_choice == "function":
        return next((t for t in request.tools if t.name == request.tool_choice_name and t.kind == "custom"), None)
    if request.tool_choice == "required" and len(request.tools) == 1 and request.tools[0].kind == "custom":
        return request.tools[0]
    return None


def freeform_tools(request: GenerateRequest) -> list[ToolSpec]:
    """The custom tools with a grammar that constrains a call the model chooses to make (Grammar.calls):
    under tool_choice `auto` (without a response schema, which then shapes the whole output) or `required`."""
    if not uses_tools(request) or forced_custom(request) is not None:
        return []
    if request.tool_choice not in ("auto", "required") or (request.tool_choice == "auto" and request.response_schema is not None):
        return []
    return [t for t in request.tools if t.kind == "custom" and t.format.get("type") == "grammar"]


def make_grammar(model: LoadedModel, request: GenerateRequest) -> Grammar | None:
    """Grammar for a forced custom tool (its own grammar); for tool calls that custom tools' grammars
    constrain; for `tool_choice` required or a named function; or for a response JSON Schema."""
    try:
        if (custom := forced_custom(request)) is not None:
            fmt = custom.format
            return Grammar.custom(model.tokenizer, fmt["syntax"], fmt["definition"]) if fmt.get("type") == "grammar" else None
        if freeform := freeform_tools(request):
            functions = [t for t in request.tools if t not in freeform]
            return Grammar.calls(model.tokenizer, template_tools(functions) or [],
                                 {t.name: (t.format["syntax"], t.format["definition"]) for t in freeform},
                                 key=CUSTOM_TOOL_INPUT, style=detect_style(model.template), required=request.tool_choice == "required")
        if uses_tools(request) and request.tool_choice in ("required", "function"):
            name = request.tool_choice_name if request.tool_choice == "function" else None
            return Grammar.tool_call(model.tokenizer, template_tools(request.tools) or [], name=name,
                                        style=detect_style(model.template))
        if request.response_schema is not None:
            return Grammar.json_schema(model.tokenizer, request.response_schema)
    except GrammarError as exc:
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
class _Sampled:
    entry: TokenLogprob
    start: int  # the token's characters in the detokenized text: [start, end)
    end: int | None = None  # None until the detokenizer has let its text out
    shown: bool = False  # reported: some of its text reached content


class LogprobLedger:
    """Hands out each sampled token's TokenLogprob with the content delta that first shows its text.

    Between the sampler and the client the text passes the detokenizer (holding a token back until its
    character is complete), the stop matcher (holding back what may become a stop string, dropping it and
    everything after at a match) and the tool-call splitter (swallowing call markup). What the stop matcher
    lets out is a prefix of the detokenized text, and the splitter's events partition it in order, so one
    character position ties every token to what became of its text: a token is reported once any of its
    characters reaches content; one whose characters all went into a tool call or past a stop is not.
    """

    def __init__(self) -> None:
        self.sampled: collections.deque[_Sampled] = collections.deque()  # not yet wholly consumed
        self.decoded = 0  # characters the detokenizer has let out
        self.consumed = 0  # characters the content / tool-call split has passed on
        self.ready: list[TokenLogprob] = []  # reported, not yet sent

    def token(self, entry: TokenLogprob) -> None:
        self.sampled.append(_Sampled(entry, self.decoded))

    def decoded_text(self, text: str) -> None:
        """The detokenizer let `text` out: it belongs to the tokens still waiting for theirs."""
        if not text:
            return
        self.decoded += len(text)
        for t in reversed(self.sampled):
            if t.end is not None:
                break
            t.end = self.decoded

    def passed(self, text: str, content: bool) -> None:
        """The next `text` of the stop matcher's output went to content, or (content False) to a tool call."""
        self.consumed += len(text)
        if content and text:
            for t in self.sampled:  # those left all end past the text consumed before this
                if t.start >= self.consumed:
                    break
                if not t.shown:
                    t.shown = True
                    self.ready.append(t.entry)
        while self.sampled and self.sampled[0].end is not None and self.sampled[0].end <= self.consumed:
            self.sampled.popleft()

    def take(self) -> list[TokenLogprob]:
        out, self.ready = self.ready, []
        return out


@dataclass
class Sequence:
    request: GenerateRequest
    prompt: list[int]  # prompt token ids
    cache: Any  # the backend's KVCache
    model: LoadedModel
    grammar: Grammar | None = None  # constrained decoding: the mask of tokens that keep the output valid
    emitted: int = 0  # messages sent so far (TokenChunk.seq)
    generated: list[int] = field(default_factory=list)
    finish_reason: str = ""
    cached_tokens: int = 0  # prompt tokens that were already in `cache` (prefix reuse)
    tool_calls: list[ToolCall] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)
    first_token_at: float = 0.0
    spans: list[Span] = field(default_factory=list)  # the prompt's span map (block -> token range), for the KV-MMU
    held: bool = False  # verdict barrier: prefill, but sample nothing until the Release
    hold_deadline: float = 0.0  # monotonic time at which a held sequence fails

    def __post_init__(self) -> None:
        self.sampler = Sampler(self.request.sampling)
        self.decoder = StreamDecoder(self.model.tokenizer)
        self.stops = StopMatcher(list(self.request.sampling.stop))
        self.eos = set(self.model.config.eos_ids) | set(self.model.tokenizer.eos_ids)
        style = detect_style(self.model.template)
        self.custom = forced_custom(self.request)  # its input is collected, not streamed as text
        self.custom_input: list[str] = []
        self.calls = ToolCallStreamer(style) if uses_tools(self.request) and not self.custom else None
        # How a call of a grammar-bearing custom tool opens (Grammar.calls writes it so): once the held call
        # reads so, the tool is `custom` and the rest of the output its input.
        self.freeform = {freeform_opening(style, t.name, CUSTOM_TOOL_INPUT): t for t in freeform_tools(self.request)}
        self.ledger = LogprobLedger() if self.request.sampling.logprobs else None

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

    @property
    def samples_on_device(self) -> bool:
        """Its choice needs no logits on the host (no grammar's mask, no logprobs): a backend that samples
        (Backend.sample) may make it where the logits are, from the sampler's Draw."""
        return self.grammar is None and self.ledger is None

    def accept(self, logits: np.ndarray) -> str:
        """Sample from the newest position's logits; return the content text to stream (may be empty)."""
        allowed = self.grammar.allowed() if self.grammar is not None else None
        return self.take(self.sampler(logits, allowed), logits)

    def take(self, token: int, logits: np.ndarray | None = None) -> str:
        """The sampled `token` joins the output (accept's second half; a device sampler's token comes here
        directly, without logits: samples_on_device); the content text to stream."""
        if not self.first_token_at:
            self.first_token_at = time.monotonic()
        if token in self.eos:
            return self._finish("stop")
        self.generated.append(token)
        if self.grammar is not None:
            self.grammar.advance(token)
        decoded = self.decoder.push(token)
        if self.ledger is not None:
            self.ledger.token(self._logprob(logits, token))
            self.ledger.decoded_text(decoded)
        text, stopped = self.stops.push(decoded)
        out = self._content(text)
        if stopped:
            out += self._finish("stop", flush=False)
        elif self.grammar is not None and self.grammar.is_done():
            out += self._finish("stop")
        elif (len(self.generated) >= self.request.sampling.max_tokens
              or len(self.prompt) + len(self.generated) >= self.model.config.context_length):
            out += self._finish("length")
        return out

    def take_logprobs(self) -> list[TokenLogprob]:
        """The entries of the tokens whose text the last accept() emitted (empty unless asked for)."""
        return self.ledger.take() if self.ledger is not None else []

    def _logprob(self, logits: np.ndarray, token: int) -> TokenLogprob:
        tok = self.model.tokenizer

        def entry(i: int, logprob: float, top: list[TokenLogprob]) -> TokenLogprob:
            raw = tok.token_bytes(i)
            return TokenLogprob(id=i, text=raw.decode("utf-8", errors="replace"), logprob=logprob, raw=raw, top=top)

        chosen, best = token_logprobs(logits, token, self.request.sampling.top_logprobs)
        return entry(token, chosen, [entry(i, lp, []) for i, lp in best])

    def _content(self, text: str) -> str:
        if self.custom is not None:
            self.custom_input.append(text)
            if self.ledger is not None:
                self.ledger.passed(text, content=False)
            return ""
        if self.calls is None or not text:
            if self.ledger is not None:
                self.ledger.passed(text, content=True)
            return text
        out = self._events(self.calls.push(text))
        if self.freeform and (held := self.calls.held_call()):
            opening = next((o for o in self.freeform if held.startswith(o)), None)
            if opening is not None:  # the model opened a custom call: from here on, its input
                self.custom = self.freeform[opening]
                self.custom_input.append(self.calls.take_held()[len(opening):])
                if self.ledger is not None:
                    self.ledger.passed(held, content=False)
        return out

    def _events(self, events: list) -> str:
        out = []
        for e in events:
            if self.ledger is not None:
                self.ledger.passed(e.text, content=e.kind == "content")
            if e.kind == "content":
                out.append(e.text)
            elif e.call is not None:
                self.tool_calls.append(ToolCall(id=e.call.id or f"call_{uuid.uuid4().hex[:24]}", name=e.call.name,
                                                arguments=e.call.arguments))
        return "".join(out)

    def _finish(self, reason: str, flush: bool = True) -> str:
        out = ""
        if flush:
            decoded = self.decoder.flush()
            if self.ledger is not None:
                self.ledger.decoded_text(decoded)
            text, stopped = self.stops.push(decoded)
            out = self._content(text if stopped else text + self.stops.flush())
        if self.calls is not None:
            out += self._events(self.calls.finish())
        if self.custom is not None:  # one call, even cut at max_tokens (then finish_reason says length)
            arguments = json.dumps({CUSTOM_TOOL_INPUT: "".join(self.custom_input)}, ensure_ascii=False)
            self.tool_calls.append(ToolCall(id=f"call_{uuid.uuid4().hex[:24]}", name=self.custom.name, arguments=arguments))
            self.finish_reason = "length" if reason == "length" else "tool_calls"
            return out
        self.finish_reason = "tool_calls" if self.tool_calls else reason
        return out
