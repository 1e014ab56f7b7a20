"""Routing: which backend serves a model id — the in-kernel engine (over NATS) or an upstream (over HTTP).

    fak up --base-url URL [--upstream-wire openai|anthropic|responses|gemini]   one upstream for every model not served here
    fak up --routes routes.yaml  (FAK_ROUTES)                      many; the first matching route wins

A routes file:

    upstreams:
      local:                          # a name, used by routes and in /healthz ("upstream:local")
        url: http://127.0.0.1:11434/v1  # the upstream's base URL (its API paths are appended: /chat/completions)
        wire: openai                  # openai | anthropic | responses | gemini: what the upstream speaks
        auth: client                  # client: the agent's own key goes through; key: fak sends api_key_env's
        api_key_env: LOCAL_API_KEY    # (auth: key) the environment variable holding the key
        timeout_s: 600                # the longest an upstream response may take (504 after it)
    routes:
      - model: "claude-*"             # an id, a glob, or a list of them
        upstream: local
        rewrite: qwen2.5:7b           # the model name the upstream is sent (default: the client's)
      - model: smollm2-135m
        engine: smollm2-135m          # in-kernel: the served model name (an alias when it differs)

Models with no matching route go to the in-kernel engine, as without a routes file. A misspelt key, an
unknown upstream or a route naming neither an engine nor an upstream is an error at start-up, never a
quiet default. An upstream no route names is never contacted.
"""

from __future__ import annotations

import fnmatch
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import msgspec
import yaml

# responses: the OpenAI Responses API (/v1/responses); gemini: Google's Gemini API (the URL ends in /v1beta)
WIRES = ("openai", "anthropic", "responses", "gemini")
DEFAULT_UPSTREAM = "default"  # the name of the --base-url upstream


class RoutesError(ValueError):
    pass


class UpstreamSpec(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    url: str
    wire: Literal["openai", "anthropic", "responses", "gemini"] = "openai"
    auth: Literal["client", "key"] = "client"
    api_key_env: str = ""
    timeout_s: float = 600.0
    connect_timeout_s: float = 10.0
    max_connections: int = 256

    @property
    def api_key(self) -> str:
        return os.environ.get(self.api_key_env, "") if self.api_key_env else ""


class RouteSpec(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    model: str | list[str]
    engine: str = ""
    upstream: str = ""
    rewrite: str = ""

    @property
    def patterns(self) -> list[str]:
        return [self.model] if isinstance(self.model, str) else list(self.model)


class RoutesFile(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    upstreams: dict[str, UpstreamSpec] = {}
    routes: list[RouteSpec] = []


@dataclass(frozen=True)
class Route:
    """Where one request goes."""

    model: str  # the id the client asked for
    target: str  # the model name the backend is sent
    upstream: str = ""  # the upstream's name; empty: in-kernel

    @property
    def inkernel(self) -> bool:
        return not self.upstream


class RouteTable:
    def __init__(self, spec: RoutesFile):
        for i, r in enumerate(spec.routes):
            if bool(r.engine) == bool(r.upstream):
                raise RoutesError(f"routes[{i}] ({r.model!r}): name exactly one of `engine` or `upstream`")
            if r.upstream and r.upstream not in spec.upstreams:
                raise RoutesError(f"routes[{i}] ({r.model!r}): upstream {r.upstream!r} is not defined under `upstreams` "
                                  f"(defined: {', '.join(spec.upstreams) or 'none'})")
            if r.engine and r.rewrite:
                raise RoutesError(f"routes[{i}] ({r.model!r}): `rewrite` is for upstreams; `engine` already names the model")
        for name, u in spec.upstreams.items():
            if not u.url.startswith(("http://", "https://")):
                raise RoutesError(f"upstream {name!r}: url {u.url!r} is not an http(s) URL")
            if u.auth == "key" and not u.api_key_env:
                raise RoutesError(f"upstream {name!r}: auth `key` needs api_key_env (the variable holding the key)")
        self.spec = spec
        self.upstreams = spec.upstreams

    @classmethod
    def load(cls, routes_file: str = "", base_url: str = "", upstream_wire: str = "openai",
             inkernel: tuple[str, ...] = ()) -> RouteTable:
        """From the settings: a routes file, else --base-url (models in `inkernel` stay in-kernel), else none."""
        if routes_file and base_url:
            raise RoutesError("give either a routes file or --base-url, not both (a routes file can name the upstream)")
        if routes_file:
            path = Path(routes_file).expanduser()
            try:
                raw = yaml.safe_load(path.read_text())
            except (OSError, yaml.YAMLError) as exc:
                raise RoutesError(f"cannot read the routes file {path}: {exc}") from exc
            try:
                return cls(msgspec.convert(raw or {}, RoutesFile))
            except msgspec.ValidationError as exc:
                raise RoutesError(f"routes file {path}: {exc}") from exc
        if base_url:
            if upstream_wire not in WIRES:
                raise RoutesError(f"--upstream-wire must be one of {', '.join(WIRES)}, not {upstream_wire!r}")
            routes = [RouteSpec(model=m, engine=m) for m in inkernel]
            return cls(RoutesFile(upstreams={DEFAULT_UPSTREAM: UpstreamSpec(url=base_url, wire=upstream_wire)},
                                  routes=[*routes, RouteSpec(model="*", upstream=DEFAULT_UPSTREAM)]))
        return cls(RoutesFile())

    @classmethod
    def from_settings(cls, settings: Any) -> RouteTable:
        return cls.load(settings.routes, settings.base_url, settings.upstream_wire, tuple(settings.models))

    def resolve(self, model: str) -> Route:
        for r in self.spec.routes:
            if any(fnmatch.fnmatchcase(model, p) for p in r.patterns):
                if r.engine:
                    return Route(model=model, target=r.engine)
                return Route(model=model, target=r.rewrite or model, upstream=r.upstream)
        return Route(model=model, target=model)

    def listed(self) -> list[str]:
        """Model ids the routes name literally (globs are not listable)."""
        names: list[str] = []
        for r in self.spec.routes:
            names += [p for p in r.patterns if not any(c in p for c in "*?[") and p not in names]
        return names

    @property
    def catch_all(self) -> bool:
        """Some route takes every model id: no model is 'unknown' to this gateway."""
        return any(p == "*" for r in self.spec.routes for p in r.patterns)

    @property
    def needs_engine(self) -> bool:
        """Whether any model can end up in-kernel (else `fak up` starts no engine worker)."""
        return not self.catch_all or any(r.engine for r in self.spec.routes)
