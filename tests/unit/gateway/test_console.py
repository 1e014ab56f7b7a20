"""The operator console's views without NATS: who may read them (viewer(): admin all, a tenant its own),
the page's files, the excerpt cut around the offending spans, and the per-model plots' summary."""

from __future__ import annotations

import pytest

from fak_gateway.console import Throughput, excerpt
from fak_gateway.handling import Viewer
from fakcore.policy import key_id
from fakcore.protocol import GenerateDone, TextSpan, Usage
from fakcore.screening import window
from tests.unit.gateway.support import RECEIPT, FakeEngines, gateway, settings

ADMIN, ALICE, BOB = "ops-key", "alice-key", "bob-key"
VIEWS = ("/v1/fak/console/state", "/v1/fak/console/stats", "/v1/fak/console/policy", "/v1/fak/console/events")


def result(tenant: str, block: str) -> dict:
    return {"kind": "result", "outcome": "quarantine", "key_id": key_id(tenant), "block": block, "request_id": "r-" + block,
            "spans": [{"start": 6, "end": 12}], "window": "hello world, all"}


@pytest.fixture
async def client():
    async with gateway(FakeEngines(settings(admin_keys=(ADMIN,), api_keys=(ALICE, BOB)))) as c:
        audit = c.app.state.fak.audit
        audit.records.extend([result(ALICE, "ba"), result(BOB, "bb")])
        audit.requests["r-ba"] = {"request_id": "r-ba", "model": "synthetic", "key_id": key_id(ALICE), "ts": 1.0,
                                  "messages": [{"role": "tool", "content": "x"}]}
        audit.requests["r-bb"] = {"request_id": "r-bb", "model": "synthetic", "key_id": key_id(BOB), "ts": 1.0, "messages": []}
        yield c


@pytest.mark.parametrize("path", VIEWS)
async def test_no_key_is_401_in_openais_error_shape(client, path):
    r = await client.get(path)
    assert r.status_code == 401
    assert r.json()["error"]["type"] == "authentication_error" and r.json()["error"]["message"]
    r = await client.get(path, headers={"authorization": "Bearer not-a-key"})
    assert r.status_code == 401


async def test_a_tenant_sees_only_its_own_records_and_requests(client):
    mine = (await client.get("/v1/fak/console/state", headers={"authorization": f"Bearer {ALICE}"})).json()
    assert [r["block"] for r in mine["records"]] == ["ba"] and [r["request_id"] for r in mine["requests"]] == ["r-ba"]
    assert mine["tenant"] == key_id(ALICE) and "quarantined_blocks" not in mine
    assert "messages" not in mine["requests"][0] and mine["requests"][0]["tool_results"] == 1
    everyone = (await client.get("/v1/fak/console/state", headers={"authorization": f"Bearer {ADMIN}"})).json()
    assert {r["block"] for r in everyone["records"]} == {"ba", "bb"} and everyone["tenant"] is None
    assert everyone["records"][0]["excerpt"] == [["hello ", False], ["world,", True], [" all", False]]


async def test_the_keys_of_one_configured_tenant_read_each_others_records_and_no_others():
    carol = "carol-key"
    s = settings(admin_keys=(ADMIN,), api_keys=(ALICE, BOB, carol), tenants=(f"acme={ALICE}", f"acme={carol}"))
    async with gateway(FakeEngines(s)) as c:
        audit = c.app.state.fak.audit
        audit.records.extend([result(ALICE, "ba"), result(BOB, "bb"), result(carol, "bc")])
        for who, block in ((ALICE, "ba"), (BOB, "bb"), (carol, "bc")):
            audit.requests["r-" + block] = {"request_id": "r-" + block, "model": "synthetic", "key_id": key_id(who),
                                            "ts": 1.0, "messages": []}
        as_carol = {"authorization": f"Bearer {carol}"}
        state = (await c.get("/v1/fak/console/state", headers=as_carol)).json()
        assert state["tenant"] == "acme" and {r["block"] for r in state["records"]} == {"ba", "bc"}
        assert {r["request_id"] for r in state["requests"]} == {"r-ba", "r-bc"}
        log = (await c.get("/v1/fak/audit", headers=as_carol)).json()
        assert {r["block"] for r in log["records"]} == {"ba", "bc"} and "quarantined_blocks" not in log
        assert (await c.get("/v1/fak/requests/r-ba", headers=as_carol)).status_code == 200  # alice's: same tenant
        assert (await c.get("/v1/fak/requests/r-bb", headers=as_carol)).status_code == 404  # bob's: another
        bob = (await c.get("/v1/fak/audit", headers={"authorization": f"Bearer {BOB}"})).json()
        assert [r["block"] for r in bob["records"]] == ["bb"]  # a key in no entry: a tenant of its own


async def test_the_policy_is_the_operators_only(client):
    r = await client.get("/v1/fak/console/policy", headers={"authorization": f"Bearer {ALICE}"})
    assert r.status_code == 403 and r.json()["error"]["type"] == "permission_error"
    r = await client.get("/v1/fak/console/policy", headers={"authorization": f"Bearer {ADMIN}"})
    assert r.status_code == 200 and r.json()["default"]["screening"]["replace"] == "whole"


async def test_the_page_is_served_without_a_key(client):
    page = await client.get("/console")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html") and "console.js" in page.text
    for name, kind in (("console.js", "text/javascript"), ("console.css", "text/css")):
        r = await client.get(f"/console/{name}")
        assert r.status_code == 200 and r.headers["content-type"].startswith(kind)
    assert (await client.get("/console/secrets.py")).status_code == 404


@pytest.mark.parametrize("start,end,length", [(0, 5, 40), (150, 170, 1000), (10, 900, 1000), (995, 1000, 1000), (3, 4, 6)])
def test_the_excerpt_marks_exactly_the_spans_screening_windowed(start, end, length):
    text = "".join(chr(ord("a") + i % 26) if i % 7 else "😀" for i in range(length))  # astral: code points, not UTF-16
    spans = [TextSpan(start=start, end=end), TextSpan(start=end + 2, end=end + 4)] if end + 4 <= length else [TextSpan(start=start, end=end)]
    record = {"kind": "result", "window": window(text, spans), "spans": [{"start": s.start, "end": s.end} for s in spans]}
    pieces = excerpt(record)
    assert "".join(t for t, _ in pieces) == record["window"]
    marked = [t for t, m in pieces if m]
    assert marked[0] == text[start:end][:len(record["window"])]
    assert all(t in [text[s.start:s.end] for s in spans] for t in marked[1:])


def test_the_summary_buckets_tokens_per_second_and_latency_per_model(client):
    audit = client.app.state.fak.audit
    t = Throughput(audit)
    audit.requests["r1"] = {"request_id": "r1", "key_id": key_id(ALICE), "ts": 0.0}

    def done(rid: str, tokens: int) -> GenerateDone:
        return GenerateDone(request_id=rid, seq=0, finish_reason="stop", usage=Usage(completion_tokens=tokens), receipt=RECEIPT)

    t.on_done("synthetic", done("r1", 50))
    t.on_done("other", done("r2", 10))  # not remembered by the audit view: tokens, no latency
    now = t.done[-1]["ts"]
    alice = t.summary(Viewer(key_id(ALICE), frozenset((key_id(ALICE),))), now=now)
    [m] = alice["models"]
    assert m["model"] == "synthetic" and m["completion_tokens"] == 50 and m["requests"] == 1
    [p] = [p for p in m["points"] if p["tokens_per_s"]]
    assert p["tokens_per_s"] == 50 / alice["bucket_s"] and p["latency_ms"] > 0
    both = t.summary(None, now=now)["models"]
    assert [m["model"] for m in both] == ["other", "synthetic"] and all(p["latency_ms"] is None for p in both[0]["points"])
