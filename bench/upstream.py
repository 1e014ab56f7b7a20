"""Upstream mode: the latency fak adds over a direct call to the same upstream, one tool result screened per request.

    python -m bench upstream [--quick] [--requests 400 2000] [--concurrency 1 64] [--profile N] [--json PATH]

The upstreams are the scripted servers of the tests (tests/support/upstreams.py), each in a process of its own
(in the benchmark's process they would share its GIL with the client at 64 requests in flight); they answer a
short text reply at once. fak runs as real processes: an embedded nats-server, adjudicator, kvmmu and the
gateway (no engine worker: every model routes upstream), with the default screening (inline rules and the
model stage, sync) and the gateway verdict barrier every upstream gets.

Every request carries one Anthropic `tool_result` block (OpenAI: one `tool` message). Each row sends the same
requests to the upstream directly and through fak, in alternating blocks, from httpx.AsyncClient pools holding
as many connections as requests in flight (at most 8 per client: see clients()):

    measure     total: a non-stream request to its full body; ttfb: a streamed one to the first body byte
    tool result unique: a counter in the text, so every request is screened (the verdict cache cannot answer);
                cached: the same text every time (the gateway's verdict cache answers, no adjudicator round trip)
    added       fak's percentile minus the direct percentile, both measured in the same row

Below the table, where the gateway's time goes: means of the services' own histograms over each row
(gateway in-app time, verdict barrier, adjudicate.result round trip over NATS, time inside the adjudicator,
upstream time to response headers) and each process's CPU time per request (/proc). `--profile N` then
sends N requests per wire and concurrency to a gateway under cProfile (a sitecustomize hook in its
environment; SIGUSR1 starts and stops it) and prints its time per request by package.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import itertools
import json
import os
import platform
import re
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
GOAL_P50_MS, GOAL_P99_MS = 2.0, 5.0
REPLY = "The build passed: 214 tests, no failures."
RECONNECTS = {False: 0, True: 0}  # requests sent again after a kept-alive connection closed under them
LOG = "\n".join(f"[{i:02d}] tests/unit/test_module_{i}.py::test_case_{i} PASSED" for i in range(12))

# ============================================================================ the upstream processes


def serve(wire: str) -> int:
    """`python -m bench.upstream --serve WIRE`: one scripted upstream answering REPLY to every model call, until
    SIGTERM. Prints its URL on the first line.

    The fixture's app, served from this process's main thread on a socket of our own: the fixture binds
    `socket.socket()`, whose proto 0 keeps asyncio from setting TCP_NODELAY on accepted connections, and
    every response (headers and body written apart) then waits out the client's delayed ACK, ~40 ms."""
    import collections
    import socket

    import uvicorn

    from tests.support.upstreams import AnthropicUpstream, OpenAIUpstream, text

    cls = AnthropicUpstream if wire == "anthropic" else OpenAIUpstream
    up = cls(default=text(REPLY))
    up._requests = collections.deque(maxlen=64)  # the fixture records every request; keep the last few only
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    print(f"http://127.0.0.1:{sock.getsockname()[1]}", flush=True)
    config = uvicorn.Config(up._app, interface="asgi3", lifespan="off", log_config=None, log_level="warning",
                            access_log=False, timeout_keep_alive=600)
    uvicorn.Server(config).run(sockets=[sock])  # until SIGTERM
    return 0


class UpstreamProcess:
    def __init__(self, wire: str):
        self.proc = subprocess.Popen([sys.executable, "-m", "bench.upstream", "--serve", wire], cwd=ROOT,
                                     stdout=subprocess.PIPE, text=True, start_new_session=True)
        self.url = self.proc.stdout.readline().strip()
        if not self.url.startswith("http://"):
            self.stop()
            raise RuntimeError(f"the {wire} upstream did not start")

    def stop(self) -> None:
        from fakcore.launcher import stop_process

        stop_process(self.proc, 10)


# ================================================================================= the requests


@dataclass(frozen=True)
class Wire:
    name: str  # anthropic: passthrough of the client's bytes; openai: same-wire JSON
    path: str
    headers: dict[str, str]
    encode: Callable[[str, bool], bytes]  # (tool result text, stream) -> request body


def anthropic_body(result: str, stream: bool) -> bytes:
    return json.dumps({"model": "claude-bench", "max_tokens": 64, "stream": stream, "messages": [
        {"role": "user", "content": "Run the tests and tell me whether the build passed."},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_bench_1", "name": "read_log",
                                           "input": {"path": "build.log"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_bench_1", "content": result}]}]}).encode()


def openai_body(result: str, stream: bool) -> bytes:
    return json.dumps({"model": "gpt-bench", "max_tokens": 64, "stream": stream, "messages": [
        {"role": "user", "content": "Run the tests and tell me whether the build passed."},
        {"role": "assistant", "tool_calls": [{"id": "call_bench_1", "type": "function",
                                              "function": {"name": "read_log", "arguments": '{"path": "build.log"}'}}]},
        {"role": "tool", "tool_call_id": "call_bench_1", "content": result}]}).encode()


WIRES = (Wire("anthropic", "/v1/messages", {"x-api-key": "sk-bench", "anthropic-version": "2023-06-01",
                                            "content-type": "application/json"}, anthropic_body),
         Wire("openai", "/v1/chat/completions", {"authorization": "Bearer sk-bench", "content-type": "application/json"},
              openai_body))

ROUTES = """
upstreams:
  anth: {{url: "{anthropic}", wire: anthropic}}
  oai: {{url: "{openai}/v1", wire: openai}}
routes:
  - {{model: "claude-*", upstream: anth}}
  - {{model: "gpt-*", upstream: oai}}
  - {{model: "*", upstream: anth}}   # every model upstream: no engine worker, and /healthz needs none
"""


def tool_results(unique: bool) -> Callable[[], str]:
    """A build log; `unique`: numbered, never the same text twice in this process (so never a cached verdict)."""
    if not unique:
        return lambda: f"build cached\n{LOG}\n214 passed, 0 failed in 3.2s"
    counter, run = itertools.count(), os.urandom(4).hex()
    return lambda: f"build {run}-{next(counter)}\n{LOG}\n214 passed, 0 failed in 3.2s"


# ================================================================================== measuring


async def one(client: httpx.AsyncClient, url: str, wire: Wire, body: bytes, stream: bool, via_fak: bool) -> float:
    """Seconds to the full response (stream False) or to the first body byte (stream True)."""
    t0 = time.perf_counter()
    if not stream:
        r = await client.post(url, content=body, headers=wire.headers)
        took, seen = time.perf_counter() - t0, r.content
        ok = r.status_code == 200 and REPLY.encode() in seen
    else:
        took, seen = 0.0, b""
        async with client.stream("POST", url, content=body, headers=wire.headers) as r:
            async for chunk in r.aiter_raw():
                if not took:
                    took = time.perf_counter() - t0
                seen += chunk
        ok = r.status_code == 200 and REPLY.split()[0].encode() in seen
    if not ok or (via_fak and r.headers.get("x-fak-redacted-blocks") != "0"):
        raise RuntimeError(f"{'fak' if via_fak else 'direct'} {wire.name} request failed: {r.status_code} "
                           f"{r.headers.get('x-fak-redacted-blocks')!r} {seen[:300]!r}")
    return took


POOL_SHARD = 8  # connections per httpx client (see clients())


def clients(c: int) -> list[httpx.AsyncClient]:
    """Connection pools for c requests in flight: c connections in all, at most POOL_SHARD per httpx client.

    One AsyncClient with 64 connections costs its process ~4.7 ms of CPU per request on this machine (httpcore's
    pool bookkeeping grows with the connections it holds), against ~1.1 ms with eight clients of eight: with a
    single pool the benchmark's own client, one core at most, would be what the c=64 rows measure."""
    k = -(-c // POOL_SHARD)
    per = -(-c // k)
    return [httpx.AsyncClient(limits=httpx.Limits(max_connections=per, max_keepalive_connections=per), timeout=60)
            for _ in range(k)]


async def block(pools: list[httpx.AsyncClient], url: str, wire: Wire, results: Callable[[], str], stream: bool,
                n: int, c: int, via_fak: bool) -> list[float]:
    """n requests, c in flight at a time, spread evenly over the pools."""
    out: list[float] = []
    todo = iter(range(n))  # shared by the workers: together they send n

    async def worker(client: httpx.AsyncClient) -> None:
        for _ in todo:
            body = wire.encode(results(), stream)
            try:
                out.append(await one(client, url, wire, body, stream, via_fak))
            except (httpx.ReadError, httpx.RemoteProtocolError, httpx.WriteError):
                # a kept-alive connection the server closed as it was reused (the gateway's uvicorn closes idle
                # ones after 5 s, and a side's pool idles while the other side's block runs): send it again
                RECONNECTS[via_fak] += 1
                out.append(await one(client, url, wire, body, stream, via_fak))

    await asyncio.gather(*(worker(pools[i % len(pools)]) for i in range(min(c, n))))
    return out


@dataclass
class Row:
    wire: str
    measure: str  # total | ttfb
    result: str  # unique | cached
    c: int
    n: int
    direct_ms: list[float] = field(default_factory=list)  # p50, p99
    fak_ms: list[float] = field(default_factory=list)
    added_ms: list[float] = field(default_factory=list)
    screened: int = 0  # adjudicate.result round trips the gateway made for the row's requests
    stages_ms: dict[str, float] = field(default_factory=dict)  # means of the services' histograms over the row
    cpu_ms: dict[str, float] = field(default_factory=dict)  # CPU time (user + system) per request through fak

    @property
    def met(self) -> bool:
        return self.added_ms[0] <= GOAL_P50_MS and self.added_ms[1] <= GOAL_P99_MS


def pct(xs: list[float]) -> list[float]:
    return [float(np.percentile(np.asarray(xs) * 1e3, q)) for q in (50, 99)]


# ===================================================================== the services' own histograms

HISTOGRAMS = {  # stage -> (service, metric, label filter)
    "gateway in-app": ("gateway", "fak_gateway_request_seconds", 'route="{route}"'),
    "verdict barrier": ("gateway", "fak_gateway_verdict_barrier_seconds", ""),
    "adjudicate.result round trip": ("gateway", "fak_gateway_screening_seconds", ""),
    "inside the adjudicator": ("adjudicator", "fak_adjudicator_seconds", 'kind="result"'),
    "of which screening": ("adjudicator", "fak_adjudicator_screen_seconds", 'stage="inline+model"'),
    "upstream to headers": ("gateway", "fak_gateway_upstream_seconds", 'upstream="{upstream}"'),
}


def scrape(urls: dict[str, str]) -> dict[tuple[str, str], tuple[float, float]]:
    """(service, metric{labels}) -> (sum, count) of every histogram."""
    out: dict[tuple[str, str], list[float]] = {}
    for service, url in urls.items():
        with urllib.request.urlopen(url, timeout=5) as r:
            text = r.read().decode()
        for m in re.finditer(r"^(\w+)_(sum|count)(\{[^}]*\})? (\S+)$", text, re.M):
            out.setdefault((service, m[1] + (m[3] or "")), [0.0, 0.0])[m[2] == "count"] = float(m[4])
    return {k: (v[0], v[1]) for k, v in out.items()}


def stages(before: dict, after: dict, wire: Wire) -> tuple[dict[str, float], int]:
    """Mean milliseconds of each stage between two scrapes, and the number of tool results screened."""
    route, upstream = ("messages", "anth") if wire.name == "anthropic" else ("chat", "oai")
    means, screened = {}, 0
    for stage, (service, metric, labels) in HISTOGRAMS.items():
        key = (service, metric + ("{" + labels.format(route=route, upstream=upstream) + "}" if labels else ""))
        s1, n1 = after.get(key, (0.0, 0.0))
        s0, n0 = before.get(key, (0.0, 0.0))
        if n1 > n0:
            means[stage] = (s1 - s0) / (n1 - n0) * 1e3
        if metric == "fak_gateway_screening_seconds":
            screened = int(n1 - n0)
    return means, screened


def cpu_seconds(pids: dict[str, int]) -> dict[str, float]:
    """User + system CPU seconds each process has used so far (/proc/PID/stat)."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for name, pid in pids.items():
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        out[name] = (int(fields[11]) + int(fields[12])) / tick  # utime, stime: fields 14 and 15 of stat(5)
    return out


async def metrics_urls(settings, gateway_url: str) -> dict[str, str]:
    """The gateway's /metrics, and the adjudicator's as its heartbeat announces it."""
    from fakcore import bus
    from fakcore.protocol import Decoders, subjects

    nc = await bus.connect(settings, "bench-upstream")
    heard = asyncio.Event()
    urls = {"gateway": gateway_url + "/metrics"}

    async def on_health(msg) -> None:
        beat = Decoders.heartbeat.decode(msg.data)
        if beat.service == "adjudicator" and beat.metrics_url:
            urls["adjudicator"] = beat.metrics_url.rstrip("/") + ("" if beat.metrics_url.endswith("/metrics") else "/metrics")
            heard.set()

    await nc.subscribe(subjects.HEALTH, cb=on_health)
    try:
        await asyncio.wait_for(heard.wait(), 15)
    finally:
        await nc.close()
    return urls


# ======================================================================================= the run


async def measure(upstreams: dict[str, str], settings, gateway_url: str, pids: dict[str, int],
                  plan: list[tuple[int, int]], rounds: int) -> list[Row]:
    urls = await metrics_urls(settings, gateway_url)
    rows = []
    for c, n in plan:
        direct, fak = clients(c), clients(c)
        try:
            for wire in WIRES:
                targets = ((direct, upstreams[wire.name] + wire.path, False), (fak, gateway_url + wire.path, True))
                for pools, url, via_fak in targets:  # open the pools' connections, and fak's to the upstream
                    for stream in (False, True):
                        await block(pools, url, wire, tool_results(True), stream, 2 * c, c, via_fak)
                for stream, unique in itertools.product((False, True), (True, False)):
                    results = tool_results(unique)
                    before, cpu0 = scrape(urls), cpu_seconds(pids)
                    times: dict[bool, list[float]] = {False: [], True: []}
                    for _ in range(rounds):  # alternating blocks: a drift in the machine's load hits both sides
                        for pools, url, via_fak in targets:
                            times[via_fak] += await block(pools, url, wire, results, stream, n // rounds, c, via_fak)
                    row = Row(wire.name, "ttfb" if stream else "total", "unique" if unique else "cached", c,
                              len(times[True]), pct(times[False]), pct(times[True]))
                    row.added_ms = [f - d for f, d in zip(row.fak_ms, row.direct_ms, strict=True)]
                    row.stages_ms, row.screened = stages(before, scrape(urls), wire)
                    row.cpu_ms = {k: (v - cpu0[k]) / row.n * 1e3 for k, v in cpu_seconds(pids).items()}
                    print(f"  {wire.name} {row.measure} {row.result} c={c}: added p50 {row.added_ms[0]:.2f} ms "
                          f"p99 {row.added_ms[1]:.2f} ms", file=sys.stderr, flush=True)
                    rows.append(row)
        finally:
            for client in direct + fak:
                await client.aclose()
    return rows


def start_topology(routes: Path, log_dir: Path, env: dict[str, str] | None = None):
    from bench.gateway import free_port
    from fakcore.launcher import TEMP, Topology
    from fakcore.settings import Settings

    settings = Settings.load(env={}, port=free_port(), routes=str(routes), data_dir=TEMP, announce_interval_s=0.5)
    saved = dict(os.environ)
    os.environ.update(env or {})  # the children's environment is this process's, plus their settings
    try:
        return Topology(settings, services=("adjudicator", "kvmmu", "gateway"), log_dir=log_dir).start(timeout=120)
    finally:
        os.environ.clear()
        os.environ.update(saved)


# ================================================================================ the profile


SITECUSTOMIZE = '''
import os, sys
if "fak_gateway" in sys.orig_argv and os.environ.get("BENCH_PROFILE_OUT"):  # python -m fak_gateway (fak serve execs it)
    import cProfile, signal
    _state = {"prof": None, "n": 0}

    def _toggle(signum, frame):
        if _state["prof"] is None:
            _state["prof"] = cProfile.Profile()
            _state["prof"].enable()
        else:
            _state["prof"].disable()
            _state["prof"].dump_stats(f"{os.environ['BENCH_PROFILE_OUT']}.{_state['n']}")
            _state["prof"], _state["n"] = None, _state["n"] + 1

    signal.signal(signal.SIGUSR1, _toggle)
'''

CATEGORIES = (  # (label, substrings of the file or function name), first match wins
    ("idle (epoll wait)", ("method 'poll' of 'select.epoll", "method 'select' of")),
    ("socket syscalls", ("of '_socket.socket'", "method 'send", "method 'recv")),
    ("redaction JSON walk (passthrough.py)", ("gateway/passthrough.py",)),
    ("wire decode (anthropic_wire/openai_wire, msgspec)", ("gateway/anthropic_wire.py", "gateway/openai_wire.py", "msgspec")),
    ("guard, context filter, audit view", ("gateway/guard.py", "gateway/context_filter.py", "gateway/audit_view.py")),
    ("other fak gateway code", ("gateway/", "libs/fakcore")),
    ("httpx client to the upstream", ("httpx", "httpcore", "anyio", "sniffio")),
    ("nats client (adjudicate round trip)", ("nats/",)),
    ("litestar", ("litestar",)),
    ("uvicorn + h11 (HTTP server)", ("uvicorn", "h11")),
    ("prometheus_client", ("prometheus_client",)),
    ("logging (httpx's INFO line per upstream request)", ("logging/",)),
    ("json (stdlib)", ("json/",)),
    ("asyncio event loop", ("asyncio/", "_asyncio", "selectors.py", "contextvars")),
)


def profile_breakdown(path: str, n: int) -> dict[str, float]:
    """The gateway's time per request by package, in ms: each function's own time (tottime) goes to its package;
    that of a function of no package (a builtin, generic stdlib) to its callers', in proportion to the calls."""
    import pstats

    st = pstats.Stats(path).stats  # type: ignore[attr-defined]

    def own(key: tuple) -> str | None:
        name = f"{key[0]}:{key[2]}"
        return next((lb for lb, subs in CATEGORIES if any(s in name for s in subs)), None)

    def shares(key: tuple, depth: int = 0) -> dict[str, float]:
        """key's time as fractions per package."""
        if (label := own(key)) is not None:
            return {label: 1.0}
        callers = st[key][4] if key in st else {}
        total = sum(c[2] + c[3] for c in callers.values())  # the time spent in key from each caller
        if depth > 6 or not total:
            return {"other": 1.0}
        out: dict[str, float] = {}
        for caller, c in callers.items():
            for lb, f in shares(caller, depth + 1).items():
                out[lb] = out.get(lb, 0.0) + f * (c[2] + c[3]) / total
        return out

    out = {label: 0.0 for label, _ in CATEGORIES} | {"other": 0.0}
    for key, (_, _, tottime, _, _) in st.items():
        for label, f in shares(key).items():
            out[label] += tottime * f * 1e3 / n
    return out


def profile(routes: Path, n: int, concurrency: list[int]) -> dict[str, dict[str, float]]:
    """N non-stream requests with a new tool result per wire and concurrency, against a gateway under cProfile:
    its time per request by package ("anthropic c=1" -> label -> ms)."""
    hook = Path(tempfile.mkdtemp(prefix="fak-bench-hook-"))
    (hook / "sitecustomize.py").write_text(SITECUSTOMIZE)
    out = str(hook / "gateway.prof")
    env = {"PYTHONPATH": os.pathsep.join(p for p in (str(hook), os.environ.get("PYTHONPATH", "")) if p),
           "BENCH_PROFILE_OUT": out}
    topo = start_topology(routes, hook / "logs", env)
    gateway = next(ch.proc for ch in topo.children if ch.service == "gateway")

    async def run(wire: Wire, c: int) -> None:
        pools = clients(c)
        try:
            url = topo.gateway_url + wire.path
            await block(pools, url, wire, tool_results(True), False, max(20, 2 * c), c, True)
            gateway.send_signal(signal.SIGUSR1)  # start
            await asyncio.sleep(0.2)
            await block(pools, url, wire, tool_results(True), False, n, c, True)
            gateway.send_signal(signal.SIGUSR1)  # stop and dump
        finally:
            for client in pools:
                await client.aclose()

    try:
        result = {}
        for i, (c, wire) in enumerate(itertools.product(concurrency, WIRES)):
            asyncio.run(run(wire, c))
            dump = Path(f"{out}.{i}")
            for _ in range(100):
                if dump.exists():
                    break
                time.sleep(0.1)
            time.sleep(0.5)  # let the dump finish writing
            result[f"{wire.name} c={c}"] = profile_breakdown(str(dump), n)
        return result
    finally:
        topo.stop()


# ===================================================================================== the report


def machine() -> dict[str, object]:
    cpu = platform.processor() or platform.machine()
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                   if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {"cpu": cpu, "threads": len(os.sched_getaffinity(0)), "os": f"{platform.system()} {platform.machine()}",
            "python": platform.python_version(), "load_avg": [round(x, 2) for x in os.getloadavg()],
            "date": datetime.date.today().isoformat()}


def report(rows: list[Row], info: dict[str, object]) -> str:
    lines = [f"machine: {info['cpu']}, {info['threads']} threads, {info['os']}, Python {info['python']}; "
             f"load average at start {info['load_avg_start']}, at end {info['load_avg']}",
             "", "| wire | measure | tool result | c | n | direct p50 | direct p99 | fak p50 | fak p99 | added p50 | added p99 "
             "| screened | goal |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        ms = " | ".join(f"{x:.2f}" for x in (*r.direct_ms, *r.fak_ms, *r.added_ms))
        lines.append(f"| {r.wire} | {r.measure} | {r.result} | {r.c} | {r.n} | {ms} | {r.screened} | "
                     f"{'met' if r.met else 'not met'} |")
    lines += ["", "(ms; added = fak minus direct at that percentile; screened = adjudicate.result round trips; "
              f"goal: added p50 <= {GOAL_P50_MS:g} ms and added p99 <= {GOAL_P99_MS:g} ms; sent again after a kept-alive "
              f"connection closed under them: direct {RECONNECTS[False]}, fak {RECONNECTS[True]})", "",
              "Where the gateway's time goes: means over each row's requests through fak (ms)", "",
              "| wire | measure | tool result | c | " + " | ".join(HISTOGRAMS) + " | " + " | ".join(
                  f"CPU {p}" for p in rows[0].cpu_ms) + " |",
              "|---|---|---|---|" + "---|" * (len(HISTOGRAMS) + len(rows[0].cpu_ms))]
    for r in rows:
        lines.append(f"| {r.wire} | {r.measure} | {r.result} | {r.c} | "
                     + " | ".join(f"{r.stages_ms[s]:.2f}" if s in r.stages_ms else "-" for s in HISTOGRAMS) + " | "
                     + " | ".join(f"{v:.2f}" for v in r.cpu_ms.values()) + " |")
    lines += ["", "(gateway in-app: from the gateway's ASGI middleware to its last body byte; upstream to headers: the "
              "gateway's httpx send to the upstream's response headers; the barrier, round trip and adjudicator columns "
              "are means over the requests screened (a cached row's one screen is its first request); CPU: user + "
              "system time of the process per request through fak, from /proc)"]
    lines += ["", verdict(rows)]
    return "\n".join(lines)


def verdict(rows: list[Row]) -> str:
    screened = [r for r in rows if r.result == "unique"]
    missed = [r for r in screened if not r.met]
    if not missed:
        return (f"Goal met: with a tool result screened on every request, the added p50 is at most {GOAL_P50_MS:g} ms and "
                f"the added p99 at most {GOAL_P99_MS:g} ms in every row.")
    names = "; ".join(f"{r.wire} {r.measure} c={r.c} (added p50 {r.added_ms[0]:.2f} ms, p99 {r.added_ms[1]:.2f} ms)"
                      for r in missed)
    return f"Goal not met with a tool result screened on every request in: {names}."


def print_profile(prof: dict[str, dict[str, float]], n: int) -> str:
    labels = [lb for lb, _ in CATEGORIES] + ["other"]
    busy = {w: sum(v for k, v in p.items() if not k.startswith("idle")) for w, p in prof.items()}
    lines = ["", "", f"The gateway's time per request under cProfile (non-stream, a new tool result each time, {n} requests per "
                 "column; each function's own time summed by package, builtins counted with their callers; ms, and in "
                 "brackets the share of the busy total; profiling inflates the ms, the shares are the point):", "",
             "| | " + " | ".join(prof) + " |", "|---|" + "---|" * len(prof)]
    for lb in labels:
        cells = [f"{prof[w][lb]:.3f}" + ("" if lb.startswith("idle") else f" ({100 * prof[w][lb] / busy[w]:.0f}%)")
                 for w in prof]
        lines.append(f"| {lb} | " + " | ".join(cells) + " |")
    lines.append("| **busy total (less idle)** | " + " | ".join(f"{busy[w]:.3f}" for w in prof) + " |")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench upstream", description=textwrap.dedent(__doc__ or ""),
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--serve", choices=("anthropic", "openai"), help=argparse.SUPPRESS)  # the upstream process
    ap.add_argument("--quick", action="store_true", help="a smoke run: 16 and 128 requests per row, two rounds")
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 64])
    ap.add_argument("--requests", type=int, nargs="+", default=[400, 2000], help="per row and side, one per concurrency")
    ap.add_argument("--rounds", type=int, default=4, help="alternating direct/fak blocks per row")
    ap.add_argument("--profile", type=int, default=0, metavar="N",
                    help="also profile the gateway over N requests per wire and concurrency")
    ap.add_argument("--json", metavar="PATH", help="write the rows and the machine as JSON")
    args = ap.parse_args(argv)
    if args.serve:
        return serve(args.serve)
    if args.quick:
        args.requests, args.rounds = [16, 128][: len(args.concurrency)], 2
    if len(args.requests) != len(args.concurrency):
        ap.error("give one --requests count per --concurrency level")
    info = machine()
    info["load_avg_start"] = info["load_avg"]
    work = Path(tempfile.mkdtemp(prefix="fak-bench-upstream-"))
    ups = {w: UpstreamProcess(w) for w in ("anthropic", "openai")}
    try:
        routes = work / "routes.yaml"
        routes.write_text(ROUTES.format(anthropic=ups["anthropic"].url, openai=ups["openai"].url))
        t0 = time.monotonic()
        topo = start_topology(routes, work / "logs")
        print(f"fak up (adjudicator, kvmmu, gateway) in {time.monotonic() - t0:.1f} s; upstreams {ups['anthropic'].url} "
              f"(anthropic), {ups['openai'].url} (openai), each a process of its own", file=sys.stderr)
        try:
            pids = {ch.service: ch.proc.pid for ch in topo.children if ch.service in ("gateway", "adjudicator")}
            if topo.nats is not None and topo.nats.proc is not None:
                pids["nats-server"] = topo.nats.proc.pid
            rows = asyncio.run(measure({w: u.url for w, u in ups.items()}, topo.settings, topo.gateway_url, pids,
                                       list(zip(args.concurrency, args.requests, strict=True)), args.rounds))
        finally:
            topo.stop()
        prof = profile(routes, args.profile, args.concurrency) if args.profile else {}
    finally:
        for u in ups.values():
            u.stop()
    info["load_avg"] = [round(x, 2) for x in os.getloadavg()]
    text = report(rows, info) + (print_profile(prof, args.profile) if prof else "")
    print(text)
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": info, "rows": [asdict(r) | {"met": r.met} for r in rows],
                                               "profile_ms_per_request": prof,
                                               "sent_again": {"direct": RECONNECTS[False], "fak": RECONNECTS[True]}}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
