"""fak's own MCP server at /mcp: the boundary in front of the upstream MCP servers of FAK_MCP.

    tools/list  every running upstream's tools, named `<prefix><tool>` (prefix `<server>__` by default), in
                name order; a tool the caller's policy denies outright (deny, ask) is not listed; each tool's
                description (its title, description and the descriptions and titles in its schemas) is
                screened (AdjudicateResult kind=tool_description: the inline rules plus those for tool
                poisoning), and a poisoned one is hidden (the adjudicator audits the verdict)
    tools/call  adjudicated as a tool call (AdjudicateCall: the listed name, the arguments, the caller's API
                key); denied -> an `isError` result naming the rule, the upstream never called. Allowed ->
                forwarded; every text in the result is screened (AdjudicateResult, block = block_id(text)); a
                quarantined one turns the whole result into the context filter's placeholder (`isError`),
                and the adjudicator's verdict on JetStream makes every gateway filter the same bytes when
                they come back inside a model request
    resources, prompts  passed through, their content screened when read (mcp_content.py)

Policies see the names as listed (`fs__read_file`), the same name a model proposes when an agent hands it
these tools, so one rule covers both wires and `fs__*` globs cover a server. The listing filter is a view
of the policy file (FAK_POLICY, read here too, reloaded every `policy_reload_s`); the adjudicator decides
every call. A session (x-fak-session) that got a tool result through /mcp is tainted for its later calls
(this gateway's memory: a client that sends no x-fak-session is never tainted). The verdicts on a tool's
description, call and result name its upstream (`server`) in the audit log.

Fail closed: with adjudication on, no verdict (no adjudicator, a timeout, a bad signature) means a JSON-RPC
error for the list or the call, never unscreened content. FAK_ADJUDICATE=off passes everything through.

The protocol is the `mcp` SDK's (v2) low-level Server behind its streamable-HTTP session manager, stateless
and with JSON responses: 2026-07-28 (per-request envelope, `server/discover`) and the initialize handshake
of 2025-11-25, 2025-06-18, 2025-03-26 and 2024-11-05.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import mcp.types as types
from mcp import MCPError
from mcp.server.caching import CacheHint
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

import fakcore
from fak_gateway.context_filter import ContextFilter, placeholder
from fak_gateway.errors import WireError
from fak_gateway.guard import Guard, refusal
from fak_gateway.mcp_content import Passthrough, Screen
from fak_gateway.mcp_upstream import McpUnavailable, McpUpstream
from fakcore import bus
from fakcore.mcp_config import McpConfig
from fakcore.metrics import Metrics
from fakcore.policy import PolicyStore
from fakcore.protocol import (
    AdjudicateCall,
    AdjudicateResult,
    AuditRecord,
    ContentKind,
    QuarantineVerdict,
    ResultVerdict,
    ToolCall,
    block_id,
)
from fakcore.settings import Settings

log = logging.getLogger("fak.gateway.mcp")

SCOPE_KEY = "fak.mcp.caller"  # the ASGI scope entry the app puts the caller in, read back by the handlers
FIRST_ATTEMPT_S = 15.0  # start-up waits this long, at most, for every upstream's first connection attempt
TAINTED_SESSIONS = 100_000  # sessions remembered as tainted (LRU)
DESCRIPTION_BLOCK = "fak:tool-description\n"  # what a description's block id is taken over, before its text


@dataclass(frozen=True)
class Caller:
    key: str = ""  # the API key's id: whose policy applies
    session: str = ""  # x-fak-session, if the client sent one


@dataclass(frozen=True)
class Listed:
    upstream: McpUpstream
    tool: types.Tool  # as the upstream names it
    name: str  # as /mcp lists it: prefix + tool.name


class McpMetrics:
    def __init__(self, m: Metrics):
        self.calls = m.counter("gateway_mcp_calls_total", "MCP tools/call through /mcp by server, tool (as listed) and outcome "
                               "(ok|tool_error|denied|quarantined|unavailable|error)", ("server", "tool", "outcome"))
        self.seconds = m.histogram("gateway_mcp_call_seconds", "One tools/call through /mcp, adjudication and screening included",
                                   ("server",))
        self.hidden = m.counter("gateway_mcp_hidden_tools_total", "Tools left out of a tools/list, by server and reason "
                                "(policy|poisoned)", ("server", "reason"))
        self.up = m.gauge("gateway_mcp_upstream_up", "1 while the upstream MCP server's session is up", ("server",))
        self.restarts = m.counter("gateway_mcp_upstream_restarts_total", "Upstream MCP sessions opened again after one ended",
                                  ("server",))


class McpGateway:
    def __init__(self, config: McpConfig, settings: Settings, metrics: Metrics, guard: Guard | None, filt: ContextFilter):
        self.settings, self.guard, self.filter = settings, guard, filt
        self.m = McpMetrics(metrics)
        self.upstreams = [McpUpstream(name, spec, config.prefix_of(name)) for name, spec in config.servers.items()]
        for u in self.upstreams:
            u.on_change = self._on_change
        self.policy = PolicyStore(settings.policy) if guard is not None else None  # a bad file stops start-up
        self._policy_checked = time.monotonic()
        self.catalog: dict[str, Listed] = {}
        self.tainted: OrderedDict[str, None] = OrderedDict()
        self._collisions: set[str] = set()
        self._reported: set[str] = set()  # blocks of hidden descriptions already logged (once each)
        for chatty in ("httpx2", "mcp"):  # the SDK logs every HTTP exchange and per-request transport at INFO
            logging.getLogger(chatty).setLevel(max(logging.WARNING, logging.getLogger(chatty).getEffectiveLevel()))
        self.content = Passthrough(self.upstreams)
        self.server = Server("fak", version=fakcore.__version__, title="fak MCP gateway",
                             on_list_tools=self._on_list_tools, on_call_tool=self._on_call_tool,
                             on_list_resources=self._on_list_resources, on_list_resource_templates=self._on_list_templates,
                             on_read_resource=self._on_read_resource, on_list_prompts=self._on_list_prompts,
                             on_get_prompt=self._on_get_prompt, get_tool_input_schema=self._input_schema,
                             cache_hints={"tools/list": CacheHint(ttl_ms=0, scope="private")})  # per API key: never shared
        self.manager = StreamableHTTPSessionManager(self.server, stateless=True, json_response=True,
                                                    max_request_body_size=settings.max_body_bytes)
        self._stack = contextlib.AsyncExitStack()

    # -- lifecycle ------------------------------------------------------------------------------------
    async def start(self) -> None:
        """The session manager and every upstream's supervisor; back once each upstream had its first try.
        `stop` must run in the same task (the SDK's task groups)."""
        await self._stack.enter_async_context(self.manager.run())
        for u in self.upstreams:
            u.start()
            self._stack.push_async_callback(u.stop)
        with contextlib.suppress(TimeoutError):  # serve anyway: a slow or broken upstream is listed once it is up
            await asyncio.wait_for(asyncio.gather(*(u.attempted.wait() for u in self.upstreams)), FIRST_ATTEMPT_S)

    async def stop(self) -> None:
        await self._stack.aclose()

    async def handle(self, scope: Any, receive: Any, send: Any, caller: Caller) -> None:
        """One HTTP exchange on /mcp (already authenticated by the app)."""
        await self.manager.handle_request({**scope, SCOPE_KEY: caller}, receive, send)

    def health(self) -> list[dict[str, Any]]:
        return [u.health() for u in self.upstreams]

    def _on_change(self, u: McpUpstream) -> None:
        self.m.up.labels(u.name).set(1 if u.state == "up" else 0)
        if u.state == "up" and u.restarts:
            self.m.restarts.labels(u.name).inc()

    # -- the MCP handlers (errors: no verdict or no upstream -> a JSON-RPC error, nothing unscreened) ----
    async def _on_list_tools(self, ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        with _as_mcp_errors():
            return types.ListToolsResult(tools=await self.list_tools(_caller(ctx)))

    async def _on_call_tool(self, ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        listed = await self._lookup(params.name)
        if listed is None:
            raise MCPError(types.INVALID_PARAMS, f"fak: unknown tool {params.name!r} (see tools/list)")
        t0 = time.perf_counter()
        outcome = "error"
        with _as_mcp_errors():
            try:
                result, outcome = await self.call_tool(listed, params.arguments, _caller(ctx))
                return result
            except McpUnavailable:
                outcome = "unavailable"
                raise
            finally:
                self.m.calls.labels(listed.upstream.name, listed.name, outcome).inc()
                self.m.seconds.labels(listed.upstream.name).observe(time.perf_counter() - t0)

    async def _on_list_resources(self, ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListResourcesResult:
        with _as_mcp_errors():
            return types.ListResourcesResult(resources=await self.content.list_resources(self._screener(_caller(ctx))))

    async def _on_list_templates(self, ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListResourceTemplatesResult:
        with _as_mcp_errors():
            return types.ListResourceTemplatesResult(resource_templates=await self.content.list_templates(self._screener(_caller(ctx))))

    async def _on_read_resource(self, ctx: Any, params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
        with _as_mcp_errors():
            return await self.content.read(str(params.uri), self._screener(_caller(ctx)))

    async def _on_list_prompts(self, ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListPromptsResult:
        with _as_mcp_errors():
            return types.ListPromptsResult(prompts=await self.content.list_prompts(self._screener(_caller(ctx))))

    async def _on_get_prompt(self, ctx: Any, params: types.GetPromptRequestParams) -> types.GetPromptResult:
        with _as_mcp_errors():
            return await self.content.get(params.name, params.arguments, self._screener(_caller(ctx)))

    def _input_schema(self, name: str) -> dict[str, Any] | None:
        listed = self.catalog.get(name)
        return listed.tool.input_schema if listed is not None else None

    # -- tools/list -----------------------------------------------------------------------------------
    async def list_tools(self, caller: Caller) -> list[types.Tool]:
        catalog = await self._refresh()
        request_id = _request_id()
        candidates = []
        for listed in catalog.values():
            if self._denied(listed.name, caller.key):
                self.m.hidden.labels(listed.upstream.name, "policy").inc()
            else:
                candidates.append(listed)
        poisoned = await asyncio.gather(*(self._poisoned(x, caller, request_id) for x in candidates))
        tools = []
        for listed, bad in zip(candidates, poisoned, strict=True):
            if bad is not None:
                self.m.hidden.labels(listed.upstream.name, "poisoned").inc()
                if bad.block in self._reported:
                    continue
                self._reported.add(bad.block)
                log.warning("MCP tool %s hidden: its description was quarantined (%s, score %.2f; block %s)", listed.name,
                            bad.detector, bad.score, bad.block)
            else:
                tools.append(listed.tool.model_copy(update={"name": listed.name}))
        return tools

    async def _refresh(self) -> dict[str, Listed]:
        """Every running upstream's tools, listed now, in name order; the first server (file order) keeps a
        name two servers would both list."""
        running = [u for u in self.upstreams if u.state == "up"]
        answers = await asyncio.gather(*(u.list_tools() for u in running), return_exceptions=True)
        for a in answers:
            if isinstance(a, BaseException):
                log.warning("%s", a)
        return self._index(only_up=True)

    def _index(self, only_up: bool) -> dict[str, Listed]:
        catalog: dict[str, Listed] = {}
        for u in self.upstreams:
            if only_up and u.state != "up":
                continue
            for t in u.tools:
                name = u.prefix + t.name
                if name in catalog:
                    if name not in self._collisions:
                        self._collisions.add(name)
                        log.warning("MCP tool %s of %s is not listed: %s lists the same name", name, u.name,
                                    catalog[name].upstream.name)
                    continue
                catalog[name] = Listed(u, t, name)
        catalog = dict(sorted(catalog.items()))
        if only_up:
            self.catalog = catalog
        return catalog

    async def _lookup(self, name: str) -> Listed | None:
        """The tool a listed name stands for: known tools of every upstream first (also one that is down, so a
        call in the gap gets 'not running'), else the upstreams are asked again."""
        listed = self._index(only_up=False).get(name)
        if listed is None:
            listed = (await self._refresh()).get(name)
        return listed

    def _denied(self, name: str, key: str) -> str:
        """The rule that denies `name` outright for this key (a tool rule or the default), '' if it may be listed."""
        if self.policy is None:
            return ""
        if self.settings.policy_reload_s > 0 and time.monotonic() - self._policy_checked >= self.settings.policy_reload_s:
            self._policy_checked = time.monotonic()
            if self.policy.check() is False:
                log.error("policy reload failed, the listing keeps the previous policy: %s", self.policy.error)
        p = self.policy.current.for_key(key)
        rule = p.rule_for(name)
        action = rule.action if rule else p.default
        return "" if action == "allow" else (f"tools.{rule.name}" if rule else "default")

    async def _poisoned(self, listed: Listed, caller: Caller, request_id: str) -> QuarantineVerdict | ResultVerdict | None:
        text = description_text(listed.tool)
        return await self._verdict(text, listed.name, caller, request_id, "tool_description", listed.upstream.name) if text else None

    # -- tools/call -----------------------------------------------------------------------------------
    async def call_tool(self, listed: Listed, arguments: dict[str, Any] | None, caller: Caller) -> tuple[types.CallToolResult, str]:
        """The result the caller gets, and its outcome for the metrics."""
        guard = self.guard
        if guard is None:  # FAK_ADJUDICATE=off: the benchmarks' pass-through
            result = await listed.upstream.call(listed.tool.name, arguments)
            return result, "tool_error" if result.is_error else "ok"
        request_id = _request_id()
        if (bad := await self._poisoned(listed, caller, request_id)) is not None:
            return _error_result(f"[fak] The tool {listed.name} is not available: its description was quarantined "
                                 f"({bad.detector}, score {bad.score:.2f}; block {bad.block})."), "denied"
        args = json.dumps(arguments or {}, ensure_ascii=False)
        v = await guard.ask(AdjudicateCall(request_id=request_id, tool=listed.name, arguments=args, session=caller.session,
                                            key_id=caller.key, tainted=caller.session in self.tainted, server=listed.upstream.name))
        guard.m.verdicts.labels("call", "allow" if v.allow else "deny", "adjudicator", v.rule).inc()
        if not v.allow:
            return _error_result(refusal([(ToolCall(id=request_id, name=listed.name, arguments=args), v)])), "denied"
        result = await listed.upstream.call(listed.tool.name, arguments)
        if caller.session:
            self.tainted[caller.session] = None
            self.tainted.move_to_end(caller.session)
            while len(self.tainted) > TAINTED_SESSIONS:
                self.tainted.popitem(last=False)
        bad = await self._first_quarantined(result_texts(result), listed.name, caller, request_id, server=listed.upstream.name)
        if bad is None:
            return result, "tool_error" if result.is_error else "ok"
        log.warning("MCP result of %s quarantined (%s, score %.2f; block %s)", listed.name, bad.detector, bad.score, bad.block)
        return _error_result(placeholder(bad)), "quarantined"

    def _screener(self, caller: Caller) -> Screen:
        request_id = _request_id()
        return lambda texts, what, kind="tool_result": self._first_quarantined(texts, what, caller, request_id, kind)

    async def _first_quarantined(self, texts: list[str], what: str, caller: Caller, request_id: str,
                                 kind: ContentKind = "tool_result", server: str | None = None
                                 ) -> QuarantineVerdict | ResultVerdict | None:
        """The first quarantine verdict among `texts` (screened side by side), None when all are clean. The
        placeholder that will stand in for them is fak's own text: never screened when it comes back."""
        verdicts = await asyncio.gather(*(self._verdict(t, what, caller, request_id, kind, server) for t in texts))
        bad = next((v for v in verdicts if v is not None), None)
        if bad is not None:
            self.filter.placeholders.add(block_id(placeholder(bad)))
        return bad

    async def _verdict(self, text: str, tool: str, caller: Caller, request_id: str, kind: ContentKind = "tool_result",
                       server: str | None = None) -> QuarantineVerdict | ResultVerdict | None:
        """The quarantine verdict on `text` (a tool result, or a tool's description), None when clean: from
        the context filter when the block is known, else from the adjudicator (which publishes a quarantine).
        A description is screened by other rules than a result, so its verdict is kept under a block of its
        own: bytes passed as a description are not thereby clean as a tool result. `server`: the upstream
        of a tool (its audit records name it); None for a resource's or a prompt's text."""
        guard = self.guard
        if guard is None:
            return None
        block = block_id(text) if kind == "tool_result" else block_id(DESCRIPTION_BLOCK + text)
        scope = guard.scope(caller.key)  # a key whose screening policy changes verdicts keeps its clean ones apart
        known = self.filter.known(block, scope)
        if known == "clean":
            guard.m.verdicts.labels("result", "clean", "cache", "none").inc()
            return None
        if known == "quarantine":
            q = self.filter.quarantined[block]
            guard.m.verdicts.labels("result", "quarantine", "cache", q.detector).inc()
            await guard.publish_audit(AuditRecord(kind="result", outcome="quarantine", request_id=request_id, session=caller.session,
                                           key_id=caller.key, tool=tool, block=block, detector=q.detector, score=q.score,
                                           reason=q.reason, stage="cache", source=guard.instance, ts=time.time(),
                                           server=server))
            return q
        t0 = time.perf_counter()
        v = await guard.ask(AdjudicateResult(request_id=request_id, tool=tool, content=text, block=block,
                                              session=caller.session, key_id=caller.key, kind=kind, server=server))
        guard.m.screened.observe(time.perf_counter() - t0)
        guard.m.verdicts.labels("result", v.verdict, "adjudicator", v.detector or "none").inc()
        self.filter.add(v, scope)
        guard.m.quarantined.set(len(self.filter.quarantined))
        return v if v.verdict == "quarantine" else None


# ---------------------------------------------------------------------------------------------------------
# What is screened
# ---------------------------------------------------------------------------------------------------------


def description_text(tool: types.Tool) -> str:
    """What a model reads of a tool besides its name: title, description, and every description and title
    in its input and output schemas (annotations' title too), one a line."""
    parts = [tool.title or "", tool.description or "", (tool.annotations.title or "") if tool.annotations else ""]
    _schema_texts(tool.input_schema, parts)
    _schema_texts(tool.output_schema or {}, parts)
    return "\n".join(dict.fromkeys(p for p in parts if p))


def _schema_texts(node: Any, out: list[str]) -> None:
    if isinstance(node, dict):
        for k, v in node.items():
            if k in ("description", "title") and isinstance(v, str):
                out.append(v)
            else:
                _schema_texts(v, out)
    elif isinstance(node, list):
        for v in node:
            _schema_texts(v, out)


def result_texts(result: types.CallToolResult) -> list[str]:
    """Every text a tool result carries, each a block as a model wire would name it: each text content (a
    tool message of one text), all of them joined (an Anthropic tool_result of several text blocks), the
    texts of embedded resources, and the structured content as JSON (compact, and Python's default)."""
    texts = [c.text for c in result.content if isinstance(c, types.TextContent)]
    if len(texts) > 1:
        texts.append("".join(texts))
    texts += [c.resource.text for c in result.content
              if isinstance(c, types.EmbeddedResource) and isinstance(c.resource, types.TextResourceContents)]
    if result.structured_content is not None:  # as JavaScript clients (Claude Code) and Python's json write it
        texts.append(json.dumps(result.structured_content, ensure_ascii=False, separators=(",", ":")))
        texts.append(json.dumps(result.structured_content))
    return list(dict.fromkeys(t for t in texts if t))


def _error_result(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=text)], is_error=True)


@contextlib.contextmanager
def _as_mcp_errors() -> Iterator[None]:
    """No verdict (WireError: no adjudicator, a timeout, a bad signature; a text too big to screen) or no
    upstream: a JSON-RPC error."""
    try:
        yield
    except WireError as err:
        raise MCPError(types.INTERNAL_ERROR, f"fak: {err.message}") from None
    except bus.TooLarge as exc:
        raise MCPError(types.INTERNAL_ERROR, f"fak: a text of {exc.size} bytes on the bus is above its {exc.limit}-byte "
                                             "message limit: it cannot be screened, so it is withheld") from None
    except McpUnavailable as exc:
        raise MCPError(types.INTERNAL_ERROR, f"fak: {exc}") from None


def _caller(ctx: Any) -> Caller:
    request = getattr(ctx, "request", None)
    return request.scope.get(SCOPE_KEY, Caller()) if request is not None else Caller()


def _request_id() -> str:
    return f"mcp-{uuid.uuid4().hex[:24]}"
