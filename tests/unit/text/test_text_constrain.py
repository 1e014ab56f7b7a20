"""Constrained decoding: whatever a sampler picks from the mask, the output is valid."""

from __future__ import annotations

import json
import random
import time

import jsonschema
import numpy as np
import pytest

from fakcore.text.constrain import Grammar, GrammarError
from fakcore.text.toolcalls import parse_tool_calls

SCHEMAS = {
    "enum_and_range": {
        "type": "object",
        "properties": {
            "color": {"enum": ["red", "green", "blue"]},
            "size": {"type": "integer", "minimum": 3, "maximum": 17},
            "ok": {"type": "boolean"},
        },
        "required": ["color", "size", "ok"],
        "additionalProperties": False,
    },
    "nested_arrays": {
        "type": "object",
        "properties": {
            "matrix": {
                "type": "array",
                "items": {"type": "array", "items": {"type": "integer", "minimum": -5, "maximum": 5}, "maxItems": 3},
                "minItems": 1,
                "maxItems": 3,
            },
            "tags": {"type": "array", "items": {"type": "string", "maxLength": 6}, "maxItems": 2},
        },
        "required": ["matrix", "tags"],
        "additionalProperties": False,
    },
    "required_and_optional": {
        "type": "object",
        "properties": {
            "name": {"type": "string", "minLength": 1, "maxLength": 8},
            "age": {"type": "integer", "minimum": 0, "maximum": 130},
            "email": {"type": "string", "maxLength": 10},
            "address": {
                "type": "object",
                "properties": {"zip": {"type": "string", "pattern": "^[0-9]{5}$"}, "city": {"enum": ["Paris", "Oslo"]}},
                "required": ["zip"],
                "additionalProperties": False,
            },
        },
        "required": ["name", "address"],
        "additionalProperties": False,
    },
    "number_or_null": {"anyOf": [{"type": "number", "minimum": 0, "maximum": 1}, {"type": "null"}]},
}

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string", "maxLength": 12}, "unit": {"enum": ["c", "f"]}},
                "required": ["city", "unit"],
                "additionalProperties": False,
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "add",
            "parameters": {
                "type": "object",
                "properties": {"a": {"type": "integer", "minimum": -100, "maximum": 100}, "b": {"type": "integer"}},
                "required": ["a", "b"],
                "additionalProperties": False,
            },
        },
    },
]


def _drive(grammar: Grammar, pick, limit: int = 300) -> tuple[list[int], list[float]]:
    ids, timings = [], []
    while not grammar.is_done():
        assert len(ids) < limit, "the constraint never finished"
        start = time.perf_counter()
        mask = grammar.allowed()
        timings.append(time.perf_counter() - start)
        assert mask.shape == (grammar.vocab_size,) and mask.any()
        token = pick(np.flatnonzero(mask))
        grammar.advance(token)
        ids.append(token)
    return ids, timings


def _pickers(seed: int):
    rng = random.Random(seed)
    return {"random": lambda allowed: int(rng.choice(allowed)), "lowest": lambda allowed: int(allowed[0])}


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_json_schema_output_is_valid(smollm2, name):
    schema = SCHEMAS[name]
    for seed in range(3):
        for picker, pick in _pickers(seed).items():
            ids, _ = _drive(Grammar.json_schema(smollm2, schema), pick)
            text = smollm2.decode(ids)
            jsonschema.validate(json.loads(text), schema)
            if picker == "lowest":
                break  # deterministic: one run is enough


@pytest.mark.parametrize("style", ["hermes", "fak", "llama3", "mistral"])
def test_tool_call_output_parses(smollm2, style):
    by_name = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
    for seed in range(3):
        for name in (None, "add"):
            for pick in _pickers(seed).values():
                ids, _ = _drive(Grammar.tool_call(smollm2, TOOLS, name=name, style=style), pick)
                text = smollm2.decode(ids, skip_special=False)
                content, calls = parse_tool_calls(text, style)
                assert content == "" and len(calls) == 1, text
                assert name is None or calls[0].name == name
                jsonschema.validate(json.loads(calls[0].arguments), by_name[calls[0].name])


def test_hermes_syntax(smollm2):
    ids, _ = _drive(Grammar.tool_call(smollm2, TOOLS, name="add", style="hermes"), _pickers(0)["lowest"])
    text = smollm2.decode(ids)
    assert text.startswith('<tool_call>\n{"name": "add", "arguments": {"a": ') and text.endswith("}}\n</tool_call>")


def test_mask_takes_milliseconds(smollm2):
    grammar = Grammar.json_schema(smollm2, SCHEMAS["nested_arrays"])
    _, timings = _drive(grammar, _pickers(7)["random"])
    grammar = Grammar.tool_call(smollm2, TOOLS, name=None, style="hermes")
    _, more = _drive(grammar, _pickers(7)["random"])
    timings = np.array(timings + more) * 1e3
    print(f"\nmask over {smollm2.vocab_size} tokens: mean {timings.mean():.3f} ms, max {timings.max():.3f} ms, n={len(timings)}")
    assert np.median(timings) < 5.0 and timings.max() < 50.0


def test_done_then_only_eos(smollm2):
    grammar = Grammar.json_schema(smollm2, {"enum": ["yes"]})
    ids, _ = _drive(grammar, _pickers(0)["lowest"])
    assert smollm2.decode(ids) == '"yes"' and grammar.is_accepting()
    assert list(np.flatnonzero(grammar.allowed())) == list(smollm2.eos_ids)


def test_special_tokens_in_grammars(smollm2, byte_tok):
    """Specials are written `<[id]>`; for the ByteTokenizer a literal spelled like one stays text."""
    end = smollm2.token_to_id("<|im_end|>")
    ids, _ = _drive(Grammar.lark(smollm2, f'start: <[{end}]> "x"'), _pickers(0)["lowest"])
    assert smollm2.decode(ids, skip_special=False) == "<|im_end|>x" and ids[0] == end
    grammar = Grammar.lark(byte_tok, 'start: "<|im_end|>x"')
    assert not grammar.allowed()[byte_tok.token_to_id("<|im_end|>")]
    ids, _ = _drive(grammar, _pickers(0)["random"])
    assert ids == list(b"<|im_end|>x")


def test_byte_tokenizer(byte_tok):
    schema = SCHEMAS["enum_and_range"]
    for pick in _pickers(3).values():
        ids, _ = _drive(Grammar.json_schema(byte_tok, schema), pick)
        jsonschema.validate(json.loads(byte_tok.decode(ids)), schema)
        ids, _ = _drive(Grammar.tool_call(byte_tok, TOOLS, name=None, style="fak"), pick)
        assert len(parse_tool_calls(byte_tok.decode(ids), "fak")[1]) == 1


def test_errors(smollm2):
    with pytest.raises(GrammarError, match="nope"):
        Grammar.tool_call(smollm2, TOOLS, name="nope", style="hermes")
    with pytest.raises(GrammarError, match="style"):
        Grammar.tool_call(smollm2, TOOLS, name=None, style="xml")
    with pytest.raises(GrammarError, match="Lark"):
        Grammar.lark(smollm2, "start: undefined_rule")
    grammar = Grammar.json_schema(smollm2, {"type": "integer"})
    with pytest.raises(GrammarError, match="not allowed"):
        grammar.advance(smollm2.token_to_id("Ġworld"))


def test_tags_that_are_special_tokens():
    """A vocabulary where <tool_call> is a special token gets it by id, not spelled out."""
    from fakcore.text.byte_tokenizer import ByteTokenizer

    tok = ByteTokenizer(["<tool_call>", "</tool_call>", "<|end|>"], eos="<|end|>")
    ids, _ = _drive(Grammar.tool_call(tok, TOOLS, name="add", style="hermes"), _pickers(1)["random"])
    assert ids[0] == tok.token_to_id("<tool_call>") and ids[-1] == tok.token_to_id("</tool_call>")
    assert parse_tool_calls(tok.decode(ids, skip_special=False), "hermes")[1][0].name == "add"


def _codex_apply_patch_grammar() -> str:
    from pathlib import Path

    body = json.loads((Path(__file__).parents[2] / "data" / "codex" / "responses_1.json").read_text())
    [tool] = [t for t in body["tools"] if t.get("type") == "custom" and t["name"] == "apply_patch"]
    assert tool["format"]["syntax"] == "lark"
    return tool["format"]["definition"]


def test_codexs_apply_patch_grammar_constrains_a_custom_tool(smollm2):
    """The lark grammar Codex sends with its freeform apply_patch tool (captured from the real CLI): a real
    patch is accepted token by token, text that is no patch is refused, and whatever a sampler picks from
    the mask begins as a patch."""
    grammar = _codex_apply_patch_grammar()
    patch = "*** Begin Patch\n*** Add File: hello.txt\n+Hello, world\n*** Update File: a.py\n@@ def f():\n-    return 1\n+    return 2\n*** End Patch\n"
    c = Grammar.custom(smollm2, "lark", grammar)
    for token in smollm2.encode(patch):
        c.advance(token)
    assert c.is_accepting()
    bad = Grammar.custom(smollm2, "lark", grammar)
    with pytest.raises(GrammarError):
        for token in smollm2.encode("Sure! Here is the patch:"):
            bad.advance(token)
    c = Grammar.custom(smollm2, "lark", grammar)
    rng = random.Random(0)
    ids = []
    for _ in range(12):
        ids.append(int(rng.choice(np.flatnonzero(c.allowed()))))
        c.advance(ids[-1])
    text, head = smollm2.decode(ids), "*** Begin Patch\n"
    assert text.startswith(head) if len(text) >= len(head) else head.startswith(text), text


def test_a_regex_custom_tool_and_a_bad_syntax(smollm2):
    c = Grammar.custom(smollm2, "regex", r"[0-9]{3}-[0-9]{4}")
    for token in smollm2.encode("555-1234"):
        c.advance(token)
    assert c.is_accepting()
    with pytest.raises(GrammarError, match="syntax"):
        Grammar.custom(smollm2, "ebnf", "x")
