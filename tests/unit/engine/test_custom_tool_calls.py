"""A custom (freeform) tool's grammar constrains a call the model chooses to make, not only a forced one.

A scripted model stands in for the transformer: at each step it prefers the next token of the text it
"wants" to write (any other token scores lower, in a fixed order), so what comes out is what it wanted
wherever the grammar allows it, and the grammar's choice wherever it does not.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from fakcore.engine.loader import load_model, make_backend
from fakcore.engine.prompt import RequestError
from fakcore.engine.sequence import Sequence, make_grammar
from fakcore.protocol import CUSTOM_TOOL_INPUT, ChatMessage, GenerateRequest, Sampling, ToolSpec
from fakcore.text.byte_tokenizer import ByteTokenizer
from fakcore.text.constrain import Grammar, GrammarError
from fakcore.text.toolcalls import CALL_CLOSE, STYLES, call_opening, freeform_opening

# A narrowed apply_patch grammar: whatever the grammar's choice, a patch ends within a few dozen tokens.
PATCH_GRAMMAR = r'''start: begin_patch hunk end_patch
begin_patch: "*** Begin Patch" LF
end_patch: "*** End Patch" LF
hunk: "*** Add File: " filename LF "+" /[a-z]{1,6}/ LF
filename: "hello.txt" | "notes.txt"
%import common.LF
'''
PATCH = re.compile(r"\*\*\* Begin Patch\n\*\*\* Add File: (hello|notes)\.txt\n\+[a-z]{1,6}\n\*\*\* End Patch\n")
APPLY_PATCH = ToolSpec(name="apply_patch", kind="custom", parameters={"type": "object", "properties": {"input": {"type": "string"}}},
                       format={"type": "grammar", "syntax": "lark", "definition": PATCH_GRAMMAR})
PHONE = ToolSpec(name="phone", kind="custom", parameters=APPLY_PATCH.parameters,
                 format={"type": "grammar", "syntax": "regex", "definition": r"[0-9]{3}-[0-9]{4}"})
WEATHER = ToolSpec(name="get_weather", parameters={"type": "object", "properties": {"city": {"enum": ["Paris", "Rome"]}},
                                                   "required": ["city"]})


@pytest.fixture(scope="module")
def model():
    return load_model("synthetic", make_backend("reference"))  # no tool syntax in its template: fak's own


def request(tools: list[ToolSpec], tool_choice: str = "auto", name: str = "") -> GenerateRequest:
    return GenerateRequest(request_id="r", model="synthetic", messages=[ChatMessage(role="user", content="Add a file.")],
                           tools=tools, tool_choice=tool_choice, tool_choice_name=name,
                           sampling=Sampling(max_tokens=200, temperature=0.0))


def generate(model, req: GenerateRequest, wants: str) -> tuple[Sequence, str]:
    """Run one Sequence on the scripted model; -> (the finished sequence, its content)."""
    seq = Sequence(request=req, prompt=[1, 2, 3], cache=None, model=model, grammar=make_grammar(model, req))
    wanted = model.tokenizer.encode(wants)
    fallback = -1 - np.arange(model.config.vocab_size, dtype=np.float32) / model.config.vocab_size
    fallback[list(model.config.eos_ids)] = 0.0  # after the text it wanted, the model would rather stop
    content = []
    while not seq.done:
        logits = fallback.copy()
        n = len(seq.generated)
        if seq.generated == wanted[:n] and n < len(wanted):
            logits[wanted[n]] = 10.0
        content.append(seq.accept(logits))
    return seq, "".join(content)


def call_input(seq: Sequence, index: int = 0) -> str:
    return json.loads(seq.tool_calls[index].arguments)[CUSTOM_TOOL_INPUT]


def test_a_custom_call_the_model_opens_under_auto_follows_the_tools_grammar(model):
    patch = "*** Begin Patch\n*** Add File: notes.txt\n+hi\n*** End Patch\n"
    opened = 'Sure.<tool_call>{"name": "apply_patch", "arguments": {"input": "'
    seq, content = generate(model, request([WEATHER, APPLY_PATCH]), opened + patch)
    assert content == "Sure." and seq.finish_reason == "tool_calls"
    assert seq.tool_calls[0].name == "apply_patch" and call_input(seq) == patch
    # What it wants to write is no patch (and JSON-escaped): the grammar makes it one all the same.
    seq, content = generate(model, request([WEATHER, APPLY_PATCH]), opened + 'hello"}}</tool_call>')
    assert content == "Sure." and seq.tool_calls[0].name == "apply_patch" and PATCH.fullmatch(call_input(seq))


def test_a_function_call_then_a_regex_custom_call_under_auto(model):
    wants = ('<tool_call>{"name": "get_weather", "arguments": {"city": "Rome"}}</tool_call>\n'
             '<tool_call>{"name": "phone", "arguments": {"input": "555-12345"}}</tool_call>')
    seq, content = generate(model, request([WEATHER, APPLY_PATCH, PHONE]), wants)
    weather, phone = seq.tool_calls
    assert (weather.name, json.loads(weather.arguments)) == ("get_weather", {"city": "Rome"})
    assert phone.name == "phone" and call_input(seq, 1) == "555-1234"  # the regex ends it there
    assert content == "\n" and seq.finish_reason == "tool_calls"


def test_a_function_call_the_model_opens_follows_its_schema(model):
    seq, _ = generate(model, request([WEATHER, APPLY_PATCH]), '<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}')
    assert seq.tool_calls[0].name == "get_weather" and json.loads(seq.tool_calls[0].arguments)["city"] in ("Paris", "Rome")


def test_plain_text_under_auto_is_left_alone(model):
    seq, content = generate(model, request([WEATHER, APPLY_PATCH]), "No tool is needed: 42.")
    assert content == "No tool is needed: 42." and not seq.tool_calls and seq.finish_reason == "stop"


def test_required_with_only_custom_tools_is_forced(model):
    seq, content = generate(model, request([APPLY_PATCH], "required"), "I will not.")  # one tool: its input is the output
    assert content == "" and seq.tool_calls[0].name == "apply_patch" and PATCH.fullmatch(call_input(seq))
    seq, content = generate(model, request([APPLY_PATCH, PHONE], "required"), "I will not.")  # several: one of them
    assert content == "" and len(seq.tool_calls) == 1 and seq.tool_calls[0].name in ("apply_patch", "phone")
    grammar = PATCH if seq.tool_calls[0].name == "apply_patch" else re.compile(r"[0-9]{3}-[0-9]{4}")
    assert grammar.fullmatch(call_input(seq))


def test_required_with_functions_and_custom_tools_makes_one_valid_call(model):
    wants = '<tool_call>{"name": "phone", "arguments": {"input": "call me"}}</tool_call>'
    seq, content = generate(model, request([WEATHER, PHONE], "required"), wants)
    assert content == "" and [c.name for c in seq.tool_calls] == ["phone"]
    assert re.fullmatch(r"[0-9]{3}-[0-9]{4}", call_input(seq))
    seq, content = generate(model, request([WEATHER, PHONE], "required"), "Hello! " + wants)
    assert content == "" and len(seq.tool_calls) == 1  # no text first: a call, valid whichever it is
    call = seq.tool_calls[0]
    assert (json.loads(call.arguments)["city"] in ("Paris", "Rome") if call.name == "get_weather"
            else re.fullmatch(r"[0-9]{3}-[0-9]{4}", call_input(seq)))


@pytest.mark.parametrize("special", [False, True], ids=["tags-as-text", "tags-as-special-tokens"])
@pytest.mark.parametrize("style", STYLES)
def test_every_tool_call_style_opens_a_custom_call_as_the_sequence_reads_it(style, special):
    tok = ByteTokenizer(["<tool_call>", "</tool_call>", "[TOOL_CALLS]", "<|end|>"] if special else ["<|end|>"], eos="<|end|>")
    tools = [{"type": "function", "function": {"name": WEATHER.name, "parameters": WEATHER.parameters}}]
    free = {"apply_patch": ("lark", PATCH_GRAMMAR), "phone": ("regex", r"[0-9]{3}-[0-9]{4}")}
    lead = "" if style == "llama3" else "Let me see. "
    for required in (False, True):
        for text in (freeform_opening(style, "phone", CUSTOM_TOOL_INPUT) + "555-1234",
                     call_opening(style, "get_weather") + '{"city": "Rome"}}' + CALL_CLOSE[style]):
            g = Grammar.calls(tok, tools, free, key=CUSTOM_TOOL_INPUT, style=style, required=required)
            for token in tok.encode(("" if required else lead) + text):
                assert g.allowed()[token], (style, required, text)
                g.advance(token)
            assert g.is_accepting()
        g = Grammar.calls(tok, tools, free, key=CUSTOM_TOOL_INPUT, style=style, required=required)
        with pytest.raises(GrammarError):  # a custom call's input outside its grammar
            for token in tok.encode(("" if required else lead) + freeform_opening(style, "phone", CUSTOM_TOOL_INPUT) + "55x"):
                g.advance(token)


def test_a_custom_tool_without_a_grammar_is_a_one_string_function(model):
    free = ToolSpec(name="note", kind="custom", parameters=APPLY_PATCH.parameters, format={"type": "text"})
    req = request([free])
    assert make_grammar(model, req) is None  # nothing to constrain under auto
    seq, _ = generate(model, req, '<tool_call>{"name": "note", "arguments": {"input": "a \\"quoted\\" line"}}</tool_call>')
    assert seq.tool_calls[0].name == "note" and call_input(seq) == 'a "quoted" line'


def test_a_bad_custom_grammar_is_a_request_error_under_auto(model):
    bad = ToolSpec(name="bad", kind="custom", parameters=APPLY_PATCH.parameters,
                   format={"type": "grammar", "syntax": "lark", "definition": "start: nowhere"})
    with pytest.raises(RequestError, match="cannot constrain"):
        make_grammar(model, request([WEATHER, bad]))


def test_batched_and_alone_give_the_same_call(model):
    """The grammar is each sequence's own: run side by side with a plain one, a sequence makes the same call."""
    from fakcore.engine.prompt import build_prompt
    from fakcore.engine.scheduler import Scheduler

    def run(reqs):
        sched = Scheduler(model, lambda ev: None)
        seqs = [Sequence(request=r, prompt=build_prompt(model, r).ids, cache=model.transformer.new_cache(), model=model,
                         grammar=make_grammar(model, r)) for r in reqs]
        for s in seqs:
            sched.submit(s)
        while sched.active or sched.waiting:
            sched.step()
        return seqs

    custom = request([APPLY_PATCH], "required")
    plain = GenerateRequest(request_id="p", model="synthetic", messages=[ChatMessage(role="user", content="Hi")],
                            sampling=Sampling(max_tokens=20, temperature=0.0))
    [alone] = run([custom])
    together, _ = run([custom, plain])
    assert alone.tool_calls[0].arguments == together.tool_calls[0].arguments and PATCH.fullmatch(call_input(alone))
