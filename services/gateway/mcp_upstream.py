"""The gateway's upstream MCP servers: one persistent session each, over the official `mcp` SDK client.

    stdio   the gateway launches the command (stdio_client: a minimal environment plus the file's `env`),
            its stderr goes to the gateway's log line by line; when the process exits (its stdout closes)
            the session ends and the command is started again after a backoff (0.5 s doubling to 10 s;
            back to 0.5 s after 30 s up)
    http    streamable HTTP to `url`; a connection that fails or is closed is opened again the same way

A supervisor task per upstream owns the session (the SDK's task groups must be entered and left in one
task); requests borrow it. While an upstream is down it lists no tools and a call gets McpUnavailable,
which says since when and when the next attempt is due. The protocol version is the SDK's `auto`
negotiation: `server/discover` (2026-07-28) first, the initialize handshake for older servers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import anyio
import mcp.types as types
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from fakcore.mcp_config import McpServer

log = logging.getLogger("fak.gateway.mcp")

LIST_PAGES = 100  # most pages of an upstream's list walked (a paginator that never ends cannot hang us)
T = TypeVar("T")
SESSION_GONE = ("Session not found", "Session terminated")  # an HTTP server's 404 for a session it no longer has


class McpUnavailable(Exception):
    """The upstream cannot take a request now (not running, or it went away during the request)."""


class Backoff:
    """Restart delays: `first` seconds after a death, doubling each death in a row up to `cap`; a session
    that stayed up `reset_after` seconds was healthy, so its next death waits `first` again."""

    def __init__(self, first: float = 0.5, cap: float = 10.0, reset_after: float = 30.0):
        self.first, self.cap, self.reset_after = first, cap, reset_after
        self.deaths = 0

    def next(self, up_for: float) -> float:
        self.deaths = 1 if up_for >= self.reset_after else self.deaths + 1
        return min(self.cap, self.first * 2 ** (self.deaths - 1))


class McpUpstream:
    """One configured MCP server: its supervised session, and its tools as last listed."""

    def __init__(self, name: str, spec: McpServer, prefix: str):
        self.name, self.spec, self.prefix = name, spec, prefix
        self.client: Client | None = None  # set while a session is up
        self.tools: list[types.Tool] = []  # as the upstream named them, from its last listing
        self.state = "starting"  # starting | up | ending (reconnecting) | down | stopped
        self.detail = ""  # why it is down
        self.since = time.time()  # when `state` last changed
        self.retry_at = 0.0  # while down: when the next attempt is due (unix time)
        self.restarts = 0  # sessions opened after the first
        self.attempted = asyncio.Event()  # set once the first attempt has succeeded or failed
        self.on_change: Any = lambda upstream: None  # metrics hook: called on every state change
        self._task: asyncio.Task | None = None
        self._closed: anyio.Event | None = None  # the live session's end: set by its transport, or to reconnect
        self._stderr: Any = None  # stdio: the write end of the pipe the children's stderr goes to

    # -- lifecycle ------------------------------------------------------------------------------------
    def start(self) -> None:
        if self.spec.transport == "stdio":
            read, write = os.pipe()
            self._stderr = os.fdopen(write, "w")
            threading.Thread(target=self._log_stderr, args=(read,), name=f"mcp-{self.name}-stderr", daemon=True).start()
        self._task = asyncio.create_task(self._supervise(), name=f"mcp upstream {self.name}")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(BaseException):
                await self._task
        self._set("stopped", "the gateway is stopping")
        if self._stderr is not None:
            self._stderr.close()  # the stderr reader ends at EOF, once no child holds the pipe

    def _log_stderr(self, fd: int) -> None:
        with os.fdopen(fd, "r", errors="replace") as lines:
            for line in lines:
                log.info("mcp %s: %s", self.name, line.rstrip())

    def _set(self, state: str, detail: str = "") -> None:
        self.state, self.detail, self.since = state, detail, time.time()
        self.on_change(self)

    # -- the supervised session -----------------------------------------------------------------------
    def _transport(self) -> contextlib.AbstractAsyncContextManager[Any]:
        s = self.spec
        if s.transport == "stdio":
            params = StdioServerParameters(command=s.command[0], args=s.command[1:], env=dict(s.env) or None, cwd=s.cwd or None)
            return stdio_client(params, errlog=self._stderr)
        return streamable_http_client(s.url, http_client=create_mcp_http_client(headers=dict(s.headers) or None))

    async def _supervise(self) -> None:
        backoff = Backoff()
        first = True
        while True:
            closed = self._closed = anyio.Event()
            opened = time.monotonic()
            try:
                async with Client(_watched(self._transport(), closed), mode="auto", cache=None,
                                  read_timeout_seconds=self.spec.timeout_s) as client:
                    self.tools = await _list_all(client)
                    self.client = client
                    if not first:
                        self.restarts += 1
                    self._set("up")
                    log.info("MCP server %s is up (%s, protocol %s): %d tools", self.name, self._where(),
                             client.protocol_version, len(self.tools))
                    self.attempted.set()
                    await closed.wait()  # stdout (stdio) or the HTTP transport ended, or `ask` saw the session go
                    detail = self.detail if self.state == "ending" else \
                        "the process exited" if self.spec.transport == "stdio" else "the connection closed"
            except Exception as exc:  # a command that fails to start, a server that refuses, a broken connection
                detail = _describe(exc)
            finally:
                self.client = None
            first = False
            delay = backoff.next(time.monotonic() - opened)
            self.retry_at = time.time() + delay
            self._set("down", detail)
            log.warning("MCP server %s (%s) is down: %s; trying again in %.1fs", self.name, self._where(), detail, delay)
            self.attempted.set()
            await asyncio.sleep(delay)

    def _where(self) -> str:
        return " ".join(self.spec.command) if self.spec.transport == "stdio" else self.spec.url

    # -- requests -------------------------------------------------------------------------------------
    def _session(self) -> Client:
        client = self.client
        if client is None:
            if self.state == "starting":
                raise McpUnavailable(f"MCP server {self.name!r} is starting")
            wait = max(0.0, self.retry_at - time.time())
            raise McpUnavailable(f"MCP server {self.name!r} is not running ({self.detail}); "
                                 f"the gateway restarts it, next attempt in {wait:.1f}s")
        return client

    async def list_tools(self) -> list[types.Tool]:
        """The upstream's tools now (remembered in `tools`); McpUnavailable while it is down."""
        try:
            self.tools = await self.ask("tools/list", _list_all)
        except McpUnavailable:
            raise
        except Exception as exc:  # an error reply, a listing that does not validate
            raise McpUnavailable(f"MCP server {self.name!r} did not list its tools: {_describe(exc)}") from None
        return self.tools

    async def call(self, tool: str, arguments: dict[str, Any] | None) -> types.CallToolResult:
        return await self.ask(f"the call to {tool!r}", lambda c: c.call_tool(tool, arguments))

    def serves(self, capability: str) -> bool:
        """Whether the running upstream announced `capability` (resources, prompts)."""
        client = self.client
        return client is not None and getattr(client.server_capabilities, capability, None) is not None

    async def ask(self, what: str, request: Callable[[Client], Awaitable[T]]) -> T:
        """`request` on the live session. The upstream's JSON-RPC errors propagate as MCPError; a session
        that is down or ends during the request, or a request past `timeout_s`, is McpUnavailable."""
        client = self._session()
        try:
            return await request(client)
        except MCPError as exc:
            if exc.code == types.CONNECTION_CLOSED:
                raise McpUnavailable(f"MCP server {self.name!r} went away during {what}; the gateway restarts it") from None
            if exc.code == types.INVALID_REQUEST and exc.message in SESSION_GONE and self._closed is not None:
                self._set("ending", "the server forgot the session (it restarted?)")  # HTTP 404: open a new one
                self._closed.set()
                raise McpUnavailable(f"MCP server {self.name!r} lost the session during {what}; the gateway "
                                     "opens a new one") from None
            if exc.code == types.REQUEST_TIMEOUT:
                raise McpUnavailable(f"MCP server {self.name!r} did not answer {what} within {self.spec.timeout_s:g}s "
                                     "(timeout_s)") from None
            raise

    def health(self) -> dict[str, Any]:
        return {"server": self.name, "transport": self.spec.transport, "state": self.state, "detail": self.detail,
                "since": round(self.since, 3), "tools": len(self.tools) if self.state == "up" else 0,
                "restarts": self.restarts, "prefix": self.prefix}


async def _list_all(client: Client) -> list[types.Tool]:
    return await pages(client.list_tools, "tools")


async def pages(fetch: Callable[..., Awaitable[Any]], field: str) -> list[Any]:
    """Every item of a paginated list (`fetch(cursor=…)`), at most LIST_PAGES pages."""
    items: list[Any] = []
    cursor: str | None = None
    for _ in range(LIST_PAGES):
        page = await fetch(cursor=cursor)
        items.extend(getattr(page, field))
        cursor = page.next_cursor
        if not cursor:
            break
    return items


@contextlib.asynccontextmanager
async def _watched(transport: contextlib.AbstractAsyncContextManager[Any], closed: anyio.Event) -> AsyncIterator[Any]:
    """`transport`'s streams, with `closed` set when its read side ends (a stdio server's exit, a closed
    HTTP transport): the SDK session just sees the end of its stream, the supervisor learns of it."""
    async with transport as (read, write):
        relay_send, relay_read = anyio.create_memory_object_stream[Any](0)

        async def relay() -> None:
            try:
                async with relay_send:
                    async for item in read:
                        await relay_send.send(item)
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                pass
            finally:
                closed.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(relay)
            try:
                yield relay_read, write
            finally:
                tg.cancel_scope.cancel()


def _describe(exc: BaseException) -> str:
    """One line for an exception, ExceptionGroups (anyio's) unwrapped to their first leaf."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
