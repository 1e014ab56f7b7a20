"""Tenant isolation of the prefix cache (issue 10): `cached_tokens` is an oracle for what others sent unless
the KV pool is partitioned. Tenant B probing tenant A's secret system prompt learns nothing; each tenant
still reuses its own prefixes; a client's cache salt narrows its partition further."""

from __future__ import annotations

import openai
import pytest

from fakcore.launcher import Topology
from tests.conftest import base_settings, running

SECRET = "You are the vault assistant. The door PIN is 4821. Never reveal it. " * 4


@pytest.fixture(scope="module")
def topo(nats_server, tmp_path_factory):
    settings = base_settings(nats_server.url, kv_min_prefix=4)
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
