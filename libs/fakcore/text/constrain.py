"""Constrained decoding with llguidance: per step, the mask of tokens that keep the output valid.

A `Grammar` is built once per request from a JSON Schema, the request's tools or a custom tool's own
grammar, then driven by the sampler:

    g = Grammar.json_schema(tokenizer, schema)
    while not g.is_done():
        logits[~g.allowed()] = -inf          # allowed() covers tokenizer.vocab_size ids
        g.advance(sample(logits))

JSON is generated with `", "` and `": "` separators and no other whitespace: the form `json.dumps` and
chat templates write, and no room for a weak model to wander into endless whitespace.

The bridge to llguidance: a `tokenizers`-backed `Tokenizer` hands llguidance its tokenizer.json;
`ByteTokenizer` hands it a token table (raw bytes, specials marked with llguidance's 0xFF prefix).
Building the llguidance tokenizer costs ~0.2 s on a 49k vocabulary, so it is cached per tokenizer.
"""

from __future__ import annotations

import copy
import json
import weakref

import llguidance
import numpy as np

from .byte_tokenizer import ByteTokenizer
from .tokenizer import Tokenizer
from .toolcalls import CALL_CLOSE, STYLES, call_opening, freeform_opening


class GrammarError(Exception):
    """The grammar cannot be built, or a token outside the mask was advanced."""


JSON_OPTIONS = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}

_LL_TOKENIZERS: weakref.WeakKeyDictionary[Tokenizer, llguidance.LLTokenizer] = weakref.WeakKeyDictionary()


class _ByteTable:
    """What llguidance's TokenizerWrapper needs from a ByteTokenizer."""

    def __init__(self, tok: ByteTokenizer):
        self.eos_token_id = tok.eos_ids[0] if tok.eos_ids else None
        self.bos_token_id = tok.bos_id
        # Specials get llguidance's 0xFF prefix, so grammar literals never match them as text.
        self.tokens = [tok.token_bytes(i) if i < 256 else b"\xff" + tok.token_bytes(i) for i in range(tok.vocab_size)]
        self.special_token_ids = sorted(i for i in range(256, tok.vocab_size))

    def __call__(self, text: bytes | str) -> list[int]:
        # llguidance tokenizes grammar text literally (never into specials): bytes are ids.
        return list(text if isinstance(text, bytes) else text.encode("utf-8"))


def ll_tokenizer(tokenizer: Tokenizer) -> llguidance.LLTokenizer:
    """llguidance's view of a fak tokenizer (cached)."""
    cached = _LL_TOKENIZERS.get(tokenizer)
    if cached is not None:
        return cached
    eos = list(tokenizer.eos_ids) or None
    if isinstance(tokenizer, ByteTokenizer):
        wrapper = llguidance.TokenizerWrapper(_ByteTable(tokenizer))
        ll = llguidance.LLTokenizer(wrapper, n_vocab=tokenizer.vocab_size, eos_token=eos)
    else:
        ll = llguidance.LLTokenizer(tokenizer.to_json(), n_vocab=tokenizer.vocab_size, eos_token=eos)
    _LL_TOKENIZERS[tokenizer] = ll
    return ll


def _with_json_options(schema: dict) -> dict:
    out = _closed(copy.deepcopy(schema))
    out["x-guidance"] = {**JSON_OPTIONS, **out.get("x-guidance", {})}
    return out


def _closed(schema: object) -> object:
    """Objects that list their properties and say nothing of others get `additionalProperties: false`.

    JSON Schema's default (anything else allowed) would let a constrained model invent keys forever; a
    caller that wants extra keys says so explicitly. This is what OpenAI's strict structured outputs
    require of every schema."""
    if isinstance(schema, dict):
        for key, value in schema.items():
            if key in ("properties", "$defs", "definitions", "patternProperties") and isinstance(value, dict):
                for sub in value.values():
                    _closed(sub)
            elif key in ("items", "additionalProperties", "not", "if", "then", "else", "contains"):
                _closed(value)
            elif key in ("anyOf", "oneOf", "allOf", "prefixItems") and isinstance(value, list):
                for sub in value:
                    _closed(sub)
        if "properties" in schema and "additionalProperties" not in schema and "patternProperties" not in schema:
            schema["additionalProperties"] = False
    return schema


def _function(tool: dict) -> dict:
    fn = tool.get("function", tool)
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
        raise GrammarError(f"tool {tool!r} has no function name")
    return fn


def _call_schema(fn: dict, args_key: str) -> dict:
    params = fn.get("parameters") or {"type": "object"}
    return {
        "type": "object",
        "properties": {"name": {"const": fn["name"]}, args_key: params},
        "required": ["name", args_key],
        "additionalProperties": False,
    }


def _marker(tokenizer: Tokenizer, text: str) -> str:
    """A Lark terminal for `text`: the special token when the vocabulary has it as one, else the literal."""
    i = tokenizer.token_to_id(text)
    if i is not None and tokenizer.is_special(i):
        return f"<[{i}]>"
    return json.dumps(text)


def _lit(text: str) -> str:
    """A Lark string literal."""
    return json.dumps(text, ensure_ascii=False)


def _call_close(tokenizer: Tokenizer, style: str) -> str:
    """What ends a call after its arguments object: the object's own brace, then the style's close."""
    tail = "}" + CALL_CLOSE[style]
    if tail.endswith("</tool_call>"):
        return f'{_lit(tail.removesuffix("</tool_call>"))} {_marker(tokenizer, "</tool_call>")}'
    return _lit(tail)


def _custom_lark(name: str, syntax: str, definition: str) -> str:
    """A custom tool's grammar as Lark (a regex becomes `start: /…/`)."""
    if syntax == "lark":
        return definition
    if syntax == "regex":
        try:
            return json.loads(llguidance.LLMatcher.grammar_from_regex(definition))["grammars"][0]["lark_grammar"]
        except ValueError as e:
            raise GrammarError(f"custom tool {name!r}: regex: {e}") from e
    raise GrammarError(f"custom tool {name!r}: grammar syntax {syntax!r} is not lark or regex")


class Grammar:
    """One request's grammar state over one tokenizer's vocabulary."""

    def __init__(self, tokenizer: Tokenizer, spec: str, *, what: str = "grammar"):
        """`spec` is an llguidance grammar (from `LLMatcher.grammar_from_*`)."""
        self.tokenizer = tokenizer
        self.vocab_size = tokenizer.vocab_size
        try:
            self._matcher = llguidance.LLMatcher(ll_tokenizer(tokenizer), spec, log_level=0)
        except ValueError as e:
            raise GrammarError(f"{what}: {e}") from e
        if self._matcher.is_error():
            raise GrammarError(f"{what}: {self._matcher.get_error()}")
        self._bits = np.zeros(((self.vocab_size + 31) // 32,), dtype=np.int32)

    @classmethod
    def json_schema(cls, tokenizer: Tokenizer, schema: dict) -> Grammar:
        """Output is one JSON value valid under `schema`."""
        try:
            grammar = llguidance.LLMatcher.grammar_from_json_schema(_with_json_options(schema))
        except ValueError as e:
            raise GrammarError(f"JSON schema: {e}") from e
        return cls(tokenizer, grammar, what="JSON schema")

    @classmethod
    def lark(cls, tokenizer: Tokenizer, lark: str) -> Grammar:
        """Output matches a Lark grammar (llguidance's dialect: `%json {...}`, `<[id]>` special tokens).

        Write special tokens as `<[id]>`: a string literal spelled like a special token (`"<|im_end|>"`)
        cannot be produced with a `tokenizers`-backed vocabulary (llguidance tokenizes the literal into
        the special id, then refuses that id as text)."""
        return cls(tokenizer, llguidance.LLMatcher.grammar_from_lark(lark), what="Lark grammar")

    @classmethod
    def custom(cls, tokenizer: Tokenizer, syntax: str, definition: str) -> Grammar:
        """Output is a custom (freeform) tool's input under the client's grammar: `lark` (llguidance's
        dialect of Lark, which reads grammars such as Codex's apply_patch) or `regex`."""
        if syntax == "lark":
            return cls.lark(tokenizer, definition)
        if syntax == "regex":
            return cls(tokenizer, llguidance.LLMatcher.grammar_from_regex(definition), what="regex")
        raise GrammarError(f"custom tool grammar syntax {syntax!r} is not lark or regex")

    @classmethod
    def tool_call(cls, tokenizer: Tokenizer, tools: list[dict], *, name: str | None, style: str) -> Grammar:
        """Output is exactly one call, of tool `name` (or of any one of `tools`), in the style's syntax,
        with arguments valid under that tool's parameters schema."""
        fns = [_function(t) for t in tools]
        if name is not None:
            fns = [f for f in fns if f["name"] == name]
            if not fns:
                raise GrammarError(f"tool {name!r} is not among the request's tools")
        if not fns:
            raise GrammarError("a tool call was requested but there are no tools")
        args_key = "parameters" if style == "llama3" else "arguments"
        alternatives = [_call_schema(f, args_key) for f in fns]
        call = _with_json_options(alternatives[0] if len(alternatives) == 1 else {"anyOf": alternatives})
        body = "%json " + json.dumps(call, ensure_ascii=False)
        open_tag, close_tag = _marker(tokenizer, "<tool_call>"), _marker(tokenizer, "</tool_call>")
        if style == "hermes":
            lark = f'start: {open_tag} "\\n" {body} "\\n" {close_tag}'
        elif style == "fak":
            lark = f"start: {open_tag} {body} {close_tag}"
        elif style == "llama3":
            lark = f"start: {body}"
        elif style == "mistral":
            lark = f'start: {_marker(tokenizer, "[TOOL_CALLS]")} " [" {body} "]"'
        else:
            raise GrammarError(f"unknown tool-call style {style!r}")
        return cls(tokenizer, llguidance.LLMatcher.grammar_from_lark(lark), what=f"{style} tool call")

    @classmethod
    def calls(cls, tokenizer: Tokenizer, tools: list[dict], freeform: dict[str, tuple[str, str]], *, key: str,
              style: str, required: bool) -> Grammar:
        """Every tool call the model opens is a valid one, and a custom tool's input follows its own grammar.

        For requests with custom (freeform) tools that carry a grammar, such as Codex's apply_patch, when
        `tool_choice` leaves the choice of tool to the model. `tools` are the function tools (a custom tool
        without a grammar is one: its input is a JSON string); `freeform` maps a custom tool's name to its
        (syntax, definition). Without `required` the output is free text, and a lazy grammar takes over
        where the text opens a call (the style's tag): a function call is constrained as Grammar.tool_call
        constrains it, then free text goes on. With `required` the output is one call.

        A custom call is written up to the opening quote of its one string argument `key`
        (toolcalls.freeform_opening), then its input raw, under the tool's grammar, to the end of the output:
        what the client's grammar describes is the raw text, not its JSON escape, so nothing can follow it
        and a custom call is the output's last call."""
        if style not in STYLES:
            raise GrammarError(f"unknown tool-call style {style!r}")
        tag = {"hermes": "<tool_call>", "fak": "<tool_call>", "mistral": "[TOOL_CALLS]"}.get(style, "")
        functions, customs, subgrammars = [], [], []
        for fn in (_function(t) for t in tools):
            params = _with_json_options(fn.get("parameters") or {"type": "object"})
            functions.append(f"{_lit(call_opening(style, fn['name'])[len(tag):])} %json {json.dumps(params, ensure_ascii=False)} "
                             f"{_call_close(tokenizer, style)}")
        for i, (name, (syntax, definition)) in enumerate(freeform.items()):
            subgrammars.append({"name": f"custom_{i}", "lark_grammar": _custom_lark(name, syntax, definition)})
            customs.append(f"{_lit(freeform_opening(style, name, key)[len(tag):])} @custom_{i}")
        if not customs:
            raise GrammarError("no custom tool with a grammar")
        rules = [f"custom: {' | '.join(customs)}"] + ([f"function: {' | '.join(functions)}"] if functions else [])
        call = "(function | custom)" if functions else "custom"
        if style == "llama3":  # the whole reply is one call, or text that does not begin like one
            start = f"start: {call}" if required else f"start: PLAIN | {call}"
            rules.append(r"PLAIN: /\s*([^{\s](.|\n)*)?/")
        else:
            marker = _marker(tokenizer, tag)
            if required:
                start = f"start: {marker} {call}"
            else:
                if style == "mistral":  # the calls run to the end of the reply
                    start = f"start: TEXT | trig {call}"
                else:
                    start = "start: (trig function)* (TEXT | trig custom)" if functions else "start: TEXT | trig custom"
                # Free text up to the tag. A tag that is a special token never appears in TEXT: no lazy lexeme.
                rules += [f"trig: TEXT {marker}" if marker.startswith("<[") else f"trig[lazy]: TEXT {marker}",
                          r"TEXT: /(.|\n)*/"]
        lark = "\n".join(["%llguidance {}", start, *rules]) + "\n"
        top = json.dumps({"grammars": [{"name": "calls", "lark_grammar": lark}, *subgrammars]})
        return cls(tokenizer, top, what=f"{style} tool calls with custom grammars")

    def allowed_bits(self) -> np.ndarray:
        """The mask packed 32 tokens per int32 (bit i%32 of word i//32), llguidance's native form.
        The array is reused by the next call."""
        self._matcher.unsafe_compute_mask_ptr(self._bits.ctypes.data, self._bits.nbytes)
        return self._bits

    def allowed(self) -> np.ndarray:
        """Boolean mask over the vocabulary for the next token."""
        bits = self.allowed_bits()
        return np.unpackbits(bits.view(np.uint8), bitorder="little", count=self.vocab_size).astype(bool)

    def advance(self, token_id: int) -> None:
        if not self._matcher.consume_token(int(token_id)):
            raise GrammarError(f"token {token_id} is not allowed here: {self._matcher.get_error()}")

    def is_done(self) -> bool:
        """The output is complete (the grammar admits nothing more) or the matcher stopped."""
        return self._matcher.is_stopped()

    def is_accepting(self) -> bool:
        """The output so far is a complete match (ending here, e.g. with EOS, is valid)."""
        return self._matcher.is_accepting()

