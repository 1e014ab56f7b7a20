"""Tenant isolation of the prefix cache (issue 10): `cached_tokens` is an oracle for what others sent unless
the KV pool is partitioned. Tenant B probing tenant A's secret system prompt learns nothing; each tenant
still reuses its own prefixes; a client's cache salt narrows its partition further; the keys of a tenant
configured in `tenants` share one partition. The operator views are per tenant too: an API key reads its
own verdicts and requests, an admin key everything."""

from __future__ import annotations

import openai
import pytest

from fakcore.launcher import Topology
from tests.conftest import base_settings, running

KEYS = ("sk-tenant-a", "sk-tenant-b", "sk-tenant-c", "sk-tenant-e", "sk-team-1", "sk-team-2", "sk-solo")
TENANTS = ("team=sk-team-1", "team=sk-team-2")  # two keys, one tenant
SECRET = "You are the vault assistant. The door PIN is 4821. Never reveal it. " * 4


@pytest.fixture(scope="module")
def topo(nats_server, tmp_path_factory):
    settings = base_settings(nats_server.url, kv_min_prefix=4, api_keys=KEYS, tenants=TENANTS, admin_keys=("ops",))
    with running(Topology(settings, services=("adjudicator", "kvmmu", "engine-cpu", "gateway"),
                          log_dir=tmp_path_factory.mktemp("logs"))) as t:
        yield t


def cached(topo, key: str, system: str, **extra) -> int:
    client = openai.OpenAI(base_url=topo.gateway_url + "/v1", api_key=key, max_retries=0)
    r = client.chat.completions.create(model="synthetic", max_tokens=2, temperature=0, messages=[
        {"role": "system", "content": system}, {"role": "user", "content": "hello"}], **extra)
    return r.usage.prompt_tokens_details.cached_tokens


def test_no_signal_across_tenants_from_the_prefix_cache(topo):
    assert cached(topo, "sk-tenant-a", SECRET) == 0
    assert cached(topo, "sk-tenant-a", SECRET) > 100  # A reuses its own prefix
    # B guesses the PIN: with a shared cache the right guess would reuse A's whole prompt. Partitioned, what
    # B sees depends on B's own earlier probes only — exactly what E sees running the same probes.
    guesses = ("4821", "1234", "4000", "4821")
    probes = {key: [cached(topo, key, SECRET.replace("4821", g)) for g in guesses] for key in ("sk-tenant-b", "sk-tenant-e")}
    assert probes["sk-tenant-b"][0] == 0 and probes["sk-tenant-b"] == probes["sk-tenant-e"], probes
    assert probes["sk-tenant-b"][-1] > 100  # B's own repeated prompt is cached for B


def test_a_cache_salt_narrows_the_partition(topo):
    system = "Salted prompt for the cache scope test. " * 6
    assert cached(topo, "sk-tenant-c", system, extra_body={"cache_salt": "project-1"}) == 0
    assert cached(topo, "sk-tenant-c", system, extra_body={"cache_salt": "project-2"}) == 0
    assert cached(topo, "sk-tenant-c", system, extra_body={"cache_salt": "project-1"}) > 100


def test_the_keys_of_a_configured_tenant_share_its_partition(topo):
    system = "The team's shared system prompt, for the configured-tenant test. " * 6
    assert cached(topo, "sk-team-1", system) == 0
    assert cached(topo, "sk-team-2", system) > 100  # the other key of the team reuses the first one's prefix
    assert cached(topo, "sk-solo", system) == 0  # a key of no configured tenant does not
    assert cached(topo, "sk-team-2", system, extra_body={"cache_salt": "own"}) == 0  # a salt narrows the team's too


def test_operator_views_are_per_tenant_unless_admin(topo):
    import httpx

    from fakcore.policy import key_id
    from tests.conftest import wait_for
    from tests.integration.test_quarantine import MARKER, PAYLOAD, conversation

    def ask(key: str, user: str):
        client = openai.OpenAI(base_url=topo.gateway_url + "/v1", api_key=key, max_retries=0)
        return client.chat.completions.create(model="synthetic", max_tokens=2, temperature=0,
                                              messages=conversation(user, PAYLOAD.replace("Paris", f"Paris ({key})")))

    def view(key: str, path: str) -> httpx.Response:
        return httpx.get(topo.gateway_url + path, headers={"authorization": f"Bearer {key}"}, timeout=10)

    a, b = ask("sk-tenant-a", "Weather?"), ask("sk-tenant-b", "Weather please?")

    def quarantines(key: str) -> list[dict]:
        records = view(key, "/v1/fak/audit?kind=result&limit=1000").json()["records"]
        return [r for r in records if r["outcome"] == "quarantine"]

    assert wait_for(lambda: {r["request_id"] for r in quarantines("ops")} >= {a.id, b.id}), "the verdicts never arrived"
    for key, mine, theirs in (("sk-tenant-a", a, b), ("sk-tenant-b", b, a)):
        records = view(key, "/v1/fak/audit?limit=1000").json()
        assert records["records"] and {r["key_id"] for r in records["records"]} == {key_id(key)}, records
        assert "quarantined_blocks" not in records  # the gateway-wide count is the operator's
        assert mine.id in {r["request_id"] for r in quarantines(key)}
        assert theirs.id not in {r["request_id"] for r in records["records"]}
        own = view(key, f"/v1/fak/requests/{mine.id}")
        assert own.status_code == 200 and MARKER not in own.text and own.json()["key_id"] == key_id(key)
        other = view(key, f"/v1/fak/requests/{theirs.id}")
        assert other.status_code == 404 and other.json()["error"]["message"], other.text
    assert view("ops", f"/v1/fak/requests/{a.id}").status_code == 200
    assert "quarantined_blocks" in view("ops", "/v1/fak/audit").json()
    assert view("sk-nobody", "/v1/fak/audit").status_code == 401
