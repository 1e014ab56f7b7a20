"""Tool-call adjudication end to end: real nats-server, real services, the official SDKs.

One topology for the module: adjudicator (a policy file that the tests rewrite to check hot reload),
kvmmu, a synthetic worker, a SmolLM2-135M worker, and the gateway. Forced tool calls (`tool_choice` naming
a function) are grammar-constrained, so a tool schema with a one-value enum decides the arguments the
model writes: a schema of {"city": ["Oslo"]} makes a call the policy refuses, {"city": ["Paris"]} one it
allows.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import anthropic
import openai
import pytest

from fakcore.launcher import Topology
from tests.conftest import _dump_logs, base_settings, wait_for

POLICY = """
default: allow
sinks: [send_email]
untrusted: deny
tools:
  get_weather:
    args:
      city: {enum: [Paris, Rome]}
  send_email:
    args:
      to: {regex: '[a-z]+@example\\.com'}
  delete_everything:
    action: ask
    reason: deleting needs a human's confirmation
"""
GREEDY = {"temperature": 0}
ADMIN = "ops-key"
SMOL = "smollm2-135m"


def weather(*cities: str) -> dict:
    return {"type": "object", "properties": {"city": {"type": "string", "enum": list(cities)}}, "required": ["city"]}


EMAIL = {"type": "object", "properties": {"to": {"type": "string", "enum": ["bob@example.com"]}}, "required": ["to"]}


def oai_tool(name: str, schema: dict) -> dict:
    return {"type": "function", "function": {"name": name, "parameters": schema}}


def forced(name: str) -> dict:
    return {"type": "function", "function": {"name": name}}


@pytest.fixture(scope="module")
def policy_file(tmp_path_factory) -> Path:
    p = tmp_path_factory.mktemp("policy") / "policy.yaml"
    p.write_text(POLICY)
    return p


@pytest.fixture(scope="module")
def topo(nats_server, tmp_path_factory, policy_file):
    settings = base_settings(nats_server.url, models=("synthetic", SMOL), policy=str(policy_file), policy_reload_s=0.2,
                             admin_keys=(ADMIN,))
    t = Topology(settings, log_dir=tmp_path_factory.mktemp("logs"))
    try:
        t.spawn("engine-cpu", 1, model=SMOL)  # the second routed model's worker: the gateway is ready with both
        t.start(timeout=240)
        assert SMOL not in t.health()["unserved"]
    except BaseException:
        _dump_logs(t.log_dir)
        t.stop()
        raise
    try:
        yield t
    finally:
        t.stop()


@pytest.fixture(scope="module")
def oai(topo):
    return openai.OpenAI(base_url=topo.gateway_url + "/v1", api_key="-", max_retries=0, timeout=180)


@pytest.fixture(scope="module")
def claude(topo):
    return anthropic.Anthropic(base_url=topo.gateway_url, api_key="-", max_retries=0, timeout=180)


def audit(topo, **query) -> list[dict]:
    q = "&".join(f"{k}={v}" for k, v in query.items())
    req = urllib.request.Request(f"{topo.gateway_url}/v1/fak/audit?{q}", headers={"authorization": f"Bearer {ADMIN}"})
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())["records"]


# -- OpenAI --------------------------------------------------------------------------------------------------


def test_openai_denied_call_becomes_a_refusal(oai, topo):
    r = oai.chat.completions.create(model="synthetic", messages=[{"role": "user", "content": "Weather in Oslo?"}],
                                    tools=[oai_tool("get_weather", weather("Oslo"))], tool_choice=forced("get_weather"),
                                    max_tokens=200, temperature=0)
    choice = r.choices[0]
    assert choice.finish_reason == "stop" and not choice.message.tool_calls
    assert "[fak] The tool call get_weather(" in choice.message.content and "tools.get_weather.args.city" in choice.message.content
    [rec] = wait_for(lambda: audit(topo, request_id=r.id, kind="call"))
    assert rec["outcome"] == "deny" and rec["rule"] == "tools.get_weather.args.city" and rec["tool"] == "get_weather"


def test_openai_permitted_call_passes_intact(oai):
    r = oai.chat.completions.create(model="synthetic", messages=[{"role": "user", "content": "Weather in Paris?"}],
                                    tools=[oai_tool("get_weather", weather("Paris"))], tool_choice=forced("get_weather"),
                                    max_tokens=200, temperature=0)
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls"
    [call] = choice.message.tool_calls
    assert call.function.name == "get_weather" and json.loads(call.function.arguments) == {"city": "Paris"}


def test_openai_stream_denied_call_never_streams_as_a_call(oai):
    chunks = list(oai.chat.completions.create(
        model="synthetic", messages=[{"role": "user", "content": "Weather?"}], tools=[oai_tool("get_weather", weather("Oslo"))],
        tool_choice=forced("get_weather"), max_tokens=200, temperature=0, stream=True))
    assert not [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert "refused" in text and "tools.get_weather.args.city" in text
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["stop"]


def test_ask_is_refused_with_its_reason(oai):
    r = oai.chat.completions.create(model="synthetic", messages=[{"role": "user", "content": "Clean up"}],
                                    tools=[oai_tool("delete_everything", {"type": "object", "properties": {}})],
                                    tool_choice=forced("delete_everything"), max_tokens=200, temperature=0)
    assert r.choices[0].finish_reason == "stop" and "human" in r.choices[0].message.content


# -- taint ------------------------------------------------------------------------------------------------


def test_taint_sink_allowed_before_and_denied_after_a_tool_result(oai):
    tools = [oai_tool("send_email", EMAIL), oai_tool("get_weather", weather("Paris"))]
    ask = {"role": "user", "content": "Mail Bob the forecast."}
    before = oai.chat.completions.create(model="synthetic", messages=[ask], tools=tools, tool_choice=forced("send_email"),
                                         max_tokens=200, temperature=0).choices[0]
    assert before.finish_reason == "tool_calls" and before.message.tool_calls[0].function.name == "send_email"
    history = [ask, {"role": "assistant", "tool_calls": [{"id": "call_w1", "type": "function",
                                                          "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
               {"role": "tool", "tool_call_id": "call_w1", "content": "Paris: sunny, 24C"}]
    after = oai.chat.completions.create(model="synthetic", messages=history, tools=tools, tool_choice=forced("send_email"),
                                        max_tokens=200, temperature=0).choices[0]
    assert after.finish_reason == "stop" and not after.message.tool_calls
    assert "policy rule: untrusted" in after.message.content


# -- Anthropic --------------------------------------------------------------------------------------------


def test_anthropic_denied_and_permitted_tool_use(claude):
    deny = claude.messages.create(model="synthetic", max_tokens=200, extra_body=GREEDY, tool_choice={"type": "tool", "name": "get_weather"},
                                  tools=[{"name": "get_weather", "input_schema": weather("Oslo")}],
                                  messages=[{"role": "user", "content": "Weather?"}])
    assert deny.stop_reason == "end_turn" and [b.type for b in deny.content] == ["text"]
    assert "tools.get_weather.args.city" in deny.content[0].text
    allow = claude.messages.create(model="synthetic", max_tokens=200, extra_body=GREEDY, tool_choice={"type": "tool", "name": "get_weather"},
                                   tools=[{"name": "get_weather", "input_schema": weather("Rome")}],
                                   messages=[{"role": "user", "content": "Weather?"}])
    assert allow.stop_reason == "tool_use"
    [use] = [b for b in allow.content if b.type == "tool_use"]
    assert use.name == "get_weather" and use.input == {"city": "Rome"}


def test_anthropic_stream_denied_tool_use(claude):
    with claude.messages.stream(model="synthetic", max_tokens=200, extra_body=GREEDY, tool_choice={"type": "any"},
                                tools=[{"name": "get_weather", "input_schema": weather("Oslo")}],
                                messages=[{"role": "user", "content": "Weather?"}]) as stream:
        events = [e.type for e in stream]
        final = stream.get_final_message()
    assert final.stop_reason == "end_turn" and all(b.type == "text" for b in final.content)
    assert "refused" in final.content[0].text and events[-1] == "message_stop"


# -- SmolLM2-135M, the real model -------------------------------------------------------------------------


@pytest.mark.slow
def test_smollm2_forced_call_denied_and_permitted_on_both_wires(oai, claude):
    msgs = [{"role": "user", "content": "What is the weather like in Paris today?"}]
    denied = oai.chat.completions.create(model=SMOL, messages=msgs, tools=[oai_tool("get_weather", weather("Oslo"))],
                                         tool_choice=forced("get_weather"), max_tokens=40, temperature=0).choices[0]
    assert denied.finish_reason == "stop" and not denied.message.tool_calls and "tools.get_weather.args.city" in denied.message.content
    allowed = oai.chat.completions.create(model=SMOL, messages=msgs, tools=[oai_tool("get_weather", weather("Paris"))],
                                          tool_choice=forced("get_weather"), max_tokens=40, temperature=0).choices[0]
    assert allowed.finish_reason == "tool_calls"
    assert json.loads(allowed.message.tool_calls[0].function.arguments) == {"city": "Paris"}
    chunks = list(oai.chat.completions.create(model=SMOL, messages=msgs, tools=[oai_tool("get_weather", weather("Oslo"))],
                                              tool_choice=forced("get_weather"), max_tokens=40, temperature=0, stream=True))
    assert not [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
    assert "refused" in "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    kw = dict(model=SMOL, max_tokens=40, extra_body=GREEDY, tool_choice={"type": "tool", "name": "get_weather"},
              messages=msgs)
    a_denied = claude.messages.create(tools=[{"name": "get_weather", "input_schema": weather("Oslo")}], **kw)
    assert a_denied.stop_reason == "end_turn" and "refused" in a_denied.content[-1].text
    with claude.messages.stream(tools=[{"name": "get_weather", "input_schema": weather("Paris")}], **kw) as stream:
        final = stream.get_final_message()
    assert final.stop_reason == "tool_use" and [b.input for b in final.content if b.type == "tool_use"] == [{"city": "Paris"}]


# -- the audit endpoint, the policy file -----------------------------------------------------------------


def test_audit_endpoint_needs_the_admin_key(topo):
    for headers in ({}, {"authorization": "Bearer wrong"}):
        req = urllib.request.Request(topo.gateway_url + "/v1/fak/audit", headers=headers)
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(req, timeout=10)
        assert e.value.code == 401


def adjudicator_health(nats_url: str):
    """A reader of the adjudicator's /healthz, at the address its heartbeat on the bus gives."""
    import asyncio

    import nats

    from fakcore.protocol import Decoders, subjects

    async def find() -> str:
        nc = await nats.connect(nats_url)
        heard = asyncio.get_running_loop().create_future()

        async def on_beat(msg) -> None:
            if not heard.done():
                heard.set_result(Decoders.heartbeat.decode(msg.data).metrics_url)

        await nc.subscribe(subjects.health("adjudicator"), cb=on_beat)
        try:
            return await asyncio.wait_for(heard, 10)
        finally:
            await nc.close()

    url = asyncio.run(find()) + "/healthz"

    def read() -> dict:
        try:
            with urllib.request.urlopen(url, timeout=10) as r:
                return json.loads(r.read())
        except urllib.error.HTTPError as e:  # 503 (not ok) carries the same body
            return json.loads(e.read())

    return read


def test_hot_reload_applies_a_good_file_and_keeps_the_old_policy_on_a_bad_one(oai, policy_file, nats_server):
    def decide() -> str:
        r = oai.chat.completions.create(model="synthetic", messages=[{"role": "user", "content": "Weather?"}],
                                        tools=[oai_tool("get_weather", weather("Paris"))], tool_choice=forced("get_weather"),
                                        max_tokens=200, temperature=0)
        return r.choices[0].finish_reason

    try:
        policy_file.write_text(POLICY.replace("[Paris, Rome]", "[Rome]"))
        assert wait_for(lambda: decide() == "stop"), "the changed policy was not picked up"
        health = adjudicator_health(nats_server.url)
        assert health()["policy_error"] == ""
        policy_file.write_text(POLICY.replace("enum:", "enumm:"))  # malformed: unknown field
        # the adjudicator has looked at the bad file once it reports the error (naming the file)
        assert wait_for(lambda: str(policy_file) in health()["policy_error"]), health()
        assert decide() == "stop"  # still the last good policy
    finally:
        policy_file.write_text(POLICY)
    assert wait_for(lambda: decide() == "tool_calls")


def test_malformed_policy_stops_the_adjudicator_with_a_clear_error(nats_server, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("default: allow\ntools:\n  send_email: {action: permit}\n")
    env = {**os.environ, **base_settings(nats_server.url, policy=str(bad)).to_env()}
    p = subprocess.run([sys.executable, "-m", "fakcore.cli", "serve", "adjudicator"], env=env, capture_output=True, text=True,
                       timeout=60)
    assert p.returncode != 0
    assert f"{bad}: tools.send_email.action: 'permit' is not one of allow, deny, ask" in p.stdout + p.stderr
