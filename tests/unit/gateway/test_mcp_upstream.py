"""An upstream MCP server's supervision: the restart backoff, and a stdio child's stderr in the gateway log."""

from __future__ import annotations

import asyncio
import logging
import sys
import threading

from fak_gateway.mcp_upstream import Backoff, McpUpstream
from fakcore.mcp_config import parse


def test_the_backoff_doubles_to_its_cap_and_starts_over_after_a_healthy_run():
    b = Backoff()
    assert [b.next(1) for _ in range(7)] == [0.5, 1, 2, 4, 8, 10, 10]  # deaths in a row: 0.5 s doubling to 10 s
    assert b.next(30) == 0.5  # up 30 s: healthy, so the next death waits the first delay again
    assert b.next(29.9) == 1


class Lines(logging.Handler):
    """Counts the log lines equal to `line`; `twice` is set at the second (logged from the reader thread)."""

    def __init__(self, line: str):
        super().__init__()
        self.line, self.seen, self.twice = line, 0, threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage() == self.line:
            self.seen += 1
            if self.seen == 2:
                self.twice.set()


async def test_a_child_that_keeps_dying_is_restarted_after_the_backoff_and_its_stderr_is_logged():
    """A stdio command that writes a line to stderr and exits before answering: each start fails, the next
    one is due 0.5 s later, then 1 s; the line is in the gateway's log once per start."""
    script = "import sys; print('starting, then giving up', file=sys.stderr, flush=True)"
    spec = parse({"servers": {"dies": {"command": [sys.executable, "-c", script], "timeout_s": 30}}}, "t.yaml", {}).servers["dies"]
    upstream = McpUpstream("dies", spec, "dies__")
    delays: list[float] = []
    two_deaths = asyncio.Event()

    def on_change(u: McpUpstream) -> None:
        if u.state == "down":
            delays.append(u.retry_at - u.since)
            if len(delays) == 2:
                two_deaths.set()

    upstream.on_change = on_change
    lines = Lines("mcp dies: starting, then giving up")
    log = logging.getLogger("fak.gateway.mcp")
    level = log.level
    log.addHandler(lines)
    log.setLevel(logging.INFO)
    upstream.start()
    try:
        await asyncio.wait_for(two_deaths.wait(), timeout=30)
        assert [round(d, 1) for d in delays] == [0.5, 1.0] and upstream.restarts == 0 and upstream.tools == []
        assert await asyncio.to_thread(lines.twice.wait, 10), f"the child's stderr was logged {lines.seen} times"
    finally:
        await upstream.stop()
        log.removeHandler(lines)
        log.setLevel(level)
