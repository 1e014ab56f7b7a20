"""ChatTemplate: identical output to transformers' apply_chat_template, plus fak's tool fallback."""

from __future__ import annotations

import json
from datetime import datetime

import pytest

from fakcore.text.chat import ChatTemplate, ChatTemplateError, tool_prompt

from .support import TEMPLATES

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["c", "f"]}},
            "required": ["city"],
        },
    },
}
ADD = {
    "type": "function",
    "function": {
        "name": "add",
        "description": "Add two integers.",
        "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}},
    },
}
TOOLS = [WEATHER, ADD]

SYSTEM = {"role": "system", "content": "You are a helpful assistant. Réponds en français si besoin."}
CHAT = [
    {"role": "user", "content": "Hi there!"},
    {"role": "assistant", "content": "Hello! How can I help? 😀"},
    {"role": "user", "content": "  What's 2+2?  "},
]
CALL = {
    "role": "assistant",
    "content": None,  # as OpenAI sends it; dropped like transformers does
    "tool_calls": [
        {"id": "call00001", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
    ],
}
TOOL_TURN = [
    {"role": "user", "content": "Weather in Paris?"},
    CALL,
    {"role": "tool", "tool_call_id": "call00001", "name": "get_weather", "content": '{"temp": 21, "sky": "clear"}'},
    {"role": "assistant", "content": "It is 21°C and clear in Paris."},
    {"role": "user", "content": "Thanks!"},
]


def _template(name: str) -> str:
    return (TEMPLATES / name).read_text()


def _hf(hf_tok, source, messages, **kwargs) -> str:
    kwargs.setdefault("add_generation_prompt", True)  # our default; transformers' is False
    return hf_tok.apply_chat_template(messages, chat_template=source, tokenize=False, **kwargs)


def _ours(hf_tok, source, messages, **kwargs) -> str:
    template = ChatTemplate(source, bos_token=hf_tok.bos_token, eos_token=hf_tok.eos_token)
    return template.render(messages, **kwargs)


CASES = {
    # template file -> conversations it accepts (tools, if any, go with the conversation)
    "qwen2_5.jinja": [
        (CHAT, None),
        ([SYSTEM, *CHAT], None),
        ([SYSTEM, *TOOL_TURN], TOOLS),
        (TOOL_TURN, TOOLS),
        ([*TOOL_TURN[:2], TOOL_TURN[2], dict(TOOL_TURN[2], content="second result"), TOOL_TURN[3]], TOOLS),
    ],
    "llama3_1.jinja": [
        (CHAT, None),
        ([SYSTEM, *CHAT], None),
        ([SYSTEM, *TOOL_TURN], TOOLS),
        (TOOL_TURN, [WEATHER]),
    ],
    "mistral_v3.jinja": [
        (CHAT, None),
        ([SYSTEM, *CHAT], None),
        (TOOL_TURN, TOOLS),
        ([SYSTEM, *TOOL_TURN], [WEATHER]),
    ],
    "gemma2.jinja": [(CHAT, None), (CHAT[:1], None)],
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_templates_render_like_transformers(hf_smollm2, name):
    source = _template(name)
    for messages, tools in CASES[name]:
        for gen in (True, False):
            expected = _hf(hf_smollm2, source, messages, tools=tools, add_generation_prompt=gen)
            assert _ours(hf_smollm2, source, messages, tools=tools, add_generation_prompt=gen) == expected


def test_smollm2_template_renders_like_transformers(smollm2, hf_smollm2):
    template = ChatTemplate.from_tokenizer(smollm2)
    assert template is not None
    for messages in (CHAT, [SYSTEM, *CHAT], CHAT[:1]):
        for gen in (True, False):
            expected = hf_smollm2.apply_chat_template(messages, tokenize=False, add_generation_prompt=gen)
            assert template.render(messages, add_generation_prompt=gen) == expected


def test_extra_variables_reach_the_template(hf_smollm2):
    source = _template("llama3_1.jinja")
    kwargs = {"tools": [WEATHER], "date_string": "01 Jan 2030", "tools_in_user_message": False}
    ours = _ours(hf_smollm2, source, TOOL_TURN, **kwargs)
    assert ours == _hf(hf_smollm2, source, TOOL_TURN, **kwargs)
    assert "Today Date: 01 Jan 2030" in ours


def test_environment_features_match_transformers(hf_smollm2):
    """strftime_now, namespace, loop controls, dict(), tojson options, {% generation %}, raise_exception."""
    source = (
        "{%- set ns = namespace(n=0) -%}"
        "{%- for m in messages -%}{%- if loop.index > 2 %}{% break %}{% endif -%}"
        "{%- set ns.n = ns.n + 1 -%}{% generation %}{{ m.content | tojson(indent=2, sort_keys=true) }}{% endgeneration %}"
        "{%- endfor -%}|{{ ns.n }}|{{ strftime_now('%Y') }}|{{ dict(a=1) | tojson }}|{{ '<&>' | tojson }}"
        "{%- if messages | length > 5 %}{{ raise_exception('too long') }}{% endif %}"
    )
    messages = [{"role": "user", "content": {"b": 1, "a": "é"}}, {"role": "user", "content": "x"}, {"role": "user", "content": "y"}]
    ours = _ours(hf_smollm2, source, messages)
    assert ours == _hf(hf_smollm2, source, messages)
    assert f"|2|{datetime.now().year}|" in ours and '"<&>"' in ours
    with pytest.raises(ChatTemplateError, match="too long"):
        ChatTemplate(source).render(messages * 2)


def test_sandbox():
    with pytest.raises(ChatTemplateError):
        ChatTemplate("{{ messages.append(1) }}").render([{"role": "user", "content": "x"}])
    with pytest.raises(ChatTemplateError, match="namespace"):
        ChatTemplate("{% set ns = namespace(_x=1) %}").render([])
    with pytest.raises(ChatTemplateError, match="line 1"):
        ChatTemplate("{% for %}")
    with pytest.raises(ChatTemplateError, match="unsafe"):
        ChatTemplate("{{ messages.__class__.__mro__ }}").render([])


def test_tool_support_detection(smollm2):
    expected = {
        "qwen2_5.jinja": (True, "hermes"),
        "llama3_1.jinja": (True, "llama3"),
        "mistral_v3.jinja": (True, "mistral"),
        "gemma2.jinja": (False, "fak"),
    }
    for name, (supports, style) in expected.items():
        template = ChatTemplate(_template(name))
        assert (template.supports_tools, template.tool_style) == (supports, style), name
    smol = ChatTemplate.from_tokenizer(smollm2)
    assert (smol.supports_tools, smol.tool_style, smol.renders_tool_calls, smol.renders_tool_results) == (
        False,
        "fak",
        False,
        False,
    )


def test_fallback_puts_tools_in_the_system_prompt(smollm2, hf_smollm2):
    """SmolLM2's template ignores `tools`: the documented fak format goes into the system prompt (merged
    with an existing one), tool calls and results become text. Equal to transformers rendering the
    rewritten conversation."""
    template = ChatTemplate.from_tokenizer(smollm2)
    prompt = tool_prompt(TOOLS)
    assert prompt.count("\n{") == 2 and '<tool_call>{"name": "<tool name>"' in prompt
    for line in prompt.splitlines():
        if line.startswith("{"):
            assert json.loads(line)["name"] in {"get_weather", "add"}

    rewritten = [
        {"role": "system", "content": SYSTEM["content"] + "\n\n" + prompt},
        TOOL_TURN[0],
        {"role": "assistant", "content": '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'},
        {"role": "user", "content": '<tool_response>\n{"temp": 21, "sky": "clear"}\n</tool_response>'},
        *TOOL_TURN[3:],
    ]
    ours = template.render([SYSTEM, *TOOL_TURN], tools=TOOLS)
    assert ours == hf_smollm2.apply_chat_template(rewritten, tokenize=False, add_generation_prompt=True)

    # no system message: the tool prompt becomes the system message
    ours = template.render(CHAT, tools=TOOLS)
    assert ours.startswith("<|im_start|>system\n# Tools\n") and "SmolLM" not in ours


def test_fallback_tool_history_without_tools(smollm2):
    """History with calls but no tools in this request: still rendered as text, never dropped."""
    template = ChatTemplate.from_tokenizer(smollm2)
    calls = dict(
        CALL,
        content="Let me check.",
        tool_calls=[*CALL["tool_calls"], {"id": "c2", "type": "function", "function": {"name": "add", "arguments": '{"a": 1, "b": 2}'}}],
    )
    messages = [TOOL_TURN[0], calls, TOOL_TURN[2], dict(TOOL_TURN[2], content="3")]
    out = template.render(messages)
    assert (
        "<|im_start|>assistant\nLet me check.\n"
        '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>\n'
        '<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}</tool_call><|im_end|>\n'
        "<|im_start|>user\n<tool_response>\n"
    ) in out
    assert out.count("<|im_start|>user") == 2  # the two results share one user turn


def test_template_without_system_role_gets_it_folded(hf_smollm2):
    source = _template("gemma2.jinja")
    ours = _ours(hf_smollm2, source, [SYSTEM, *CHAT], tools=[WEATHER])
    folded = [dict(CHAT[0], content=SYSTEM["content"] + "\n\n" + tool_prompt([WEATHER]) + "\n\n" + CHAT[0]["content"]), *CHAT[1:]]
    assert ours == _hf(hf_smollm2, source, folded, add_generation_prompt=True)
    with pytest.raises(ChatTemplateError, match="alternate"):
        _ours(hf_smollm2, source, [CHAT[0], CHAT[0]])


def test_arguments_as_json_text_are_parsed(hf_smollm2):
    source = _template("qwen2_5.jinja")
    as_text = [TOOL_TURN[0], dict(CALL, tool_calls=[{**CALL["tool_calls"][0], "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}])]
    assert _ours(hf_smollm2, source, as_text, tools=TOOLS) == _hf(hf_smollm2, source, TOOL_TURN[:2], tools=TOOLS, add_generation_prompt=True)
