"""The Responses API (/v1/responses) through the real gateway, driven by the official `openai` SDK: non-stream
and stream, the full event order, multi-turn by previous_response_id (the JetStream store) and by replay,
function and custom tools, json_schema output, GET/DELETE, tenants, and the boundary: a poisoned
function_call_output never reaches the model."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import openai
import pytest

from fakcore.launcher import Topology
from tests.conftest import base_settings, running, wait_for
from tests.integration.test_quarantine import MARKER, PAYLOAD

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


@pytest.fixture(scope="module")
def topo(nats_server, tmp_path_factory):
    settings = base_settings(nats_server.url, api_keys=KEYS, admin_keys=(ADMIN,))
    with running(Topology(settings, log_dir=tmp_path_factory.mktemp("logs"))) as t:
        yield t


@pytest.fixture(scope="module")
def client(topo):
    return openai.OpenAI(base_url=topo.gateway_url + "/v1", api_key=KEYS[0], max_retries=0, timeout=120)


def test_a_string_input_is_answered(client):
    r = client.responses.create(model="synthetic", input="Hello there", max_output_tokens=8, temperature=0)
    assert r.id.startswith("resp_") and r.object == "response" and r.status in ("completed", "incomplete")
    assert r.output[0].type == "message" and r.output_text == r.output[0].content[0].text
    assert r.usage.input_tokens > 0 and r.usage.output_tokens > 0
    assert r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens


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


def test_a_forced_function_tool_call_and_its_output(client):
    r = client.responses.create(model="synthetic", input="Weather in Paris?", tools=[WEATHER],
                                tool_choice={"type": "function", "name": "get_weather"}, max_output_tokens=200)
    [call] = [o for o in r.output if o.type == "function_call"]
    assert call.name == "get_weather" and isinstance(json.loads(call.arguments)["city"], str) and call.call_id
    follow = client.responses.create(model="synthetic", previous_response_id=r.id, tools=[WEATHER], max_output_tokens=8,
                                     input=[{"type": "function_call_output", "call_id": call.call_id,
                                             "output": [{"type": "input_text", "text": "Sunny, 24C"}]}])
    assert follow.status in ("completed", "incomplete") and follow.output[0].type == "message"


def test_a_custom_tool_call_follows_its_lark_grammar(client):
    """Codex's apply_patch is a freeform tool: forced, the engine's output is constrained by the grammar, and
    it comes back as a custom_tool_call whose input is the raw text (not JSON)."""
    for stream in (False, True):
        kwargs = dict(model="synthetic", input="Add a file hello.txt", tools=[APPLY_PATCH, WEATHER],
                      tool_choice={"type": "custom", "name": "apply_patch"}, max_output_tokens=200, temperature=0)
        if stream:
            events = list(client.responses.create(stream=True, **kwargs))
            kinds = [e.type for e in events]
            assert "response.custom_tool_call_input.delta" in kinds and "response.custom_tool_call_input.done" in kinds
            output = events[-1].response.output
        else:
            output = client.responses.create(**kwargs).output
        [call] = [o for o in output if o.type == "custom_tool_call"]
        assert call.name == "apply_patch" and call.call_id
        lines = call.input.split("\n")
        assert lines[0] == "*** Begin Patch" and lines[1].startswith("*** Add File: ") and lines[1].endswith(".txt"), call.input
        assert "*** End Patch" in lines and all(ln.startswith("+") for ln in lines[2:lines.index("*** End Patch")])


def test_json_schema_text_format(client):
    schema = {"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"]}
    r = client.responses.create(model="synthetic", input="2+2?", max_output_tokens=40,
                                text={"format": {"type": "json_schema", "name": "sum", "schema": schema, "strict": True}})
    assert isinstance(json.loads(r.output_text)["answer"], int)


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
        return {k: v if k in ("type", "role", "name", "call_id", "syntax") else shrunk(v, limit) for k, v in value.items()}
    return value


def test_a_poisoned_function_call_output_never_reaches_the_model(topo, client):
    payload = PAYLOAD.replace("Paris", "Paris (responses)")  # new bytes: other tests' verdicts share the bus
    r = client.responses.create(model="synthetic", max_output_tokens=4, input=[
        {"role": "user", "content": "Weather in Paris?"},
        {"type": "function_call", "call_id": "call_p1", "name": "get_weather", "arguments": '{"city": "Paris"}'},
        {"type": "function_call_output", "call_id": "call_p1", "output": payload}], tools=[WEATHER])
    context = httpx.get(f"{topo.gateway_url}/v1/fak/requests/{r.id}", headers={"authorization": f"Bearer {ADMIN}"}).json()
    assert len(context["screened"]) == 1 and MARKER not in json.dumps(context["messages"])
    tool = [m for m in context["messages"] if m["role"] == "tool"]
    assert tool and "quarantined" in tool[0]["content"].lower()
    # and the engine's cache never keeps it: the eviction receipt for that block (as on the chat wires)
    block = context["screened"][0]
    receipts = wait_for(lambda: httpx.get(f"{topo.gateway_url}/v1/fak/audit?kind=eviction&block={block}",
                                          headers={"authorization": f"Bearer {ADMIN}"}).json()["records"], timeout=30)
    assert receipts and block in receipts[0]["blocks"] and not receipts[0]["attends_evicted"]


def test_bad_requests_are_400_in_openais_shape(topo):
    for body in ({"model": "synthetic"}, {"model": "synthetic", "input": [{"type": "message", "role": "robot", "content": "x"}]},
                 {"model": "synthetic", "input": "x", "tools": [{"type": "custom", "name": "t", "format": {"type": "grammar"}}]},
                 {"model": "synthetic", "input": "x", "temperature": 9}):
        r = httpx.post(topo.gateway_url + "/v1/responses", json=body, headers={"authorization": f"Bearer {KEYS[0]}"})
        assert r.status_code == 400 and r.json()["error"]["message"], (body, r.text)
