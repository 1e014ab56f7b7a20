"""Engine faults and load as the gateway sees them, against real processes.

    kill -9 of a worker mid-stream     each of its streams (OpenAI and Anthropic) gets its wire's error
                                       event within seconds; the next request is served by the other worker
    ... and a restart of it            noticed by its new incarnation, before its heartbeats go stale
    a worker dies under a queued one   the request, not started yet, is sent again and served elsewhere
    a full worker                      new requests go to the worker with room; none has room -> 429
    a burst of 300 at 16 + 64          at most 80 admitted, the rest 429 (OpenAI) / 529 (Anthropic) with
                                       Retry-After
    a client that gives up             its sequence is cancelled on the worker (non-stream and stream)

Each test starts its own engine workers and gateway (no adjudicator/kvmmu: no tool results here) and stops
them when it ends, also when it fails.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from fakcore.launcher import Child, Topology
from tests.conftest import base_settings, running, wait_for, worker_metrics_url

LONG = 3000  # synthetic tokens: a few seconds of decoding on one core


@contextlib.contextmanager
def stack(nats_server, tmp_path: Path, workers: int = 1, worker_stale_s: float = 3.0, **overrides: object) -> Iterator[Topology]:
    settings = base_settings(nats_server.url, adjudicate=False, **overrides).replace(worker_stale_s=worker_stale_s)
    with running(Topology(settings, workers=workers, services=("engine-cpu", "gateway"), log_dir=tmp_path / "logs")) as topo:
        yield topo


def chat(content: str = "hi", max_tokens: int = 4, stream: bool = False) -> dict:
    return {"model": "synthetic", "messages": [{"role": "user", "content": content}], "max_tokens": max_tokens,
            "temperature": 0, "stream": stream}


def live(topo: Topology) -> dict[str, dict]:
    return {w["worker"]: w for w in topo.health().get("workers", [])}


def child_of(topo: Topology, worker: str) -> Child:
    [child] = [c for c in topo.children if c.service == "engine-cpu" and c.env.get("FAK_WORKER_ID") == worker]
    return child


def spawn_worker(topo: Topology, worker: str, **overrides: object) -> None:
    topo.spawn("engine-cpu", len(topo.children), worker_id=worker, **overrides)
    assert wait_for(lambda: worker in live(topo), timeout=30), f"{worker} did not announce itself"


def metrics_url(nats_url: str, worker: str, timeout: float = 10) -> str:
    url = worker_metrics_url(nats_url, worker, timeout)
    assert url, f"{worker} did not announce itself within {timeout}s"
    return url


def outcomes(url: str, outcome: str) -> float:
    """A worker's fak_engine_requests_total{outcome=...}."""
    text = httpx.get(url + "/metrics", timeout=5).text
    found = re.search(rf'^fak_engine_requests_total\{{[^}}]*outcome="{outcome}"[^}}]*\}} (\S+)$', text, re.M)
    return float(found.group(1)) if found else 0.0


def cancelled(url: str) -> float:
    return outcomes(url, "cancelled")


def idle(topo: Topology, worker: str) -> bool:
    w = live(topo).get(worker)
    return bool(w) and w["active"] == 0 and w["queued"] == 0


class StreamReader(threading.Thread):
    """Reads one chat stream, on the OpenAI wire (/v1/chat/completions) or Anthropic's (/v1/messages): its
    worker, when its first token came, and when (and which) error event."""

    def __init__(self, url: str, body: dict, wire: str = "openai", headers: dict[str, str] | None = None):
        super().__init__(daemon=True)
        self.url, self.body, self.wire, self.headers = url, body, wire, headers or {}
        self.worker, self.status = "", 0
        self.first_token = threading.Event()
        self.error: dict | None = None
        self.error_at = 0.0
        self.done = False
        self.failure: BaseException | None = None

    def run(self) -> None:
        path = "/v1/messages" if self.wire == "anthropic" else "/v1/chat/completions"
        try:
            with httpx.Client(timeout=httpx.Timeout(30, read=20)) as http, \
                    http.stream("POST", self.url + path, json=self.body, headers=self.headers) as r:
                self.status, self.worker = r.status_code, r.headers.get("x-fak-worker", "")
                for line in r.iter_lines():
                    if not line.startswith("data: "):
                        continue
                    if line == "data: [DONE]":
                        self.done = True
                        break
                    event = json.loads(line[6:])
                    if "error" in event:  # OpenAI {"error": …}, Anthropic {"type": "error", "error": …}
                        self.error, self.error_at = event["error"], time.monotonic()
                        break
                    if event.get("type") == "message_stop":
                        self.done = True
                        break
                    if self._is_token(event):
                        self.first_token.set()
        except BaseException as exc:  # the test asserts on it
            self.failure = exc
        finally:
            self.first_token.set()

    def _is_token(self, event: dict) -> bool:
        if self.wire == "anthropic":
            return event.get("type") == "content_block_delta" and bool(event["delta"].get("text"))
        return bool(event["choices"] and event["choices"][0]["delta"].get("content"))


# -- a worker dies ---------------------------------------------------------------------------------------
def test_a_killed_workers_streams_fail_within_seconds_and_the_next_request_is_served(nats_server, tmp_path):
    """Three OpenAI and three Anthropic streams on one worker (one session: the gateway keeps them there),
    the worker killed -9: every one of them gets its wire's error event within 5 s of the kill, and the next
    request is served by the other worker."""
    with stack(nats_server, tmp_path, workers=2) as topo:
        assert wait_for(lambda: len(live(topo)) == 2, timeout=30)
        session = {"x-fak-session": "one-worker"}
        anthropic = {k: v for k, v in chat("tell me a long story", LONG, stream=True).items() if k != "temperature"}
        readers = [StreamReader(topo.gateway_url, chat(f"tell me a long story {i}", LONG, stream=True), "openai", session)
                   for i in range(3)]
        readers += [StreamReader(topo.gateway_url, {**anthropic, "messages": [{"role": "user", "content": f"a long story {i}"}]},
                                 "anthropic", session) for i in range(3)]
        readers[0].start()  # the session's first request picks its worker; the others follow it there
        assert readers[0].first_token.wait(30), readers[0].failure
        for reader in readers[1:]:
            reader.start()
        for reader in readers:
            assert reader.first_token.wait(30) and reader.status == 200, (reader.wire, reader.status, reader.failure)
        [victim_id] = {reader.worker for reader in readers}  # one session, one worker
        victim = child_of(topo, victim_id)
        assert wait_for(lambda: live(topo)[victim_id]["active"] == len(readers), timeout=10), live(topo)  # its next announce
        os.kill(victim.proc.pid, signal.SIGKILL)
        killed = time.monotonic()

        r = httpx.post(topo.gateway_url + "/v1/chat/completions", json=chat("right after"), timeout=30)
        assert r.status_code == 200, r.text
        assert r.headers["x-fak-worker"] != victim_id

        for reader in readers:
            reader.join(30)
            assert reader.error is not None, (reader.wire, reader.done, reader.failure)
            latency = reader.error_at - killed
            print(f"{reader.wire}: error event {latency:.2f}s after the kill: {reader.error}")
            assert latency < 5.0, (reader.wire, latency)
            assert victim_id in reader.error["message"] and "stopped" in reader.error["message"], (reader.wire, reader.error)


def test_a_request_queued_on_a_worker_that_dies_is_served_by_another(nats_server, tmp_path):
    with stack(nats_server, tmp_path, worker_id="w1", max_sessions=1, max_queue=1) as topo:
        running_one = StreamReader(topo.gateway_url, chat("busy", LONG, stream=True))
        running_one.start()
        assert running_one.first_token.wait(30) and running_one.worker == "w1", running_one.failure
        queued: dict = {}

        def send() -> None:
            r = httpx.post(topo.gateway_url + "/v1/chat/completions", json=chat("queued", 8), timeout=60)
            queued.update(status=r.status_code, body=r.json())

        sender = threading.Thread(target=send, daemon=True)
        sender.start()
        assert wait_for(lambda: live(topo)["w1"]["queued"] == 1, timeout=10), live(topo)
        spawn_worker(topo, "w2")
        os.kill(child_of(topo, "w1").proc.pid, signal.SIGKILL)

        sender.join(30)
        assert queued.get("status") == 200, queued
        assert queued["body"]["usage"]["completion_tokens"] == 8
        running_one.join(30)
        assert running_one.error is not None and "w1" in running_one.error["message"]


def test_a_worker_restarted_under_a_stream_is_noticed_by_its_new_incarnation(nats_server, tmp_path):
    # heartbeats alone would not tell for 30 s: the restarted worker announcing a new incarnation does
    with stack(nats_server, tmp_path, worker_id="w1", worker_stale_s=30.0) as topo:
        reader = StreamReader(topo.gateway_url, chat("tell me a long story", LONG, stream=True))
        reader.start()
        assert reader.first_token.wait(30) and reader.worker == "w1", reader.failure
        old = child_of(topo, "w1")
        os.kill(old.proc.pid, signal.SIGKILL)
        killed = time.monotonic()
        old.proc.wait(10)
        topo.children.remove(old)
        topo.spawn("engine-cpu", 0, worker_id="w1")

        reader.join(30)
        assert reader.error is not None, (reader.done, reader.failure)
        print(f"restart noticed {reader.error_at - killed:.2f}s after the kill: {reader.error['message']}")
        assert "restarted" in reader.error["message"] and reader.error_at - killed < 20
        r = httpx.post(topo.gateway_url + "/v1/chat/completions", json=chat("after the restart"), timeout=30)
        assert r.status_code == 200 and r.headers["x-fak-worker"] == "w1", r.text


# -- load ------------------------------------------------------------------------------------------------
def test_requests_go_to_the_worker_with_room_and_none_with_room_is_429(nats_server, tmp_path):
    with stack(nats_server, tmp_path, worker_id="w1", max_sessions=1, max_queue=0) as topo:
        first = StreamReader(topo.gateway_url, chat("busy one", LONG, stream=True))
        first.start()
        assert first.first_token.wait(30) and first.worker == "w1", first.failure
        spawn_worker(topo, "w2", max_sessions=2, max_queue=0)
        assert wait_for(lambda: live(topo)["w1"]["active"] == 1, timeout=10)
        w1 = metrics_url(topo.settings.nats_url, "w1")
        with httpx.Client(base_url=topo.gateway_url, timeout=30) as http:
            served = [http.post("/v1/chat/completions", json=chat(f"q{i}")) for i in range(4)]
            assert [r.status_code for r in served] == [200] * 4, served[-1].text
            assert {r.headers["x-fak-worker"] for r in served} == {"w2"}
            assert outcomes(w1, "overloaded") == 0  # routed by load, not sent to w1 to be refused first

            assert wait_for(lambda: idle(topo, "w2"), timeout=10)
            busy = [StreamReader(topo.gateway_url, chat(f"busy {i}", LONG, stream=True)) for i in range(2)]
            for reader in busy:
                reader.start()
            for reader in busy:
                assert reader.first_token.wait(30) and reader.worker == "w2", reader.failure
            refused = http.post("/v1/chat/completions", json=chat("no room"))
            assert refused.status_code == 429, refused.text
            assert refused.headers["retry-after"] == "1"
            assert refused.json()["error"]["code"] == "overloaded"


@pytest.mark.parametrize("n", [300])
def test_a_burst_admits_at_most_the_queue_limit_and_refuses_the_rest_with_retry_after(nats_server, tmp_path, n):
    with stack(nats_server, tmp_path, worker_id="w1", max_sessions=16, max_queue=64) as topo:
        results = asyncio.run(burst(topo.gateway_url, n))
        assert wait_for(lambda: idle(topo, "w1"), timeout=15), live(topo)  # the admitted streams, closed, are cancelled
    admitted = [r for r in results if r["status"] == 200]
    refused = [r for r in results if r["status"] != 200]
    print(f"burst of {n}: {len(admitted)} admitted, {len(refused)} refused")
    assert 16 <= len(admitted) <= 16 + 64
    assert not [r for r in admitted if r["error"] or r["ended"]], "an admitted stream failed or ended during the burst"
    assert sum(r["tokens"] > 0 for r in admitted) >= 16  # the active ones stream while the burst goes on
    for wire, status, etype in (("openai", 429, "server_error"), ("anthropic", 529, "overloaded_error")):
        mine = [r for r in refused if r["wire"] == wire]
        assert mine and all(r["status"] == status and r["retry_after"] == "1" for r in mine), mine[:3]
        assert all(r["type"] == etype for r in mine), mine[:3]


async def burst(url: str, n: int) -> list[dict]:
    """n concurrent streams (every third on the Anthropic wire); each admitted one is read until all n have
    their answer, then closed."""
    answered, everyone = 0, asyncio.Event()

    async def one(http: httpx.AsyncClient, i: int) -> dict:
        nonlocal answered
        wire = "anthropic" if i % 3 == 0 else "openai"
        path = "/v1/messages" if wire == "anthropic" else "/v1/chat/completions"
        out: dict = {"wire": wire, "tokens": 0, "error": None, "ended": False}
        async with http.stream("POST", path, json=chat(f"burst {i}", 2000, stream=True)) as r:
            out.update(status=r.status_code, retry_after=r.headers.get("retry-after"))
            answered += 1
            if answered == n:
                everyone.set()
            if r.status_code != 200:
                body = json.loads(await r.aread())
                out["type"] = body["error"]["type"]
                return out
            reading = asyncio.create_task(read(r, out))
            await everyone.wait()
            reading.cancel()
            return out

    async def read(r: httpx.Response, out: dict) -> None:
        async for line in r.aiter_lines():
            if line.startswith("event: error") or line.startswith('data: {"error"'):
                out["error"] = line
            elif line in ("data: [DONE]", "event: message_stop"):
                out["ended"] = True
            elif '"content"' in line or '"text_delta"' in line:
                out["tokens"] += 1

    limits = httpx.Limits(max_connections=n + 10, max_keepalive_connections=n + 10)
    async with httpx.AsyncClient(base_url=url, timeout=httpx.Timeout(60), limits=limits) as http:
        return await asyncio.wait_for(asyncio.gather(*(one(http, i) for i in range(n))), timeout=120)


# -- clients that give up --------------------------------------------------------------------------------
def test_an_abandoned_request_is_cancelled_on_its_worker(nats_server, tmp_path):
    with stack(nats_server, tmp_path, worker_id="w1") as topo:
        url = metrics_url(topo.settings.nats_url, "w1")
        before = cancelled(url)

        # non-stream: the client hangs up while its request decodes
        body = json.dumps(chat("never mind", LONG)).encode()
        with socket.create_connection((topo.settings.host, topo.settings.port), timeout=10) as sock:
            sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: fak\r\ncontent-type: application/json\r\n"
                         b"content-length: %d\r\n\r\n%s" % (len(body), body))
            assert wait_for(lambda: live(topo).get("w1", {}).get("active") == 1, timeout=10), live(topo)
        gave_up = time.monotonic()
        assert wait_for(lambda: cancelled(url) == before + 1, timeout=5), cancelled(url)
        print(f"non-stream: cancelled {time.monotonic() - gave_up:.2f}s after the client left")
        assert time.monotonic() - gave_up < 2.5
        assert wait_for(lambda: idle(topo, "w1"), timeout=5), live(topo)

        with httpx.Client(base_url=topo.gateway_url, timeout=30) as http, \
                http.stream("POST", "/v1/messages", json=chat("never mind", LONG, stream=True)) as r:
            assert r.status_code == 200
            for line in r.iter_lines():  # the stream runs: leave after its first token
                if "text_delta" in line:
                    break
        gave_up = time.monotonic()
        assert wait_for(lambda: cancelled(url) == before + 2, timeout=5), cancelled(url)
        print(f"stream: cancelled {time.monotonic() - gave_up:.2f}s after the client left")
        assert time.monotonic() - gave_up < 2.5
        assert wait_for(lambda: idle(topo, "w1"), timeout=5), live(topo)
