"""The Responses API (/v1/responses) through the real gateway, driven by the official `openai` SDK: non-stream
and stream, the full event order, multi-turn by previous_response_id (the JetStream store, seen by every
gateway replica, kept for responses_ttl_s) and by replay, function and custom tools (lark and regex),
json_schema output, GET/DELETE, tenants, and the boundary: a poisoned function_call_output or
custom_tool_call_output never reaches the model, and a denied call never reaches the client."""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx
import openai
import pytest

from fakcore.launcher import Topology, stop_process
from fakcore.natsd import EmbeddedNats
from tests.conftest import DENY_POLICY, base_settings, free_port, running, wait_for
from tests.integration.test_quarantine import MARKER, PAYLOAD, _ok

ADMIN = "ops-key"
KEYS = ("sk-resp-a", "sk-resp-b")
WEATHER = {"type": "function", "name": "get_weather", "description": "Weather of a city",
           "parameters": {"type": "object", "properties": {"city": {"enum": ["Paris", "Rome"]}}, "required": ["city"]}}
# Codex's apply_patch grammar, narrowed so that a random (synthetic) model finishes a patch within the limit.
PATCH_GRAMMAR = r'''start: begin_patch hunk end_patch
begin_patch: "*** Begin Patch" LF
end_patch: "*** End Patch" LF
hunk: add_hunk
add_hunk: "*** Add File: " filename LF add_line
filename: "hello.txt" | "notes.txt"
add_line: "+" /[a-z]{1,6}/ LF -> line
%import common.LF
'''
APPLY_PATCH = {"type": "custom", "name": "apply_patch", "description": "Edit files. FREEFORM: write the patch itself.",
               "format": {"type": "grammar", "syntax": "lark", "definition": PATCH_GRAMMAR}}
PHONE = {"type": "custom", "name": "dial", "description": "Dial a number. FREEFORM: the number itself.",
         "format": {"type": "grammar", "syntax": "regex", "definition": "[0-9]{3}-[0-9]{4}"}}
DELETE = {"type": "function", "name": "delete_everything", "parameters": {"type": "object", "properties": {}}}
WIPE = {"type": "custom", "name": "wipe_disk", "description": "Wipe a disk. FREEFORM: its device path."}
POLICY = DENY_POLICY


@pytest.fixture(scope="module")
def topo(nats_server, tmp_path_factory):
    d = tmp_path_factory.mktemp("responses")
    (d / "policy.yaml").write_text(POLICY)
    settings = base_settings(nats_server.url, api_keys=KEYS, admin_keys=(ADMIN,), policy=str(d / "policy.yaml"))
    with running(Topology(settings, log_dir=d / "logs")) as t:
        yield t


def context_of(topo, response_id: str) -> dict:
    """What the engine was handed for a response (the admin's audit view)."""
    return httpx.get(f"{topo.gateway_url}/v1/fak/requests/{response_id}", headers={"authorization": f"Bearer {ADMIN}"}).json()


@pytest.fixture(scope="module")
def client(topo):
    return openai.OpenAI(base_url=topo.gateway_url + "/v1", api_key=KEYS[0], max_retries=0, timeout=120)


def test_a_string_input_is_answered(client):
    r = client.responses.create(model="synthetic", input="Hello there", max_output_tokens=8, temperature=0, top_p=0.9,
                                metadata={"run": "1"})
    assert r.id.startswith("resp_") and r.object == "response" and r.output[0].type == "message"
    assert r.output_text == r.output[0].content[0].text
    # synthetic weights never choose to stop: the turn is cut at max_output_tokens
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens" and r.usage.output_tokens == 8
    assert r.usage.input_tokens > 0 and r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens
    assert r.usage.output_tokens_details.reasoning_tokens == 0
    assert (r.max_output_tokens, r.temperature, r.top_p, r.metadata) == (8, 0, 0.9, {"run": "1"})
    counted = client.responses.input_tokens.count(model="synthetic", input="Hello there")
    assert counted.input_tokens == r.usage.input_tokens  # the SDK's count: the prompt the engine read


def test_the_stream_has_openais_event_order_and_the_sdk_assembles_it(client):
    events = list(client.responses.create(model="synthetic", input="Tell me something", max_output_tokens=12,
                                          temperature=0, stream=True))
    kinds = [e.type for e in events]
    assert kinds[:4] == ["response.created", "response.in_progress", "response.output_item.added", "response.content_part.added"]
    assert kinds[-4:] == ["response.output_text.done", "response.content_part.done", "response.output_item.done",
                          kinds[-1]] and kinds[-1] in ("response.completed", "response.incomplete")
    assert [e.sequence_number for e in events] == list(range(len(events)))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert events[-1].response.output[0].content[0].text == text
    with client.responses.stream(model="synthetic", input="Tell me something", max_output_tokens=12, temperature=0) as s:
        assembled = list(s)  # the SDK's strict helper: it refuses deltas before their item and part
    assert assembled[-1].type == kinds[-1]  # (get_final_response wants response.completed; at the limit it is .incomplete)
    assert assembled[-1].response.output[0].content[0].text == text  # greedy: the same answer


def test_previous_response_id_continues_from_the_store_and_equals_full_replay(client):
    first = client.responses.create(model="synthetic", input="My name is Ada.", instructions="Be brief.",
                                    max_output_tokens=6, temperature=0)
    second = client.responses.create(model="synthetic", input="What is my name?", previous_response_id=first.id,
                                     max_output_tokens=6, temperature=0)
    replay = client.responses.create(model="synthetic", max_output_tokens=6, temperature=0, input=[
        {"role": "user", "content": "My name is Ada."},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": first.output_text}]},
        {"role": "user", "content": "What is my name?"}])
    assert second.output_text == replay.output_text
    assert second.usage.input_tokens == replay.usage.input_tokens  # the same conversation (no instructions carried)
    assert replay.usage.input_tokens_details.cached_tokens > 0  # the same prompt as `second`: its prefix is reused
    got = client.responses.retrieve(second.id)
    assert got.id == second.id and got.output_text == second.output_text and got.previous_response_id == first.id


def test_get_and_delete_and_other_tenants_see_nothing(topo, client):
    r = client.responses.create(model="synthetic", input="Remember this", max_output_tokens=4)
    other = openai.OpenAI(base_url=topo.gateway_url + "/v1", api_key=KEYS[1], max_retries=0)
    with pytest.raises(openai.NotFoundError):
        other.responses.retrieve(r.id)
    with pytest.raises(openai.NotFoundError):
        other.responses.create(model="synthetic", input="and?", previous_response_id=r.id, max_output_tokens=4)
    client.responses.delete(r.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(r.id)
    unstored = client.responses.create(model="synthetic", input="Forget this", max_output_tokens=4, store=False)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(unstored.id)


def test_a_forced_function_tool_call_and_its_output(topo, client):
    r = client.responses.create(model="synthetic", input="Weather in Paris?", tools=[WEATHER],
                                tool_choice={"type": "function", "name": "get_weather"}, max_output_tokens=200)
    [call] = [o for o in r.output if o.type == "function_call"]
    assert call.name == "get_weather" and json.loads(call.arguments)["city"] in ("Paris", "Rome") and call.call_id
    follow = client.responses.create(model="synthetic", previous_response_id=r.id, tools=[WEATHER], max_output_tokens=8,
                                     input=[{"type": "function_call_output", "call_id": call.call_id,
                                             "output": [{"type": "input_text", "text": "Sunny, "}, {"type": "input_text", "text": "24C"}]}])
    assert follow.status in ("completed", "incomplete") and follow.output[0].type == "message"
    [tool] = [m for m in context_of(topo, follow.id)["messages"] if m["role"] == "tool"]
    assert tool["content"] == "Sunny, 24C"  # the parts, joined, are the tool message the model read


def _is_patch(text: str) -> bool:
    lines = text.split("\n")
    return (lines[0] == "*** Begin Patch" and lines[1].startswith("*** Add File: ") and lines[1].endswith(".txt")
            and "*** End Patch" in lines and all(ln.startswith("+") for ln in lines[2:lines.index("*** End Patch")]))


@pytest.mark.parametrize("tool,valid", [(APPLY_PATCH, _is_patch), (PHONE, re.compile("[0-9]{3}-[0-9]{4}").fullmatch)],
                         ids=["lark", "regex"])
@pytest.mark.parametrize("choice", ["named", "required"])
def test_a_custom_tool_call_follows_its_grammar(client, tool, valid, choice):
    """Codex's apply_patch is a freeform tool (lark), and a regex one: the engine's output is constrained by the
    grammar, and comes back as a custom_tool_call whose input is the raw text (not JSON). `required` with only
    custom tools forces one as naming it does."""
    tools, tool_choice = ([tool, WEATHER], {"type": "custom", "name": tool["name"]}) if choice == "named" else ([tool], "required")
    for stream in (False, True):
        kwargs = dict(model="synthetic", input="Do it", tools=tools, tool_choice=tool_choice, max_output_tokens=200, temperature=0)
        if stream:
            events = list(client.responses.create(stream=True, **kwargs))
            kinds = [e.type for e in events]
            assert kinds[2:6] == ["response.output_item.added", "response.custom_tool_call_input.delta",
                                  "response.custom_tool_call_input.done", "response.output_item.done"], kinds
            assert [e.sequence_number for e in events] == list(range(len(events)))
            output = events[-1].response.output
        else:
            output = client.responses.create(**kwargs).output
        [call] = [o for o in output if o.type == "custom_tool_call"]
        assert call.name == tool["name"] and call.call_id and valid(call.input), call.input


def test_json_schema_text_format(client):
    """Greedy (a sampled integer may run past max_output_tokens: then the response is incomplete, below)."""
    schema = {"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"]}
    fmt = {"format": {"type": "json_schema", "name": "sum", "schema": schema, "strict": True}}
    r = client.responses.create(model="synthetic", input="2+2?", max_output_tokens=40, temperature=0, text=fmt)
    assert r.status == "completed" and isinstance(json.loads(r.output_text)["answer"], int)
    cut = client.responses.create(model="synthetic", input="2+2?", max_output_tokens=3, temperature=0, text=fmt)
    assert cut.status == "incomplete" and cut.incomplete_details.reason == "max_output_tokens"
    assert r.output_text.startswith(cut.output_text)  # the grammar's prefix, cut where the budget ended


def test_codex_fields_and_items_are_accepted(topo, client):
    """What Codex sends (tests/data/codex): developer messages, reasoning items, namespaces, hosted tools,
    include, store false, prompt_cache_key, client_metadata. Served, and the ignored parts named."""
    body = json.loads((Path(__file__).parents[1] / "data" / "codex" / "responses_2.json").read_text())
    # one tool of each kind, and the reasoning item Codex replays after a reasoning model's turn (NOTES.md)
    tools = [t for t in body["tools"] if t.get("name") in ("exec_command", "apply_patch") or t["type"] not in ("function", "custom")]
    reasoning = {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "Plan."}], "content": None,
                 "encrypted_content": "gAAAA"}
    body = shrunk({**body, "tools": tools, "input": [*body["input"][:4], reasoning, *body["input"][4:]]}, 60)
    body = {**body, "model": "synthetic", "max_output_tokens": 8}
    r = httpx.post(topo.gateway_url + "/v1/responses", json=body, headers={"authorization": f"Bearer {KEYS[0]}"}, timeout=120)
    assert r.status_code == 200, r.text[:500]
    assert "text/event-stream" in r.headers["content-type"]
    assert b"event: response.completed" in r.content or b"event: response.incomplete" in r.content, r.content[-500:]
    assert "item:reasoning" in r.headers.get("x-fak-ignored", "")


def shrunk(value, limit: int = 120):
    """Codex's request with every long text cut (its 21 KB of instructions overflow the synthetic context)."""
    if isinstance(value, str):
        return value[:limit]
    if isinstance(value, list):
        return [shrunk(v, limit) for v in value]
    if isinstance(value, dict):
        return {k: v if k in ("type", "role", "name", "call_id", "syntax", "definition") else shrunk(v, limit)
                for k, v in value.items()}  # a grammar cut short is a 400: it constrains the call whenever one is made
    return value


@pytest.mark.parametrize("kind", ["function_call", "custom_tool_call"])
def test_a_poisoned_tool_output_never_reaches_the_model(topo, client, kind):
    payload = PAYLOAD.replace("Paris", f"Paris ({kind})")  # new bytes: other tests' verdicts share the bus
    call = ({"type": "function_call", "call_id": "call_p1", "name": "get_weather", "arguments": '{"city": "Paris"}'}
            if kind == "function_call" else {"type": "custom_tool_call", "call_id": "call_p1", "name": "apply_patch", "input": "x"})
    r = client.responses.create(model="synthetic", max_output_tokens=4, tools=[WEATHER, APPLY_PATCH], input=[
        {"role": "user", "content": "Weather in Paris?"}, call, {"type": f"{kind}_output", "call_id": "call_p1", "output": payload}])
    context = context_of(topo, r.id)
    assert len(context["screened"]) == 1 and MARKER not in json.dumps(context["messages"])
    tool = [m for m in context["messages"] if m["role"] == "tool"]
    assert tool and "quarantined" in tool[0]["content"].lower()
    # and the engine's cache never keeps it: the eviction receipt for that block (as on the chat wires)
    block = context["screened"][0]
    receipts = wait_for(lambda: httpx.get(f"{topo.gateway_url}/v1/fak/audit?kind=eviction&block={block}",
                                          headers={"authorization": f"Bearer {ADMIN}"}).json()["records"], timeout=30)
    assert receipts and block in receipts[0]["blocks"] and not receipts[0]["attends_evicted"]
    [note] = r.model_extra["fak"]["quarantined"]  # beside the Responses fields, kept by the SDK
    assert note["block"] == block and note["action"] == "evicted" and note["detector"]


def test_bad_requests_are_400_in_openais_shape(topo):
    for body in ({"model": "synthetic"}, {"model": "synthetic", "input": [{"type": "message", "role": "robot", "content": "x"}]},
                 {"model": "synthetic", "input": "x", "tools": [{"type": "custom", "name": "t", "format": {"type": "grammar"}}]},
                 {"model": "synthetic", "input": "x", "temperature": 9}):
        r = httpx.post(topo.gateway_url + "/v1/responses", json=body, headers={"authorization": f"Bearer {KEYS[0]}"})
        assert r.status_code == 400 and r.json()["error"]["message"], (body, r.text)


@pytest.mark.parametrize("tool", [DELETE, WIPE], ids=["function", "custom"])
def test_a_denied_call_never_reaches_the_client(client, tool):
    """The engine makes the call (forced); the policy refuses it; the client gets a message naming the rule."""
    kwargs = dict(model="synthetic", input="Clean up", tools=[tool, WEATHER], max_output_tokens=200, temperature=0,
                  tool_choice={"type": tool["type"], "name": tool["name"]})
    events = list(client.responses.create(stream=True, **kwargs))
    assert not [e for e in events if "call" in e.type], [e.type for e in events]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    for output in (events[-1].response.output, client.responses.create(**kwargs).output):
        assert [o.type for o in output] == ["message"]
        text = output[0].content[0].text
        assert f"The tool call {tool['name']}(" in text and f"(policy rule: tools.{tool['name']})" in text, text


def test_a_second_gateway_replica_reads_the_store(topo, client):
    """A response made through one gateway is retrieved and continued through another (the JetStream store)."""
    first = client.responses.create(model="synthetic", input="My name is Ada.", max_output_tokens=4, temperature=0)
    port = free_port()
    child = topo.spawn("gateway", 1, port=port)
    url = f"http://127.0.0.1:{port}"
    try:
        assert wait_for(lambda: _ok(url), timeout=60), "second gateway did not come up"
        other = openai.OpenAI(base_url=url + "/v1", api_key=KEYS[0], max_retries=0, timeout=120)
        got = other.responses.retrieve(first.id)
        assert got.id == first.id and got.output_text == first.output_text
        second = other.responses.create(model="synthetic", input="What is my name?", previous_response_id=first.id,
                                        max_output_tokens=4, temperature=0)
        replay = client.responses.create(model="synthetic", max_output_tokens=4, temperature=0, input=[
            {"role": "user", "content": "My name is Ada."},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": first.output_text}]},
            {"role": "user", "content": "What is my name?"}])
        assert second.usage.input_tokens == replay.usage.input_tokens and second.output_text == replay.output_text
        assert client.responses.retrieve(second.id).previous_response_id == first.id  # and back on the first
    finally:
        stop_process(child.proc)
        topo.children.remove(child)


def test_a_response_past_the_stores_ttl_is_gone(tmp_path):
    """responses_ttl_s is the store's age limit. On a bus of its own: the limit is the whole stream's."""
    with EmbeddedNats(data_dir=tmp_path / "nats") as server:
        settings = base_settings(server.url, api_keys=KEYS, responses_ttl_s=1, adjudicate=False)
        with running(Topology(settings, services=("engine-cpu", "gateway"), log_dir=tmp_path / "logs")) as t:
            client = openai.OpenAI(base_url=t.gateway_url + "/v1", api_key=KEYS[0], max_retries=0, timeout=120)
            r = client.responses.create(model="synthetic", input="Remember this", max_output_tokens=2)
            assert client.responses.retrieve(r.id).id == r.id

            def gone() -> bool:
                try:
                    client.responses.retrieve(r.id)
                except openai.NotFoundError:
                    return True
                return False

            assert wait_for(gone, timeout=30), "the response outlived responses_ttl_s"
            with pytest.raises(openai.NotFoundError, match="previous response"):
                client.responses.create(model="synthetic", input="and?", previous_response_id=r.id, max_output_tokens=2)
