"""x-fak-session pins a session to the engine worker that holds its KV cache, among several workers; a
conversation without the header is pinned by its opening (what every later turn repeats)."""

from __future__ import annotations

import httpx
import pytest

from fakcore.launcher import Topology
from tests.conftest import base_settings, running


@pytest.fixture(scope="module")
def two_workers(nats_server, tmp_path_factory):
    settings = base_settings(nats_server.url, max_sessions=4, adjudicate=False)
    with running(Topology(settings, workers=2, services=("engine-cpu", "gateway"),
                          log_dir=tmp_path_factory.mktemp("affinity-logs"))) as topo:
        yield topo


@pytest.mark.parametrize("headers", [{"x-fak-session": "s-affinity"}, {}], ids=["named", "derived"])
def test_a_session_stays_on_its_worker_and_reuses_its_cache(two_workers, headers):
    conversation = [{"role": "user", "content": f"A long opening message that every turn shares ({len(headers)}). " * 8}]
    workers, cached = set(), []
    with httpx.Client(base_url=two_workers.gateway_url, timeout=60) as http:
        for turn in range(4):
            r = http.post("/v1/chat/completions", headers=headers,
                          json={"model": "synthetic", "messages": conversation, "max_tokens": 4, "temperature": 0})
            assert r.status_code == 200, r.text
            workers.add(r.headers["x-fak-worker"])
            cached.append(r.json()["usage"]["prompt_tokens_details"]["cached_tokens"])
            conversation += [{"role": "assistant", "content": r.json()["choices"][0]["message"]["content"]},
                             {"role": "user", "content": f"turn {turn}"}]
        # different conversations spread over both workers
        spread = {http.post("/v1/chat/completions", json={"model": "synthetic", "messages": [{"role": "user", "content": f"q{i}"}],
                                                           "max_tokens": 2}).headers["x-fak-worker"] for i in range(12)}
    assert len(workers) == 1
    assert all(c > 0 for c in cached[1:])
    assert len(spread) == 2
