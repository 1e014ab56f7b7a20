"""The Responses API to upstreams: a Responses-speaking upstream (scripted, as OpenAI's) and a chat-only one
(custom tools become one-string function tools and come back as custom_tool_calls); the boundary on the way
(a poisoned tool output is never forwarded, a denied call never reaches the client); and the real Codex CLI
(`codex exec`) applying a patch the upstream proposes with its freeform apply_patch tool."""

from __future__ import annotations

import json
from typing import Literal

import openai
import pytest

from tests.conftest import DENY_POLICY, routed
from tests.integration.test_upstream import MARKER, POISON
from tests.support.capture_codex import PATCH, ResponsesUpstream, patch_then_text
from tests.support.clients import codex_events, codex_exec
from tests.support.upstreams import OpenAIUpstream, text, tool_use

APPLY_PATCH = {"type": "custom", "name": "apply_patch", "description": "Edit files (FREEFORM).",
               "format": {"type": "grammar", "syntax": "lark", "definition": 'start: "*** Begin Patch" /(.|\\n)*/'}}
POLICY = DENY_POLICY
WIPE = {"type": "custom", "name": "wipe_disk", "description": "Wipe a disk (FREEFORM: its device path)."}


@pytest.fixture(scope="module")
def resp_up():
    with ResponsesUpstream() as u:
        yield u


@pytest.fixture(scope="module")
def codex_up():
    """What Codex's model (gpt-5.5) is routed to: a patch, then, with its output in the input, a message."""
    with ResponsesUpstream(patch_then_text) as u:
        yield u


@pytest.fixture(scope="module")
def chat_up():
    with OpenAIUpstream() as u:
        yield u


@pytest.fixture(scope="module")
def topo(nats_server, tmp_path_factory, resp_up, codex_up, chat_up):
    upstreams = {"resp": {"url": f"{resp_up.url}/v1", "wire": "responses"}, "codex": {"url": f"{codex_up.url}/v1", "wire": "responses"},
                 "chat": {"url": f"{chat_up.url}/v1", "wire": "openai"}}
    routes = [{"model": "gpt-5.5", "upstream": "codex"}, {"model": "gpt-*", "upstream": "resp"}, {"model": "chat-*", "upstream": "chat"}]
    with routed(nats_server, tmp_path_factory.mktemp("responses-upstream"), upstreams, routes, POLICY) as t:
        yield t


@pytest.fixture(scope="module")
def client(topo):
    return openai.OpenAI(base_url=topo.gateway_url + "/v1", api_key="sk-client", max_retries=0, timeout=60)


@pytest.mark.parametrize("stream", [False, True])
def test_a_custom_tool_call_from_a_responses_upstream(client, resp_up, stream):
    resp_up.script(tool_use("apply_patch", {"input": PATCH}))
    kwargs = dict(model="gpt-4.1", input="add hello.txt", tools=[APPLY_PATCH])
    output = (list(client.responses.create(stream=True, **kwargs))[-1].response.output if stream
              else client.responses.create(**kwargs).output)
    [call] = [o for o in output if o.type == "custom_tool_call"]
    assert call.name == "apply_patch" and call.input == PATCH and call.call_id
    sent = resp_up.requests[-1].json()  # passthrough: the client's own request
    assert sent["tools"] == [APPLY_PATCH] and sent.get("stream", False) is stream and "store" not in sent
    assert resp_up.requests[-1].header("authorization") == "Bearer sk-client"


def test_passthrough_keeps_what_only_the_upstream_understands(topo, resp_up):
    """Encrypted reasoning items, previous_response_id into the upstream's own store, include: all forwarded."""
    import httpx

    resp_up.script(text("fine"))
    body = {"model": "gpt-4.1", "previous_response_id": "resp_upstream_1", "include": ["reasoning.encrypted_content"],
            "input": [{"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAAA-opaque"},
                      {"role": "user", "content": "go on"}], "reasoning": {"effort": "high"}}
    r = httpx.post(topo.gateway_url + "/v1/responses", json=body, headers={"authorization": "Bearer sk-client"}, timeout=30)
    assert r.status_code == 200 and r.json()["output"][0]["content"][0]["text"] == "fine"
    assert resp_up.requests[-1].json() == body and r.headers["x-fak-upstream"] == "resp"


def test_a_chat_client_on_a_responses_upstream_is_translated(topo, resp_up):
    resp_up.script(tool_use("get_weather", {"city": "Paris"}))
    chat = openai.OpenAI(base_url=topo.gateway_url + "/v1", api_key="sk-client", max_retries=0)
    r = chat.chat.completions.create(model="gpt-4.1", messages=[{"role": "user", "content": "Weather?"}], tools=[
        {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {}}}}])
    [call] = r.choices[0].message.tool_calls
    assert call.function.name == "get_weather" and json.loads(call.function.arguments) == {"city": "Paris"}
    sent = resp_up.requests[-1].json()
    assert sent["input"][0]["content"][0] == {"type": "input_text", "text": "Weather?"} and sent["stream"] is True


def test_a_chat_only_upstream_gets_custom_tools_as_functions_and_the_call_comes_back_custom(client, chat_up):
    chat_up.script(tool_use("apply_patch", {"input": PATCH}))
    r = client.responses.create(model="chat-local", input="add hello.txt", tools=[APPLY_PATCH])
    [call] = [o for o in r.output if o.type == "custom_tool_call"]
    assert call.input == PATCH
    [tool] = chat_up.requests[-1].json()["tools"]
    assert tool["function"]["name"] == "apply_patch"
    assert tool["function"]["parameters"]["properties"] == {"input": {"type": "string"}}
    # the next turn: the custom call and its output go to the chat upstream as a function call and a tool message
    chat_up.script(text("done"))
    again = client.responses.create(model="chat-local", tools=[APPLY_PATCH], input=[
        {"role": "user", "content": "add hello.txt"},
        {"type": "custom_tool_call", "call_id": call.call_id, "name": "apply_patch", "input": PATCH},
        {"type": "custom_tool_call_output", "call_id": call.call_id, "output": "Success."}])
    assert again.output_text == "done"
    sent = chat_up.requests[-1].json()["messages"]
    assert json.loads(sent[1]["tool_calls"][0]["function"]["arguments"]) == {"input": PATCH}
    assert sent[2] == {"role": "tool", "tool_call_id": call.call_id, "content": "Success."}


def test_a_poisoned_output_is_never_forwarded(client, resp_up):
    resp_up.script(text("ok"))
    client.responses.create(model="gpt-4.1", input=[
        {"role": "user", "content": "build it"},
        {"type": "function_call", "call_id": "c1", "name": "run_build", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": POISON}])
    raw = resp_up.requests[-1].body
    assert MARKER not in raw and b"quarantined" in raw.lower()


@pytest.mark.parametrize("stream", [False, True])
def test_a_denied_call_never_reaches_the_client(client, resp_up, stream):
    resp_up.script(tool_use("delete_everything", {}))
    kwargs = dict(model="gpt-4.1", input="clean up", tools=[{"type": "function", "name": "delete_everything",
                                                              "parameters": {"type": "object", "properties": {}}}])
    if stream:
        events = list(client.responses.create(stream=True, **kwargs))
        assert not [e for e in events if "function_call" in e.type]
        output = events[-1].response.output
    else:
        output = client.responses.create(**kwargs).output
    assert [o.type for o in output] == ["message"]
    assert "nothing gets deleted here (policy rule: tools.delete_everything)" in output[0].content[0].text


@pytest.mark.parametrize("stream", [False, True])
def test_a_denied_custom_call_from_a_chat_only_upstream_never_reaches_the_client(client, chat_up, stream):
    """The upstream's function call to the one-string function a custom tool became, refused by the policy
    by the custom tool's name: no custom_tool_call, streamed or not, and a message naming the rule."""
    chat_up.script(tool_use("wipe_disk", {"input": "/dev/sda"}))
    kwargs = dict(model="chat-local", input="wipe it", tools=[WIPE])
    if stream:
        events = list(client.responses.create(stream=True, **kwargs))
        assert not [e for e in events if "call" in e.type], [e.type for e in events]
        assert [e.sequence_number for e in events] == list(range(len(events)))
        output = events[-1].response.output
    else:
        output = client.responses.create(**kwargs).output
    assert [o.type for o in output] == ["message"]
    assert "no disk gets wiped (policy rule: tools.wipe_disk)" in output[0].content[0].text
    assert chat_up.requests[-1].json()["tools"][0]["function"]["name"] == "wipe_disk"


@pytest.mark.parametrize("stream", [False, True])
def test_previous_response_id_on_a_chat_only_upstream_sends_the_whole_conversation(client, chat_up, stream):
    """fak's own store serves a chat-only upstream: the second turn reaches it as the full conversation."""
    chat_up.script(text("Hello, Ada."), text("Your name is Ada."))
    first = client.responses.create(model="chat-local", input="My name is Ada.", instructions="Be brief.")
    assert first.output_text == "Hello, Ada."
    if stream:
        with client.responses.stream(model="chat-local", input="What is my name?", previous_response_id=first.id) as s:
            second = s.get_final_response()
    else:
        second = client.responses.create(model="chat-local", input="What is my name?", previous_response_id=first.id)
    assert second.output_text == "Your name is Ada." and second.previous_response_id == first.id
    sent = [(m["role"], m["content"]) for m in chat_up.requests[-1].json()["messages"]]
    # the earlier turn's instructions are not carried (as OpenAI's): a request's own instructions apply to it alone
    assert sent == [("user", "My name is Ada."), ("assistant", "Hello, Ada."), ("user", "What is my name?")]
    assert client.responses.retrieve(second.id).output_text == "Your name is Ada."


def test_a_json_schema_text_format_reaches_a_chat_only_upstream_as_its_response_format(client, chat_up):
    schema = {"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"], "additionalProperties": False}
    chat_up.script(text('{"answer": 4}'))
    r = client.responses.create(model="chat-local", input="2+2?",
                                text={"format": {"type": "json_schema", "name": "sum", "schema": schema, "strict": True}})
    assert json.loads(r.output_text) == {"answer": 4}
    fmt = chat_up.requests[-1].json()["response_format"]
    assert fmt["type"] == "json_schema" and fmt["json_schema"]["schema"] == schema


@pytest.mark.slow
def test_real_codex_applies_a_patch_proposed_through_fak(topo, codex_up, tmp_path):
    """`codex exec` (npm @openai/codex) with fak as its Responses provider; fak routes gpt-5.5 to the scripted
    upstream, which proposes apply_patch (Codex's freeform tool) and, once the patch's output comes back
    (screened by fak), a final message."""
    before = len(codex_up.requests)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    run = codex_exec(topo.gateway_url, workspace, "Add hello.txt containing 'hello from fak'.", api_key="sk-client")
    events = codex_events(run.stdout)
    assert run.returncode == 0, run.stderr[-3000:]
    assert (workspace / "hello.txt").read_text() == "hello from fak\n"
    assert events[-1]["type"] == "turn.completed", events[-3:]
    assert any(e.get("item", {}).get("type") == "agent_message" and "hello.txt" in e["item"].get("text", "") for e in events)
    sent = [r.json() for r in codex_up.requests[before:]]
    assert len(sent) == 2 and any(i.get("type") == "custom_tool_call_output" for i in sent[1]["input"])


def _agent(topo, model: str, calls: list[str], behavior: str = "run_llm_again", **settings):
    from agents import Agent, ModelSettings, OpenAIResponsesModel, function_tool, set_tracing_disabled

    set_tracing_disabled(True)  # the SDK's traces go to OpenAI itself otherwise

    @function_tool
    def get_weather(city: Literal["Paris", "Rome"]) -> str:
        """The weather of a city."""
        calls.append(city)
        return f"Sunny in {city}, 24C."

    client = openai.AsyncOpenAI(base_url=topo.gateway_url + "/v1", api_key="sk-client", max_retries=0)
    return Agent(name="weather", instructions="Answer with the weather tool.", tools=[get_weather], tool_use_behavior=behavior,
                 model=OpenAIResponsesModel(model=model, openai_client=client), model_settings=ModelSettings(**settings))


def test_the_openai_agents_sdk_runs_an_agent_with_a_tool_through_fak(topo, resp_up):
    """openai-agents' default model (Responses) pointed at fak: the upstream calls the tool, the SDK runs it,
    its output goes back through fak's screening, the upstream answers."""
    from agents import Runner

    calls: list[str] = []
    resp_up.script(tool_use("get_weather", {"city": "Paris"}), text("It is sunny in Paris."))
    before = len(resp_up.requests)
    result = Runner.run_sync(_agent(topo, "gpt-4.1", calls), "Weather in Paris?")
    assert result.final_output == "It is sunny in Paris." and calls == ["Paris"]
    second = resp_up.requests[before + 1].json()
    [output] = [i for i in second["input"] if i.get("type") == "function_call_output"]
    assert output["output"] == "Sunny in Paris, 24C."


def test_the_openai_agents_sdk_runs_on_the_in_kernel_engine(topo):
    """The same agent on fak's own engine (synthetic weights, which never choose to stop): its turn is forced
    to the tool, and the run ends with the tool's output (tool_use_behavior stop_on_first_tool)."""
    from agents import Runner

    calls: list[str] = []
    agent = _agent(topo, "synthetic", calls, "stop_on_first_tool", tool_choice="required", max_tokens=200, temperature=0)
    result = Runner.run_sync(agent, "Weather in Paris?", max_turns=2)
    assert len(calls) == 1 and result.final_output == f"Sunny in {calls[0]}, 24C."
