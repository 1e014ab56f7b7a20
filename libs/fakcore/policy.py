"""Tool-call policy: which tools a model may call.

The first policy language: a YAML file naming a default action and per-tool actions.

    default: allow            # allow | deny: for tools the file does not name
    tools:
      read_file: allow
      shell: deny
      send_email:
        action: deny
        reason: "email is disabled in this deployment"

Loading validates the file and names what is wrong; a bad file never half-loads.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ACTIONS = ("allow", "deny")


class PolicyError(ValueError):
    """A policy file that cannot be used (names the file and the field)."""


@dataclass(frozen=True)
class Rule:
    tool: str
    action: str
    reason: str = ""


@dataclass(frozen=True)
class Decision:
    allow: bool
    rule: str
    reason: str


@dataclass(frozen=True)
class Policy:
    default: str = "allow"
    rules: dict[str, Rule] = field(default_factory=dict)
    source: str = "<built-in>"

    def decide(self, tool: str, arguments: str = "{}") -> Decision:
        rule = self.rules.get(tool)
        if rule is None:
            return Decision(self.default == "allow", "default", f"default action {self.default} for tool {tool!r}")
        return Decision(rule.action == "allow", f"tools.{tool}", rule.reason or f"tool {tool!r} is {rule.action}ed by policy")


def parse(doc: Any, source: str) -> Policy:
    if doc is None:
        doc = {}
    if not isinstance(doc, dict):
        raise PolicyError(f"{source}: the policy must be a mapping with 'default' and 'tools'")
    unknown = set(doc) - {"default", "tools"}
    if unknown:
        raise PolicyError(f"{source}: unknown field {sorted(unknown)[0]!r} (expected default, tools)")
    default = doc.get("default", "allow")
    if default not in ACTIONS:
        raise PolicyError(f"{source}: default: {default!r} is not one of {', '.join(ACTIONS)}")
    tools = doc.get("tools") or {}
    if not isinstance(tools, dict):
        raise PolicyError(f"{source}: tools must be a mapping of tool name to action")
    rules = {}
    for name, spec in tools.items():
        if isinstance(spec, str):
            spec = {"action": spec}
        if not isinstance(spec, dict) or spec.get("action") not in ACTIONS:
            raise PolicyError(f"{source}: tools.{name}: action must be one of {', '.join(ACTIONS)}")
        extra = set(spec) - {"action", "reason"}
        if extra:
            raise PolicyError(f"{source}: tools.{name}: unknown field {sorted(extra)[0]!r}")
        rules[str(name)] = Rule(str(name), spec["action"], str(spec.get("reason", "")))
    return Policy(default=default, rules=rules, source=source)


def load(path: str | Path | None) -> Policy:
    if not path:
        return Policy()
    p = Path(path)
    try:
        doc = yaml.safe_load(p.read_text())
    except OSError as exc:
        raise PolicyError(f"{p}: cannot read policy file: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise PolicyError(f"{p}: not valid YAML: {exc}") from None
    return parse(doc, str(p))
