"""Policies per API key, loaded from a file or a folder and hot-reloaded; per-key rate limits.

`FAK_POLICY` names either one YAML file (every key gets it) or a folder:

    policies/default.yaml          every key without a file of its own (absent: the built-in policy)
    policies/<key id>.yaml         one API key's policy; the key id is `key_id(api key)` ("k" + 16 hex)

Reloading checks the files' names, sizes and modification times; a change loads everything again, and a
file that fails to load leaves the previous policies in force (the error is kept for health and metrics).
"""

from __future__ import annotations

import hashlib
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from fakcore.policy.language import Decision, Policy, PolicyError, Rate, parse


def key_id(api_key: str) -> str:
    """The name of an API key on the bus and in policy folders: never the key itself."""
    return "k" + hashlib.sha256(api_key.encode()).hexdigest()[:16] if api_key else ""


def load(path: str | Path | None) -> Policy:
    """One policy file (or the built-in policy for an empty path)."""
    if not path:
        return Policy()
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise PolicyError(f"{p}: cannot read policy file: {exc.strerror or exc}") from None
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise PolicyError(f"{p}: not valid YAML: {exc}") from None
    return parse(doc, str(p))


@dataclass(frozen=True)
class PolicySet:
    default: Policy = field(default_factory=Policy)
    keys: dict[str, Policy] = field(default_factory=dict)

    def for_key(self, key: str) -> Policy:
        return self.keys.get(key, self.default)

    @property
    def source(self) -> str:
        return self.default.source + (f" (+{len(self.keys)} keys)" if self.keys else "")


def _files(path: Path) -> list[Path]:
    return sorted(list(path.glob("*.yaml")) + list(path.glob("*.yml"))) if path.is_dir() else [path]


def load_set(path: str | Path | None) -> PolicySet:
    if not path:
        return PolicySet()
    p = Path(path)
    if not p.exists():
        raise PolicyError(f"{p}: no such policy file or folder")
    if not p.is_dir():
        return PolicySet(default=load(p))
    default, keys = Policy(), {}
    for f in _files(p):
        if f.stem == "default":
            default = load(f)
        else:
            keys[f.stem] = load(f)
    return PolicySet(default=default, keys=keys)


class PolicyStore:
    """The policies in force, reloaded by `check()` when the files change."""

    def __init__(self, path: str | Path | None):
        self.path = Path(path) if path else None
        self.current = load_set(path)  # a bad file at start-up is an error, not a silent default
        self._stamp = self._fingerprint()
        self.error = ""
        self.reloads = 0

    def _fingerprint(self) -> tuple:
        if self.path is None or not self.path.exists():
            return ()
        out = []
        for f in _files(self.path):
            try:
                st = f.stat()
                out.append((f.name, st.st_size, st.st_mtime_ns))
            except OSError:
                out.append((f.name, -1, -1))
        return tuple(out)

    def check(self) -> bool | None:
        """Reload if the files changed: True (reloaded), False (failed: old policy kept), None (no change)."""
        stamp = self._fingerprint()
        if stamp == self._stamp:
            return None
        self._stamp = stamp
        try:
            self.current = load_set(self.path)
        except PolicyError as exc:
            self.error = str(exc)
            return False
        self.error = ""
        self.reloads += 1
        return True


class RateLimiter:
    """Sliding-window call counts per (key, rule). State is this process's: with several adjudicator
    replicas, each enforces the limit on the calls it sees."""

    def __init__(self) -> None:
        self._calls: dict[tuple[str, str], deque[float]] = {}

    def admit(self, key: str, rule: str, rate: Rate, now: float | None = None) -> bool:
        now = time.monotonic() if now is None else now
        window = self._calls.setdefault((key, rule), deque())
        while window and window[0] <= now - rate.per_s:
            window.popleft()
        if len(window) >= rate.count:
            return False
        window.append(now)
        return True

    def decide(self, decision: Decision, key: str, tool: str, now: float | None = None) -> Decision:
        """Charge an allowed call to its limit; over the limit it becomes a denial of the rate rule."""
        if not decision.allow or decision.rate is None:
            return decision
        scope = decision.rate_rule if decision.rate_rule != "rate" else "rate"
        if self.admit(key, scope, decision.rate, now):
            return decision
        return Decision(False, decision.rate_rule, f"rate limit for {tool!r}: at most {decision.rate} per API key")
