"""The MCP servers file (FAK_MCP / --mcp): the upstream MCP servers the gateway fronts at /mcp.

    servers:
      fs:                                   # a name: letters, digits, - and _; its tools are listed as fs__<tool>
        command: [node, /opt/mcp/server-filesystem/dist/index.js, /srv/data]   # stdio: fak launches it
        env: {LOG_LEVEL: warn}              # added to a minimal environment (HOME, PATH, ...), never the gateway's
        cwd: /srv
      search:
        url: http://127.0.0.1:9000/mcp      # streamable HTTP
        headers: {authorization: "Bearer ${SEARCH_KEY}"}   # ${VAR}: from the gateway's environment, at start-up
        prefix: web_                        # its tools are listed as web_<tool> (default `<name>__`; "" for none)
        timeout_s: 120                      # longest wait for one call (default 60)

Strict: an unknown field, a server with both or neither of `url` and `command`, a bad name or prefix, two
servers with the same prefix, or a `${VAR}` that is not set fail the gateway's start-up with one line naming
the file and the field. Nothing is half-loaded.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import msgspec
import yaml

NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
PREFIX = re.compile(r"[A-Za-z0-9_.-]{0,64}")  # what MCP allows in a tool name (SEP-986)
VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


class McpConfigError(ValueError):
    """An MCP servers file that cannot be used: names the file and the field."""


class McpServer(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    url: str = ""  # streamable HTTP endpoint (http:// or https://); or
    command: list[str] = []  # stdio: the executable and its arguments, launched and supervised by the gateway
    env: dict[str, str] = {}  # stdio: variables added to the child's minimal environment
    cwd: str = ""  # stdio: the child's working directory (default: the gateway's)
    headers: dict[str, str] = {}  # streamable HTTP: sent with every request (`${VAR}` expanded at start-up)
    prefix: str | None = None  # how its tools are named at /mcp: prefix + tool (None: `<name>__`)
    timeout_s: float = 60.0  # longest wait for one call or listing

    @property
    def transport(self) -> str:
        return "stdio" if self.command else "http"


class McpConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    servers: dict[str, McpServer] = {}
    source: str = ""  # the file it came from (set by `load`)

    def prefix_of(self, name: str) -> str:
        p = self.servers[name].prefix
        return f"{name}__" if p is None else p


def load(path: str | Path, environ: dict[str, str] | None = None) -> McpConfig:
    """The MCP servers file at `path`, validated; McpConfigError names the first problem."""
    p = Path(path).expanduser()
    try:
        doc = yaml.safe_load(p.read_text())
    except OSError as exc:
        raise McpConfigError(f"{p}: cannot read the MCP servers file: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise McpConfigError(f"{p}: not valid YAML: {exc}") from None
    return parse(doc, str(p), os.environ if environ is None else environ)


def parse(doc: object, source: str, environ: dict[str, str] | os._Environ[str]) -> McpConfig:
    if not isinstance(doc, dict) or not isinstance(doc.get("servers"), dict):
        raise McpConfigError(f"{source}: expected a mapping with `servers` (name -> url or command)")
    if unknown := sorted(str(k) for k in doc if k != "servers"):
        raise McpConfigError(f"{source}: unknown field {unknown[0]!r} (expected: servers)")
    raw = {}
    for name, spec in doc["servers"].items():
        try:
            raw[str(name)] = msgspec.convert(spec if spec is not None else {}, McpServer)
        except msgspec.ValidationError as exc:  # "Object contains unknown field `x`" [" - at `$.env`"]
            message, _, where = str(exc).partition(" - at `$")
            raise McpConfigError(f"{source}: servers.{name}{where.rstrip('`')}: {message}") from None
    config = McpConfig(servers=raw, source=source)
    prefixes: dict[str, str] = {}
    servers = {}
    for name, s in config.servers.items():
        at = f"{source}: servers.{name}"
        if not NAME.fullmatch(name):
            raise McpConfigError(f"{at}: a server name is 1 to 64 letters, digits, '-' or '_'")
        if bool(s.url) == bool(s.command):
            raise McpConfigError(f"{at}: give exactly one of `url` (streamable HTTP) or `command` (stdio)")
        if s.url and not s.url.startswith(("http://", "https://")):
            raise McpConfigError(f"{at}.url: {s.url!r} is not an http:// or https:// URL")
        if s.url and (s.env or s.cwd):
            raise McpConfigError(f"{at}: `env` and `cwd` are for a stdio `command`, not a `url`")
        if s.command and s.headers:
            raise McpConfigError(f"{at}.headers: headers are for a `url`, not a stdio `command`")
        if s.command and not s.command[0]:
            raise McpConfigError(f"{at}.command: the first element is the executable and cannot be empty")
        if s.prefix is not None and not PREFIX.fullmatch(s.prefix):
            raise McpConfigError(f"{at}.prefix: {s.prefix!r}: up to 64 letters, digits, '_', '-' or '.'")
        if not s.timeout_s > 0:
            raise McpConfigError(f"{at}.timeout_s: expected a positive number of seconds")
        prefix = config.prefix_of(name)
        if prefix in prefixes:
            raise McpConfigError(f"{at}.prefix: {prefix!r} is also the prefix of servers.{prefixes[prefix]}")
        prefixes[prefix] = name
        headers = {k: _expand(v, environ, f"{at}.headers.{k}") for k, v in s.headers.items()}
        servers[name] = msgspec.structs.replace(s, headers=headers)
    return McpConfig(servers=servers, source=source)


def _expand(value: str, environ: dict[str, str] | os._Environ[str], where: str) -> str:
    def one(m: re.Match[str]) -> str:
        if m.group(1) not in environ:
            raise McpConfigError(f"{where}: the variable {m.group(1)} is not set")
        return environ[m.group(1)]

    return VARIABLE.sub(one, value)
