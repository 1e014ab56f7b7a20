"""Sampling a request leaves unset is the served model's (FAK_SAMPLING, else the model makers' recommendation,
else llama.cpp's conservative defaults), knob by knob, announced by the worker; what a request sets wins. Synthetic model: its near-uniform logits make any temperature > 0 visibly random."""

from __future__ import annotations

import httpx
import openai
import pytest

from fakcore.launcher import Topology
from fakcore.models.sources import FALLBACK_SAMPLING
from tests.conftest import base_settings, running


@pytest.fixture(scope="module")
def greedy_by_default(nats_server, tmp_path_factory):
    settings = base_settings(nats_server.url, model="synthetic", adjudicate=False, sampling="temperature=0")
    with running(Topology(settings, services=("engine-cpu", "gateway"), log_dir=tmp_path_factory.mktemp("sampling"))) as topo:
        yield openai.OpenAI(base_url=topo.gateway_url + "/v1", api_key="-", max_retries=0, timeout=60), topo


def _texts(client: openai.OpenAI, **sampling: object) -> set[str]:
    return {client.chat.completions.create(model="synthetic", messages=[{"role": "user", "content": "sample defaults"}],
                                           max_tokens=12, seed=seed, **sampling).choices[0].message.content
            for seed in range(4)}


def test_unset_temperature_takes_the_servers_default(greedy_by_default):
    assert len(_texts(greedy_by_default[0])) == 1  # greedy: the seed changes nothing


def test_a_temperature_the_request_sets_wins(greedy_by_default):
    assert len(_texts(greedy_by_default[0], temperature=1.0)) > 1


def test_the_worker_announces_its_defaults_knob_by_knob(greedy_by_default):
    [worker] = httpx.get(greedy_by_default[1].gateway_url + "/healthz").json()["workers"]
    assert worker["sampling"] == {**FALLBACK_SAMPLING, "temperature": 0.0}  # the setting's knob, the fallback's others
