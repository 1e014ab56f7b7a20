"""Prefix reuse through the official SDKs, on the numba backend (batch-invariant kernels).

A second and a third request share a 200-token prefix with the first: both SDKs report the reused tokens
(OpenAI `usage.prompt_tokens_details.cached_tokens`, Anthropic `usage.cache_read_input_tokens`), and each
output is identical to an uncached run of the same prompt (the same model and backend, in this process,
without a KV pool).
"""

from __future__ import annotations

import anthropic
import openai
import pytest

from fakcore.engine.prompt import build_prompt
from fakcore.engine.scheduler import Chunk, Scheduler
from fakcore.engine.sequence import Sequence
from fakcore.protocol import ChatMessage, GenerateRequest, Sampling
from tests.conftest import base_settings, running
from tests.unit.kv.support import model

PREFIX = ("You are the support agent of a small hardware shop. Answer in plain English, keep answers short, never "
          "invent prices, and ask for the order number before discussing any order. The shop is open Monday to "
          "Friday, nine to five.")  # the synthetic tokenizer: one token per byte
TOKENS = 24


@pytest.fixture(scope="module")
def topo(nats_server, tmp_path_factory):
    from fakcore.launcher import Topology

    assert len(PREFIX) >= 200
    with running(Topology(base_settings(nats_server.url, backend="numba"), log_dir=tmp_path_factory.mktemp("kv-prefix-logs")), timeout=120) as t:
        yield t


def uncached(question: str) -> tuple[str, int]:
    """The same prompt, greedy, on a fresh cache: (text, prompt tokens)."""
    m = model("synthetic", "numba")
    req = GenerateRequest(request_id="u", model="synthetic", sampling=Sampling(temperature=0.0, max_tokens=TOKENS),
                          messages=[ChatMessage(role="system", content=PREFIX), ChatMessage(role="user", content=question)])
    out: list[str] = []
    sched = Scheduler(m, lambda ev: out.append(ev.text) if isinstance(ev, Chunk) else None)
    p = build_prompt(m, req)
    seq = Sequence(request=req, prompt=p.ids, cache=m.transformer.new_cache(), model=m)
    sched.submit(seq)
    while sched.step():
        pass
    assert seq.cached_tokens == 0
    return "".join(out), len(p.ids)


def test_second_requests_reuse_the_prefix_on_both_wires_and_match_uncached_runs(topo):
    oai = openai.OpenAI(base_url=topo.gateway_url + "/v1", api_key="-", max_retries=0, timeout=120)
    claude = anthropic.Anthropic(base_url=topo.gateway_url, api_key="-", max_retries=0, timeout=120)

    def ask_openai(question: str):
        return oai.chat.completions.create(model="synthetic", max_tokens=TOKENS, temperature=0,
                                           messages=[{"role": "system", "content": PREFIX}, {"role": "user", "content": question}])

    first = ask_openai("Do you sell soldering irons?")
    assert first.usage.prompt_tokens_details.cached_tokens == 0

    second = ask_openai("Where is my order?")
    cached = second.usage.prompt_tokens_details.cached_tokens
    assert cached >= 200 and cached < second.usage.prompt_tokens
    text, prompt_tokens = uncached("Where is my order?")
    assert second.usage.prompt_tokens == prompt_tokens and second.choices[0].message.content == text

    third = claude.messages.create(model="synthetic", max_tokens=TOKENS, system=PREFIX, extra_body={"temperature": 0},
                                   messages=[{"role": "user", "content": "Can I return a kit?"}])
    assert third.usage.cache_read_input_tokens >= 200
    text, prompt_tokens = uncached("Can I return a kit?")
    assert third.usage.input_tokens + third.usage.cache_read_input_tokens == prompt_tokens
    assert third.content[0].text == text
