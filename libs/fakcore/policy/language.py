"""The policy file's schema, its validation, and the decision for one tool call.

Validation names the file, the field path and what was expected; a file that fails never half-loads. A
decision names the rule that made it (`tools.send_email.args.to`, `tools.shell`, `default`…), so an
operator can find the line in the file from a refusal or an audit record.
"""

from __future__ import annotations

import fnmatch
import functools
import hashlib
import json
import math
import posixpath
import re
from dataclasses import dataclass, field
from typing import Any

import jsonschema

ACTIONS = ("allow", "deny", "ask")
PERIODS = {"s": 1.0, "sec": 1.0, "second": 1.0, "m": 60.0, "min": 60.0, "minute": 60.0, "h": 3600.0, "hour": 3600.0,
           "d": 86400.0, "day": 86400.0}

# Tools that move data out of the session or change the world: the built-in policy's sinks.
DEFAULT_SINKS = ("send_email", "send_message", "post_message", "transfer_money", "send_money", "make_payment",
                 "write_file", "delete_file", "shell", "run_command", "execute", "http_post", "http_request")


class PolicyError(ValueError):
    """A policy that cannot be used: names the file and the field."""


@dataclass(frozen=True)
class Decision:
    allow: bool
    rule: str  # the rule that decided: "tools.<name>[.args.<arg>|.schema|.untrusted…]", "default", "arguments"
    reason: str
    ask: bool = False  # the policy said "ask": denied here because no wire can pause for approval
    rate: Rate | None = None  # the allow still needs a token from this limit (checked by the caller)
    rate_rule: str = ""


@dataclass(frozen=True)
class Rate:
    count: int
    per_s: float

    def __str__(self) -> str:
        return f"{self.count} per {self.per_s:g}s"


@dataclass(frozen=True)
class ArgRule:
    name: str  # top-level argument, or a dotted path into nested objects
    regex: re.Pattern[str] | None = None
    enum: tuple[Any, ...] | None = None
    min: float | None = None
    max: float | None = None
    prefix: tuple[str, ...] = ()
    schema: dict[str, Any] | None = None
    required: bool = False

    def check(self, args: dict[str, Any]) -> str:
        """'' when the arguments satisfy this rule, else what is wrong."""
        found, value = _lookup(args, self.name)
        if not found:
            return f"argument {self.name!r} is required" if self.required else ""
        values = value if isinstance(value, list) and self.schema is None else [value]
        for v in values:
            problem = self._check_one(v)
            if problem:
                return f"argument {self.name!r} {problem}"
        return ""

    def _check_one(self, v: Any) -> str:
        if self.enum is not None and v not in self.enum:
            return f"= {_short(v)} is not one of {', '.join(_short(e) for e in self.enum)}"
        if self.regex is not None and not (isinstance(v, str) and self.regex.fullmatch(v)):
            return f"= {_short(v)} does not match /{self.regex.pattern}/"
        if self.min is not None or self.max is not None:
            if isinstance(v, bool) or not isinstance(v, int | float) or math.isnan(v):
                return f"= {_short(v)} is not a number"
            if self.min is not None and v < self.min:
                return f"= {_short(v)} is below the minimum {self.min:g}"
            if self.max is not None and v > self.max:
                return f"= {_short(v)} is above the maximum {self.max:g}"
        if self.prefix:
            if not isinstance(v, str):
                return f"= {_short(v)} is not a path"
            norm = posixpath.normpath(v) if v else v
            if not any(norm == p.rstrip("/") or norm.startswith(p if p.endswith("/") else p + "/") for p in self.prefix):
                return f"= {_short(v)} is outside {', '.join(self.prefix)}"
        if self.schema is not None:
            err = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(self.schema).iter_errors(v))
            if err is not None:
                return f"violates its schema: {err.message}"
        return ""


@dataclass(frozen=True)
class Constraint:
    """What an allowed call's arguments must satisfy."""

    args: tuple[ArgRule, ...] = ()
    schema: dict[str, Any] | None = None

    def check(self, args: dict[str, Any], rule: str) -> tuple[str, str]:
        """('', '') when satisfied, else (rule id, reason)."""
        if self.schema is not None:
            err = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(self.schema).iter_errors(args))
            if err is not None:
                where = ".".join(str(p) for p in err.absolute_path)
                return f"{rule}.schema", f"arguments violate the schema{' at ' + where if where else ''}: {err.message}"
        for a in self.args:
            problem = a.check(args)
            if problem:
                return f"{rule}.args.{a.name}", problem
        return "", ""


@dataclass(frozen=True)
class Untrusted:
    """What a sink call gets once untrusted content is in the session."""

    action: str = "deny"  # allow | deny | ask; allow + constraint = constrained
    constraint: Constraint | None = None
    reason: str = ""


@dataclass(frozen=True)
class ToolRule:
    name: str  # a tool name or a glob ("fs_*")
    action: str = "allow"
    reason: str = ""
    sink: bool = False
    constraint: Constraint = field(default_factory=Constraint)
    untrusted: Untrusted | None = None  # None: the file's top-level `untrusted`
    rate: Rate | None = None


SCREEN_MODES = ("quarantine", "flag")
REPLACE_MODES = ("whole", "spans")
_BLOCK = re.compile(r"b[0-9a-f]{32}")  # protocol.block_id


@dataclass(frozen=True)
class Screening:
    """The `screening:` section: how this key's tool results are screened and what a quarantine does.

    The adjudicator decides with it (thresholds, allowlist, mode); the gateway reads it to apply the verdicts
    it already holds (`replace`) and to know when those must be judged again for this key (`changes_verdicts`).
    """

    inline_threshold: float | None = None  # None: FAK_SCREEN_THRESHOLD
    model_threshold: float | None = None  # None: FAK_SCREEN_MODEL_THRESHOLD
    mode: str = "quarantine"  # quarantine | flag (verdicts computed and audited, nothing withheld or published)
    replace: str = "whole"  # YAML `quarantine:` whole | spans (only the offending characters are replaced)
    allow_tools: tuple[str, ...] = ()  # tool names or globs whose results are not screened
    allow_sources: tuple[str, ...] = ()  # MCP server names or globs: every `<server>__<tool>`'s results
    allow_blocks: frozenset[str] = frozenset()  # block ids (content hashes) that are not screened

    @property
    def changes_verdicts(self) -> bool:
        """Whether a verdict for this key may differ from what the settings alone give."""
        return (self.inline_threshold is not None or self.model_threshold is not None or self.mode == "flag"
                or bool(self.allow_tools or self.allow_sources or self.allow_blocks))

    @functools.cached_property
    def fingerprint(self) -> str:
        """Names what decides verdicts in this section: equal sections, equal verdicts (`replace` aside)."""
        what = [self.inline_threshold, self.model_threshold, self.mode, sorted(self.allow_tools), sorted(self.allow_sources),
                sorted(self.allow_blocks)]
        return "s" + hashlib.sha256(json.dumps(what).encode()).hexdigest()[:16]

    def allowed(self, tool: str, block: str, kind: str = "tool_result") -> str:
        """The allowlist rule that exempts this result from screening, '' when none does. Tools and sources
        exempt tool results only: a tool's description (MCP tool poisoning) is exempt by its block alone."""
        if block in self.allow_blocks:
            return "screening.allow.blocks"
        if kind != "tool_result":
            return ""
        for t in self.allow_tools:
            if tool == t or fnmatch.fnmatchcase(tool, t):
                return f"screening.allow.tools.{t}"
        server = tool.split("__", 1)[0] if "__" in tool else None
        for s in self.allow_sources:
            if server is not None and fnmatch.fnmatchcase(server, s):
                return f"screening.allow.sources.{s}"
        return ""


@dataclass(frozen=True)
class Policy:
    default: str = "allow"
    sinks: frozenset[str] = frozenset(DEFAULT_SINKS)
    untrusted: Untrusted = field(default_factory=Untrusted)
    rate: Rate | None = None
    tools: tuple[ToolRule, ...] = ()
    source: str = "<built-in>"
    screening: Screening = field(default_factory=Screening)

    def rule_for(self, tool: str) -> ToolRule | None:
        for r in self.tools:
            if r.name == tool:
                return r
        for r in self.tools:
            if any(ch in r.name for ch in "*?[") and fnmatch.fnmatchcase(tool, r.name):
                return r
        return None

    def is_sink(self, tool: str) -> bool:
        rule = self.rule_for(tool)
        return bool(rule and rule.sink) or tool in self.sinks or any(fnmatch.fnmatchcase(tool, s) for s in self.sinks)

    def decide(self, tool: str, arguments: str = "{}", *, tainted: bool = False) -> Decision:
        """The verdict on one call, rate limits aside (the decision carries the limit to charge)."""
        try:
            args = json.loads(arguments or "{}")
        except ValueError:
            return Decision(False, "arguments", f"the arguments of {tool!r} are not valid JSON")
        if not isinstance(args, dict):
            return Decision(False, "arguments", f"the arguments of {tool!r} are not a JSON object")
        rule = self.rule_for(tool)
        rid = f"tools.{rule.name}" if rule else "default"
        action = rule.action if rule else self.default
        if action != "allow":
            reason = (rule.reason if rule else "") or (f"tool {tool!r} is not allowed by policy" if rule
                                                        else f"tool {tool!r} is not listed and the default is {action}")
            return _refuse(action, rid, reason)
        if rule:
            bad_rule, problem = rule.constraint.check(args, rid)
            if bad_rule:
                return Decision(False, bad_rule, f"{tool}: {rule.reason or problem}")
        if tainted and self.is_sink(tool):
            u = rule.untrusted if rule and rule.untrusted else self.untrusted
            urid = f"{rid}.untrusted" if rule and rule.untrusted else "untrusted"
            why = u.reason or f"{tool!r} is a sink and the session holds untrusted content (a tool result)"
            if u.action != "allow":
                return _refuse(u.action, urid, why)
            if u.constraint is not None:
                bad_rule, problem = u.constraint.check(args, urid)
                if bad_rule:
                    return Decision(False, bad_rule, f"{tool}: {problem} ({why})")
        if rule and rule.rate:
            return Decision(True, rid, f"{tool!r} is allowed by policy", rate=rule.rate, rate_rule=f"{rid}.rate")
        if self.rate:
            return Decision(True, rid, f"{tool!r} is allowed by policy", rate=self.rate, rate_rule="rate")
        return Decision(True, rid, f"{tool!r} is allowed by policy")


def _refuse(action: str, rule: str, reason: str) -> Decision:
    if action == "ask":
        return Decision(False, rule, f"{reason}; it needs a human's approval, and this wire cannot pause a call", ask=True)
    return Decision(False, rule, reason)


def _lookup(args: dict[str, Any], path: str) -> tuple[bool, Any]:
    cur: Any = args
    for part in path.split("."):
        if not isinstance(cur, dict) or part not in cur:
            return False, None
        cur = cur[part]
    return True, cur


def _short(v: Any) -> str:
    text = json.dumps(v, ensure_ascii=False) if not isinstance(v, str) else repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


# ---------------------------------------------------------------------------------------------------------
# Parsing and validation
# ---------------------------------------------------------------------------------------------------------


class _Where:
    def __init__(self, source: str):
        self.source = source

    def fail(self, path: str, message: str) -> PolicyError:
        return PolicyError(f"{self.source}: {path}: {message}" if path else f"{self.source}: {message}")


def _mapping(w: _Where, path: str, value: Any, allowed: set[str]) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise w.fail(path, f"expected a mapping, got {type(value).__name__}")
    unknown = sorted(str(k) for k in value if k not in allowed)
    if unknown:
        raise w.fail(path, f"unknown field {unknown[0]!r} (expected one of: {', '.join(sorted(allowed))})")
    return value


def _action(w: _Where, path: str, value: Any) -> str:
    if value not in ACTIONS:
        raise w.fail(path, f"{value!r} is not one of {', '.join(ACTIONS)}")
    return value


def parse_rate(w: _Where, path: str, value: Any) -> Rate:
    m = re.fullmatch(r"\s*(\d+)\s*/\s*(\d*\.?\d*)\s*([a-z]+)\s*", str(value))
    if not m or m.group(3) not in PERIODS or int(m.group(1)) < 1:
        raise w.fail(path, f"{value!r} is not a rate like '10/minute', '5/s', '100/hour' or '2/10s'")
    n = float(m.group(2)) if m.group(2) else 1.0
    return Rate(int(m.group(1)), n * PERIODS[m.group(3)])


def _schema(w: _Where, path: str, value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise w.fail(path, "a JSON Schema must be a mapping")
    try:
        jsonschema.Draft202012Validator.check_schema(value)
    except jsonschema.SchemaError as exc:
        raise w.fail(path, f"not a valid JSON Schema: {exc.message}") from None
    return value


def _arg_rule(w: _Where, path: str, name: str, spec: Any) -> ArgRule:
    spec = _mapping(w, path, spec, {"regex", "enum", "min", "max", "range", "prefix", "schema", "required"})
    kw: dict[str, Any] = {"name": str(name)}
    if "regex" in spec:
        try:
            kw["regex"] = re.compile(str(spec["regex"]))
        except re.error as exc:
            raise w.fail(f"{path}.regex", f"not a valid regular expression: {exc}") from None
    if "enum" in spec:
        if not isinstance(spec["enum"], list) or not spec["enum"]:
            raise w.fail(f"{path}.enum", "expected a non-empty list of values")
        kw["enum"] = tuple(spec["enum"])
    bounds = dict(min=spec.get("min"), max=spec.get("max"))
    if "range" in spec:
        r = spec["range"]
        if not (isinstance(r, list) and len(r) == 2):
            raise w.fail(f"{path}.range", "expected [min, max]")
        bounds = dict(min=r[0], max=r[1])
    for k, v in bounds.items():
        if v is not None and (isinstance(v, bool) or not isinstance(v, int | float)):
            raise w.fail(f"{path}.{k}", f"{v!r} is not a number")
        if v is not None:
            kw[k] = v
    if kw.get("min") is not None and kw.get("max") is not None and kw["min"] > kw["max"]:
        raise w.fail(path, f"min {kw['min']} is above max {kw['max']}")
    if "prefix" in spec:
        p = spec["prefix"]
        prefixes = [p] if isinstance(p, str) else p
        if not isinstance(prefixes, list) or not prefixes or not all(isinstance(x, str) and x.startswith("/") for x in prefixes):
            raise w.fail(f"{path}.prefix", "expected an absolute path or a list of them")
        kw["prefix"] = tuple(posixpath.normpath(x) + ("/" if x.endswith("/") else "") for x in prefixes)
    if "schema" in spec:
        kw["schema"] = _schema(w, f"{path}.schema", spec["schema"])
    if "required" in spec:
        if not isinstance(spec["required"], bool):
            raise w.fail(f"{path}.required", "expected true or false")
        kw["required"] = spec["required"]
    if len(kw) == 1:
        raise w.fail(path, "an argument rule needs at least one of regex, enum, min, max, range, prefix, schema, required")
    return ArgRule(**kw)


def _constraint(w: _Where, path: str, spec: dict[str, Any]) -> Constraint:
    args = spec.get("args") or {}
    if not isinstance(args, dict):
        raise w.fail(f"{path}.args", "expected a mapping of argument name to rule")
    schema = _schema(w, f"{path}.schema", spec["schema"]) if spec.get("schema") is not None else None
    return Constraint(args=tuple(_arg_rule(w, f"{path}.args.{k}", k, v) for k, v in args.items()), schema=schema)


def _untrusted(w: _Where, path: str, value: Any) -> Untrusted:
    if isinstance(value, str):
        return Untrusted(action=_action(w, path, value))
    spec = _mapping(w, path, value, {"action", "args", "schema", "reason"})
    action = _action(w, f"{path}.action", spec.get("action", "allow"))
    constraint = _constraint(w, path, spec) if ("args" in spec or "schema" in spec) else None
    return Untrusted(action=action, constraint=constraint, reason=str(spec.get("reason", "")))


def _tool(w: _Where, name: str, spec: Any) -> ToolRule:
    path = f"tools.{name}"
    if isinstance(spec, str):
        return ToolRule(name=name, action=_action(w, path, spec))
    if spec is None:
        return ToolRule(name=name)
    spec = _mapping(w, path, spec, {"action", "reason", "sink", "args", "schema", "untrusted", "rate"})
    if "sink" in spec and not isinstance(spec["sink"], bool):
        raise w.fail(f"{path}.sink", "expected true or false")
    return ToolRule(
        name=name,
        action=_action(w, f"{path}.action", spec.get("action", "allow")),
        reason=str(spec.get("reason", "")),
        sink=bool(spec.get("sink", False)),
        constraint=_constraint(w, path, spec),
        untrusted=_untrusted(w, f"{path}.untrusted", spec["untrusted"]) if "untrusted" in spec else None,
        rate=parse_rate(w, f"{path}.rate", spec["rate"]) if "rate" in spec else None,
    )


def _threshold(w: _Where, path: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 1:
        raise w.fail(path, f"{value!r} is not a number in (0, 1]")
    return float(value)


def _names(w: _Where, path: str, value: Any, what: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(x, str) and x.strip() for x in value):
        raise w.fail(path, f"expected a list of {what}")
    return tuple(value)


def _screening(w: _Where, value: Any) -> Screening:
    if value is None:
        return Screening()
    spec = _mapping(w, "screening", value, {"inline_threshold", "model_threshold", "mode", "quarantine", "allow"})
    kw: dict[str, Any] = {}
    for name in ("inline_threshold", "model_threshold"):
        if spec.get(name) is not None:
            kw[name] = _threshold(w, f"screening.{name}", spec[name])
    for name, attr, choices in (("mode", "mode", SCREEN_MODES), ("quarantine", "replace", REPLACE_MODES)):
        if name in spec:
            if spec[name] not in choices:
                raise w.fail(f"screening.{name}", f"{spec[name]!r} is not one of {', '.join(choices)}")
            kw[attr] = spec[name]
    allow = _mapping(w, "screening.allow", spec.get("allow") or {}, {"tools", "sources", "blocks"})
    if "tools" in allow:
        kw["allow_tools"] = _names(w, "screening.allow.tools", allow["tools"], "tool names or globs")
    if "sources" in allow:
        kw["allow_sources"] = _names(w, "screening.allow.sources", allow["sources"], "MCP server names or globs")
        bad = [s for s in kw["allow_sources"] if "__" in s]
        if bad:
            raise w.fail("screening.allow.sources", f"{bad[0]!r}: a source is an MCP server's name (its tools are "
                                                    "<server>__<tool>); list tools under screening.allow.tools")
    if "blocks" in allow:
        blocks = _names(w, "screening.allow.blocks", allow["blocks"], "block ids")
        bad = [b for b in blocks if not _BLOCK.fullmatch(b)]
        if bad:
            raise w.fail("screening.allow.blocks", f"{bad[0]!r} is not a block id ('b' + 32 hex digits, as in the audit log)")
        kw["allow_blocks"] = frozenset(blocks)
    return Screening(**kw)


def parse(doc: Any, source: str = "<policy>") -> Policy:
    """A policy from a parsed YAML document; PolicyError names the first problem."""
    w = _Where(source)
    if doc is None:
        doc = {}
    doc = _mapping(w, "", doc, {"version", "default", "sinks", "untrusted", "rate", "tools", "screening"})
    if doc.get("version", 1) != 1:
        raise w.fail("version", f"{doc['version']!r}: this fak reads policy version 1")
    sinks = doc.get("sinks", list(DEFAULT_SINKS))
    if not isinstance(sinks, list) or not all(isinstance(s, str) for s in sinks):
        raise w.fail("sinks", "expected a list of tool names")
    tools = doc.get("tools") or {}
    if not isinstance(tools, dict):
        raise w.fail("tools", "expected a mapping of tool name to rule")
    return Policy(
        default=_action(w, "default", doc.get("default", "allow")),
        sinks=frozenset(sinks),
        untrusted=_untrusted(w, "untrusted", doc.get("untrusted", "deny")),
        rate=parse_rate(w, "rate", doc["rate"]) if doc.get("rate") is not None else None,
        tools=tuple(_tool(w, str(k), v) for k, v in tools.items()),
        source=source,
        screening=_screening(w, doc.get("screening")),
    )
