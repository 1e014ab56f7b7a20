"""Chat templates: render a conversation to the prompt text a model was trained on.

Templates are the Jinja source shipped with a model (GGUF `tokenizer.chat_template`, or
`tokenizer_config.json`). They run in a sandboxed Jinja environment set up like transformers'
`apply_chat_template` (trim_blocks, lstrip_blocks, loop controls, `raise_exception`, `strftime_now`,
a `tojson` that does not HTML-escape and takes `indent`/`separators`/`sort_keys`, `{% generation %}`),
so a template renders here exactly as it does there.

Messages follow HuggingFace's convention:
    {"role": "system" | "user" | "assistant" | "tool", "content": str,
     "tool_calls": [{"id", "type": "function", "function": {"name", "arguments": {...}}}],
     "tool_call_id": str, "name": str}
Keys whose value is None are dropped (as transformers does); tool-call `arguments` given as a JSON
string (OpenAI's wire form) are parsed to the dict templates expect.

The fak tool format
-------------------
Templates that render `tools` in a syntax fak can parse (`tool_style` "hermes", "llama3" or
"mistral") get the tools and the tool turns natively. For every other template (`tool_style` "fak",
e.g. SmolLM2's, which ignores `tools`), fak writes the tools into the system prompt itself, merged
after an existing system message (or as a new first system message):

    # Tools

    You can call the following tools. Each line is one tool: its name, description and the JSON
    Schema of its arguments.
    {"name": "get_weather", "description": "...", "parameters": {...}}

    To call tools, reply with one line per call, in exactly this form:
    <tool_call>{"name": "<tool name>", "arguments": <arguments as a JSON object>}</tool_call>
    The results come back in a user message, one <tool_response>...</tool_response> block per call.

and renders past tool turns as text in the same format:
- an assistant message's tool calls become lines `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`
  after its content;
- a run of consecutive tool messages becomes one user message holding
  `<tool_response>\n{content}\n</tool_response>` per result.

Templates that refuse a system role (Gemma's raise_exception) get the system text folded into the
first user message, separated by a blank line, and are rendered again.
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from functools import lru_cache
from typing import Any

import jinja2
import jinja2.ext
import jinja2.meta
import jinja2.nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment


class ChatTemplateError(Exception):
    """A chat template does not compile, or refuses the conversation (its `raise_exception`)."""


TOOL_PROMPT_HEADER = (
    "# Tools\n\n"
    "You can call the following tools. Each line is one tool: its name, description and the JSON "
    "Schema of its arguments.\n"
)
TOOL_PROMPT_FOOTER = (
    "\n\nTo call tools, reply with one line per call, in exactly this form:\n"
    '<tool_call>{"name": "<tool name>", "arguments": <arguments as a JSON object>}</tool_call>\n'
    "The results come back in a user message, one <tool_response>...</tool_response> block per call."
)


# ---- the Jinja environment (transformers' apply_chat_template, rebuilt) ---------------------------------


class _GenerationTag(jinja2.ext.Extension):
    """`{% generation %}...{% endgeneration %}` marks assistant text for training masks; rendering keeps the body."""

    tags = {"generation"}

    def parse(self, parser: Any) -> jinja2.nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

    def _render(self, caller: Any) -> str:
        return caller()


class _Namespace(jinja2.utils.Namespace):
    """`namespace()` that refuses underscore-prefixed attributes (a sandbox escape route)."""

    def __init__(*args: Any, **kwargs: Any) -> None:  # Jinja's own signature trick: `namespace(self=...)` works
        self, args = args[0], args[1:]
        attrs = dict(*args, **kwargs)
        for name in attrs:
            _Namespace._check(name)
        jinja2.utils.Namespace.__init__(self, attrs)

    def __setitem__(self, name: str, value: Any) -> None:
        _Namespace._check(name)
        jinja2.utils.Namespace.__setitem__(self, name, value)

    @staticmethod
    def _check(name: Any) -> None:
        if isinstance(name, str) and name.startswith("_"):
            raise jinja2.exceptions.SecurityError(f"chat templates cannot set {name!r} on a namespace")


class _Dict:
    """`dict(...)` for templates, without exposing the dict type itself."""

    def __call__(self, *args: Any, **kwargs: Any) -> dict:
        return dict(*args, **kwargs)

    def fromkeys(self, *args: Any, **kwargs: Any) -> dict:
        return dict.fromkeys(*args, **kwargs)


def _raise_exception(message: str) -> None:
    raise jinja2.exceptions.TemplateError(message)


def _tojson(x: Any, ensure_ascii: bool = False, indent: Any = None, separators: Any = None, sort_keys: bool = False) -> str:
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


@lru_cache(maxsize=1)
def _environment() -> ImmutableSandboxedEnvironment:
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[_GenerationTag, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    env.globals["dict"] = _Dict()
    env.globals["namespace"] = _Namespace
    return env


# ---- the template --------------------------------------------------------------------------------------

_TOOL_ROLE_LITERAL = re.compile(r"""['"](tool|ipython|tool_results)['"]""")


def _detect_tool_style(source: str, supports_tools: bool) -> str:
    """The tool-call syntax the template teaches, when it is one fak parses; else "fak"."""
    if not supports_tools:
        return "fak"
    if "<tool_call>" in source:
        return "hermes"  # Qwen2.5, Hermes, ...: <tool_call>{"name", "arguments"}</tool_call>
    if "[TOOL_CALLS]" in source:
        return "mistral"  # [TOOL_CALLS] [{"name", "arguments", "id"}]
    if "<|start_header_id|>" in source and "parameters" in source:
        return "llama3"  # a bare {"name", "parameters"} reply
    return "fak"


class ChatTemplate:
    """One model's chat template, compiled once."""

    source: str  # the Jinja text
    name: str  # for error messages (the model or file it came from)
    supports_tools: bool  # the template itself renders `tools`
    tool_style: str  # "hermes" | "llama3" | "mistral" when native tool syntax is known, else "fak"
    renders_tool_calls: bool  # the template reads assistant `tool_calls`
    renders_tool_results: bool  # the template has a branch for tool-role messages

    def __init__(self, source: str, *, bos_token: str = "", eos_token: str = "", name: str = ""):
        self.source = source
        self.name = name or "chat template"
        self.bos_token = bos_token
        self.eos_token = eos_token
        env = _environment()
        try:
            ast = env.parse(source)
            self._template = env.from_string(source)
        except jinja2.exceptions.TemplateSyntaxError as e:
            raise ChatTemplateError(f"{self.name}: line {e.lineno}: {e.message}") from e
        variables = jinja2.meta.find_undeclared_variables(ast)
        self.supports_tools = bool({"tools", "custom_tools"} & variables)
        self.tool_style = _detect_tool_style(source, self.supports_tools)
        self.renders_tool_calls = "tool_calls" in source
        self.renders_tool_results = bool(_TOOL_ROLE_LITERAL.search(source))

    @classmethod
    def from_tokenizer(cls, tokenizer: Any) -> ChatTemplate | None:
        """The template a tokenizer's source carries, with its bos/eos tokens; None when it has none."""
        if not tokenizer.chat_template:
            return None
        return cls(
            tokenizer.chat_template,
            bos_token=tokenizer.bos_token,
            eos_token=tokenizer.eos_token,
            name=tokenizer.source,
        )

    def render(
        self,
        messages: list[dict],
        *,
        tools: list[dict] | None = None,
        add_generation_prompt: bool = True,
        **extra: Any,
    ) -> str:
        """The prompt text. `extra` reaches the template as variables (e.g. `date_string`)."""
        msgs = [_plain_message(m) for m in messages]
        native = self.tool_style != "fak"
        if tools and not native:
            msgs = _with_tool_prompt(msgs, tools)
            tools = None
        if not (native and self.renders_tool_calls):
            msgs = [_tool_calls_as_text(m) for m in msgs]
        if not (native and self.renders_tool_results):
            msgs = _tool_results_as_text(msgs)
        variables = {"bos_token": self.bos_token, "eos_token": self.eos_token, **extra}
        try:
            return self._render(msgs, tools, add_generation_prompt, variables)
        except jinja2.exceptions.TemplateError as first:
            folded = _fold_system(msgs)
            if folded is None:
                raise ChatTemplateError(f"{self.name}: {first}") from first
            try:  # templates without a system role: retry with the system text in the first user turn
                return self._render(folded, tools, add_generation_prompt, variables)
            except jinja2.exceptions.TemplateError:
                raise ChatTemplateError(f"{self.name}: {first}") from first

    def _render(self, messages: list[dict], tools: Any, add_generation_prompt: bool, variables: dict) -> str:
        context = {"documents": None, **variables}  # transformers always passes `documents`
        return self._template.render(
            messages=messages, tools=tools, add_generation_prompt=add_generation_prompt, **context
        )


# ---- message rewriting ---------------------------------------------------------------------------------


def _plain(value: Any) -> Any:
    """A fresh copy built of JSON types only (templates must not reach methods of richer objects)."""
    if value is None or type(value) in (str, int, float, bool):
        return value
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    # Subclasses (enums, numpy scalars...) carry methods the sandbox does not know; keep the base value.
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, int):
        return int.__int__(value)
    if isinstance(value, float):
        return float.__float__(value)
    return f"<{type(value).__name__}>"


def _plain_message(message: dict) -> dict:
    msg = {k: _plain(v) for k, v in message.items() if v is not None}
    calls = msg.get("tool_calls")
    if isinstance(calls, list):
        for call in calls:
            fn = call.get("function") if isinstance(call, dict) else None
            if isinstance(fn, dict) and isinstance(fn.get("arguments"), str):
                try:
                    parsed = json.loads(fn["arguments"])
                except json.JSONDecodeError:
                    continue
                if isinstance(parsed, dict):
                    fn["arguments"] = parsed
    return msg


def tool_prompt(tools: list[dict]) -> str:
    """The fak tool format's system-prompt section for these tools."""
    lines = [json.dumps(t.get("function", t), ensure_ascii=False) for t in tools]
    return TOOL_PROMPT_HEADER + "\n".join(lines) + TOOL_PROMPT_FOOTER


def _append_text(content: Any, text: str, sep: str = "\n\n") -> Any:
    if isinstance(content, list):  # content parts
        return [*content, {"type": "text", "text": text}]
    return f"{content}{sep}{text}" if content else text


def _with_tool_prompt(messages: list[dict], tools: list[dict]) -> list[dict]:
    prompt = tool_prompt(tools)
    if messages and messages[0].get("role") == "system":
        first = dict(messages[0], content=_append_text(messages[0].get("content"), prompt))
        return [first, *messages[1:]]
    return [{"role": "system", "content": prompt}, *messages]


def format_tool_call(name: str, arguments: Any) -> str:
    """One call in the fak format."""
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False) + "</tool_call>"


def _tool_calls_as_text(message: dict) -> dict:
    calls = message.get("tool_calls")
    if message.get("role") != "assistant" or not calls:
        return message
    lines = []
    for call in calls:
        fn = call.get("function", call)
        lines.append(format_tool_call(fn.get("name", ""), fn.get("arguments", {})))
    out = {k: v for k, v in message.items() if k != "tool_calls"}
    out["content"] = _append_text(message.get("content"), "\n".join(lines), sep="\n")
    return out


def _tool_results_as_text(messages: list[dict]) -> list[dict]:
    out: list[dict] = []
    for m in messages:
        if m.get("role") != "tool":
            out.append(m)
            continue
        content = m.get("content", "")
        if not isinstance(content, str):
            content = json.dumps(content, ensure_ascii=False)
        block = f"<tool_response>\n{content}\n</tool_response>"
        if out and out[-1].get("_fak_tool_results"):
            out[-1] = dict(out[-1], content=out[-1]["content"] + "\n" + block)
        else:
            out.append({"role": "user", "content": block, "_fak_tool_results": True})
    return [{k: v for k, v in m.items() if k != "_fak_tool_results"} for m in out]


def _fold_system(messages: list[dict]) -> list[dict] | None:
    """The conversation with a leading system message moved into the first user message; None if
    there is nothing to fold."""
    if not messages or messages[0].get("role") != "system":
        return None
    system, rest = messages[0], messages[1:]
    for n, m in enumerate(rest):
        if m.get("role") == "user":
            text = system.get("content", "")
            if isinstance(text, list):
                text = "".join(p.get("text", "") for p in text if isinstance(p, dict))
            content = m.get("content", "")
            merged = [{"type": "text", "text": text + "\n\n"}, *content] if isinstance(content, list) else f"{text}\n\n{content}"
            return [*rest[:n], dict(m, content=merged), *rest[n + 1 :]]
    return [{"role": "user", "content": system.get("content", "")}, *rest]
