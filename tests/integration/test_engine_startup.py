"""An engine worker is not healthy, and not announced, until its kernels are warm: /healthz says what it is
doing (loading the model, warming up the numba kernels) and the first request never waits for a compile."""

from __future__ import annotations

import threading
import time

import httpx
import pytest

from fakcore.launcher import Topology
from fakcore.models.sources import pulled_path
from tests.conftest import base_settings, free_port

pytestmark = pytest.mark.slow


def test_the_worker_is_healthy_only_once_warm(nats_server, tmp_path):
    assert pulled_path("smollm2-135m").exists(), "SmolLM2 weights missing: run `fak model pull smollm2-135m` (make test does)"
    port = free_port()
    settings = base_settings(nats_server.url, model="smollm2-135m", backend="numba", metrics_port=port, adjudicate=False)
    topo = Topology(settings, services=("engine-cpu", "gateway"), log_dir=tmp_path)
    seen: list[tuple[bool, str, int]] = []  # the worker's (ok, detail) as it changes, with the gateway's worker count
    done = threading.Event()

    def watch() -> None:  # the launcher's children die with the thread that started them: start in this one
        while not done.is_set() and not (seen and seen[-1][0]):
            try:
                body = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).json()
                if not seen or seen[-1][:2] != (body["ok"], body["detail"]):
                    seen.append((body["ok"], body["detail"], len(topo.health().get("workers", []))))
            except httpx.TransportError:
                pass  # not listening yet
            time.sleep(0.05)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        topo.start(timeout=240)
        watcher.join(timeout=10)
        phases = [detail.split(" ")[0] for ok, detail, _ in seen if not ok]
        assert phases[-1:] == ["warming"] and seen[-1][0], seen  # loading (if seen), warming up, then ok
        assert all(workers == 0 for ok, _, workers in seen if not ok), ("routed to before it was warm", seen)
        r = httpx.post(topo.gateway_url + "/v1/chat/completions", timeout=120, json={
            "model": "smollm2-135m", "max_tokens": 4, "temperature": 0, "messages": [{"role": "user", "content": "Hi"}]})
        assert r.status_code == 200, r.text
    finally:
        done.set()
        topo.stop()
