"""The Gemini wire through the real gateway, driven by the official `google-genai` SDK (base URL at fak) and by
the real Gemini CLI: on the in-kernel engine (synthetic: text, stream, count tokens, a grammar-forced call
with mode ANY and its round trip), through a scripted Gemini upstream (passthrough, the client's key going
on) and an OpenAI-compatible one (translated), and the boundary on every path: a poisoned functionResponse
never reaches a model, a denied call never reaches the client."""

from __future__ import annotations

import json
import re

import httpx
import openai
import pytest
from google import genai
from google.genai import errors as genai_errors
from google.genai import types

from fakcore.launcher import Topology
from fakcore.protocol import block_id
from tests.conftest import DENY_POLICY, base_settings, routed, running, wait_for
from tests.integration.test_quarantine import MARKER, PAYLOAD, audit
from tests.support.clients import gemini_run
from tests.support.upstreams import GeminiUpstream, OpenAIUpstream, RecordedRequest, Reply, text, tool_use

ADMIN = "ops-key"
KEY = "gk-client-1"
POLICY = DENY_POLICY
WEATHER = types.FunctionDeclaration(name="get_weather", description="Weather of a city", parameters_json_schema={
    "type": "object", "properties": {"city": {"type": "string", "enum": ["Paris", "Rome"]}}, "required": ["city"]})
DELETE = types.FunctionDeclaration(name="delete_everything", description="Delete all files",
                                   parameters=types.Schema(type="OBJECT", properties={}))
GREEDY = dict(temperature=0, max_output_tokens=8)


@pytest.fixture(scope="module")
def gem_up():
    with GeminiUpstream(count_tokens=42) as u:
        yield u


@pytest.fixture(scope="module")
def chat_up():
    with OpenAIUpstream() as u:
        yield u


@pytest.fixture(scope="module")
def topo(nats_server, tmp_path_factory, gem_up, chat_up):
    upstreams = {"gem": {"url": f"{gem_up.url}/v1beta", "wire": "gemini"}, "chat": {"url": f"{chat_up.url}/v1", "wire": "openai"}}
    routes = [{"model": "gemini-*", "upstream": "gem"}, {"model": "chat-*", "upstream": "chat"}]
    with routed(nats_server, tmp_path_factory.mktemp("gemini"), upstreams, routes, POLICY, admin_keys=(ADMIN,)) as t:
        yield t


def client(topo, version: str | None = "v1beta") -> genai.Client:
    return genai.Client(api_key=KEY, http_options=types.HttpOptions(base_url=topo.gateway_url, api_version=version,
                                                                    timeout=120_000))


def context_of(topo, request_id: str) -> dict:
    return httpx.get(f"{topo.gateway_url}/v1/fak/requests/{request_id}", headers={"authorization": f"Bearer {ADMIN}"}).json()


def statuses(topo, route: str) -> dict[str, float]:
    found = re.findall(r'fak_gateway_requests_total\{route="' + route + r'",status="(\d+)"\} ([0-9.e+]+)',
                       httpx.get(topo.gateway_url + "/metrics").text)
    return {s: float(n) for s, n in found}


# -- in-kernel ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", ["v1beta", None])  # None: the SDK's default (v1)
def test_the_sdk_generates_streams_and_counts_in_kernel(topo, version):
    c = client(topo, version)
    config = types.GenerateContentConfig(system_instruction="Be brief.", **GREEDY)
    r = c.models.generate_content(model="synthetic", contents="Tell me something", config=config)
    assert isinstance(r.text, str) and r.text and r.candidates[0].finish_reason in ("STOP", "MAX_TOKENS")
    u = r.usage_metadata
    assert u.prompt_token_count > 0 and u.candidates_token_count > 0
    assert u.total_token_count == u.prompt_token_count + u.candidates_token_count and u.cached_content_token_count is not None
    chunks = list(c.models.generate_content_stream(model="synthetic", contents="Tell me something", config=config))
    assert "".join(ch.text or "" for ch in chunks) == r.text  # greedy: the same answer, streamed
    assert chunks[-1].candidates[0].finish_reason == r.candidates[0].finish_reason
    assert chunks[-1].usage_metadata.prompt_token_count == u.prompt_token_count
    counted = c.models.count_tokens(model="synthetic", contents="Tell me something")
    assert counted.total_tokens > 0


@pytest.mark.parametrize("version", ["v1beta", None])  # None: the SDK's default (v1), a path OpenAI's SDK lists on too
def test_the_model_list_and_one_model(topo, version):
    c = client(topo, version)
    assert "models/synthetic" in [m.name for m in c.models.list()]
    assert c.models.get(model="synthetic").name == "models/synthetic"
    with pytest.raises(genai_errors.ClientError) as e:
        c.models.get(model="nope")
    assert e.value.code == 404 and e.value.status == "NOT_FOUND"


def test_openais_sdk_lists_and_retrieves_on_the_same_paths(topo):
    oai = openai.OpenAI(base_url=topo.gateway_url + "/v1", api_key=KEY, max_retries=0)
    assert "synthetic" in [m.id for m in oai.models.list()]
    assert oai.models.retrieve("synthetic").id == "synthetic"
    with pytest.raises(openai.NotFoundError):
        oai.models.retrieve("nope")


def test_a_forced_call_with_mode_any_and_its_round_trip(topo):
    """ANY with one allowed function: the engine's output is constrained to a call matching its schema."""
    c = client(topo)
    tools = [types.Tool(function_declarations=[WEATHER])]
    forced = types.ToolConfig(function_calling_config=types.FunctionCallingConfig(mode="ANY", allowed_function_names=["get_weather"]))
    r = c.models.generate_content(model="synthetic", contents="Weather in Paris?", config=types.GenerateContentConfig(
        tools=tools, tool_config=forced, max_output_tokens=200, temperature=0))
    [call] = r.function_calls
    assert call.name == "get_weather" and call.args["city"] in ("Paris", "Rome") and call.id
    history = [types.Content(role="user", parts=[types.Part(text="Weather in Paris?")]), r.candidates[0].content,
               types.Content(role="user", parts=[types.Part.from_function_response(name="get_weather", response={"output": "Sunny, 24C"})])]
    follow = c.models.generate_content(model="synthetic", contents=history, config=types.GenerateContentConfig(tools=tools, **GREEDY))
    assert follow.candidates[0].content.parts and follow.response_id
    context = context_of(topo, follow.response_id)
    [tool] = [m for m in context["messages"] if m["role"] == "tool"]
    assert tool["content"] == "Sunny, 24C" and tool["tool_call_id"] == call.id and tool["name"] == "get_weather"


def test_json_output_follows_the_response_schema(topo):
    schema = types.Schema(type="OBJECT", properties={"answer": types.Schema(type="INTEGER")}, required=["answer"])
    c = client(topo)  # kept: a Client closes its connections when it is collected
    r = c.models.generate_content(model="synthetic", contents="2+2?", config=types.GenerateContentConfig(
        response_mime_type="application/json", response_schema=schema, max_output_tokens=40, temperature=0))
    assert isinstance(json.loads(r.text)["answer"], int)


def test_a_poisoned_function_response_never_reaches_the_model(topo):
    payload = PAYLOAD.replace("Paris", "Paris (gemini)")  # new bytes: other tests' verdicts share the bus
    c = client(topo)
    contents = [types.Content(role="user", parts=[types.Part(text="Weather in Paris?")]),
                types.Content(role="model", parts=[types.Part.from_function_call(name="get_weather", args={"city": "Paris"})]),
                types.Content(role="user", parts=[types.Part.from_function_response(name="get_weather", response={"output": payload})])]
    r = c.models.generate_content(model="synthetic", config=types.GenerateContentConfig(**GREEDY), contents=contents)
    context = context_of(topo, r.response_id)
    assert len(context["screened"]) == 1 and MARKER not in json.dumps(context["messages"])
    [tool] = [m for m in context["messages"] if m["role"] == "tool"]
    assert "quarantined" in tool["content"].lower()
    assert r.sdk_http_response.headers["x-fak-quarantined"].startswith(context["screened"][0] + ";action=")
    # the same contents again, raw: the body names the quarantine beside Google's fields (the SDK parses such a body)
    again = httpx.post(f"{topo.gateway_url}/v1beta/models/synthetic:generateContent", headers={"x-goog-api-key": KEY},
                       json={"contents": [c.model_dump(mode="json", exclude_none=True) for c in contents],
                             "generationConfig": {"temperature": 0, "maxOutputTokens": 8}}).json()
    [note] = again["fak"]["quarantined"]
    assert note["block"] == context["screened"][0] and note["action"] == "placeholder" and note["detector"]
    assert types.GenerateContentResponse.model_validate({k: v for k, v in again.items() if k != "fak"}).text is not None


@pytest.mark.parametrize("stream", [False, True])
def test_a_denied_forced_call_never_reaches_the_client(topo, stream):
    c = client(topo)
    config = types.GenerateContentConfig(tools=[types.Tool(function_declarations=[DELETE])], max_output_tokens=200, tool_config=
                                         types.ToolConfig(function_calling_config=types.FunctionCallingConfig(mode="ANY")))
    if stream:
        chunks = list(c.models.generate_content_stream(model="synthetic", contents="Clean up", config=config))
        assert not [ch for ch in chunks if ch.function_calls]
        said = "".join(ch.text or "" for ch in chunks)
    else:
        r = c.models.generate_content(model="synthetic", contents="Clean up", config=config)
        assert not r.function_calls
        said = r.text
    assert "nothing gets deleted here" in said


def test_the_json_array_stream_and_every_field_accepted(topo):
    body = {"contents": [{"role": "user", "parts": [{"text": "Hi"}]}], "generationConfig": {**{"temperature": 0, "maxOutputTokens": 4},
            "thinkingConfig": {"thinkingBudget": 0}}, "safetySettings": [{"category": "HARM_CATEGORY_HARASSMENT", "threshold": "OFF"}],
            "tools": [{"googleSearch": {}}], "labels": {"a": "b"}}
    r = httpx.post(f"{topo.gateway_url}/v1beta/models/synthetic:streamGenerateContent?key={KEY}", json=body, timeout=60)
    assert r.status_code == 200 and r.headers["content-type"].startswith("application/json")
    chunks = r.json()
    assert chunks[-1]["candidates"][0]["finishReason"] in ("STOP", "MAX_TOKENS") and chunks[-1]["usageMetadata"]
    assert r.headers["x-fak-ignored"] == "safetySettings,labels,generationConfig.thinkingConfig,tool:googleSearch"
    bad = httpx.post(f"{topo.gateway_url}/v1beta/models/synthetic:generateContent", json={**body, "generationConfig": {"candidateCount": 2}})
    assert bad.status_code == 400 and bad.json()["error"]["status"] == "INVALID_ARGUMENT"


# -- a Gemini upstream (passthrough) --------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
def test_a_gemini_upstream_gets_the_clients_request_and_key(topo, gem_up, stream):
    gem_up.script(text("Hello from upstream"))
    c = client(topo)
    config = types.GenerateContentConfig(thinking_config=types.ThinkingConfig(thinking_budget=128), temperature=0.3)
    if stream:
        said = "".join(ch.text or "" for ch in c.models.generate_content_stream(model="gemini-2.5-flash", contents="Hi", config=config))
    else:
        said = c.models.generate_content(model="gemini-2.5-flash", contents="Hi", config=config).text
    assert said == "Hello from upstream"
    got = gem_up.requests[-1]
    assert got.path == f"/v1beta/models/gemini-2.5-flash:{'streamGenerateContent' if stream else 'generateContent'}"
    assert got.header("x-goog-api-key") == KEY and (got.query == "alt=sse") is stream
    # what only Google acts on goes on, as the SDK wrote it (google-genai 3.6 sends this one by its proto name)
    assert got.json()["generationConfig"]["thinkingConfig"] == {"thinking_budget": 128}


def test_automatic_function_calling_through_a_gemini_upstream(topo, gem_up):
    """The SDK runs a Python function the upstream calls (AFC) and sends its result back through fak's screening."""
    calls: list[str] = []

    def get_weather(city: str) -> str:
        """The weather of a city."""
        calls.append(city)
        return f"Sunny in {city}, 24C."

    gem_up.script(tool_use("get_weather", {"city": "Rome"}), text("It is sunny in Rome."))
    c = client(topo)
    r = c.models.generate_content(model="gemini-2.5-flash", contents="Weather in Rome?",
                                  config=types.GenerateContentConfig(tools=[get_weather]))
    assert r.text == "It is sunny in Rome." and calls == ["Rome"]
    [part] = [p for c in gem_up.requests[-1].json()["contents"] for p in c["parts"] if "functionResponse" in p]
    result = part["functionResponse"]["response"]["result"]
    assert result == "Sunny in Rome, 24C."
    screened = wait_for(lambda: [x for x in audit(topo.gateway_url, kind="result") if x.get("block") == block_id(result)])
    assert screened and screened[0]["outcome"] == "clean"


def test_a_poisoned_function_response_is_never_forwarded(topo, gem_up):
    gem_up.script(text("ok"))
    payload = PAYLOAD.replace("Paris", "Paris (gemini upstream)")
    c = client(topo)
    c.models.generate_content(model="gemini-2.5-flash", contents=[
        types.Content(role="user", parts=[types.Part(text="Weather?")]),
        types.Content(role="model", parts=[types.Part.from_function_call(name="get_weather", args={"city": "Paris"})]),
        types.Content(role="user", parts=[types.Part.from_function_response(name="get_weather", response={"output": payload})])])
    raw = gem_up.requests[-1].body
    assert MARKER.encode() not in raw and b"quarantined" in raw.lower()


@pytest.mark.parametrize("upstream", ["gemini-2.5-flash", "chat-local"])
@pytest.mark.parametrize("stream", [False, True])
def test_a_denied_call_from_an_upstream_never_reaches_the_client(topo, gem_up, chat_up, upstream, stream):
    (gem_up if upstream.startswith("gemini") else chat_up).script(tool_use("delete_everything", {}))
    c = client(topo)
    config = types.GenerateContentConfig(tools=[types.Tool(function_declarations=[DELETE])])
    if stream:
        chunks = list(c.models.generate_content_stream(model=upstream, contents="Clean up", config=config))
        assert not [ch for ch in chunks if ch.function_calls]
        said = "".join(ch.text or "" for ch in chunks)
    else:
        r = c.models.generate_content(model=upstream, contents="Clean up", config=config)
        assert not r.function_calls
        said = r.text
    assert "nothing gets deleted here" in said


def test_count_tokens_is_the_gemini_upstreams(topo, gem_up):
    c = client(topo)
    assert c.models.count_tokens(model="gemini-2.5-flash", contents="Hi").total_tokens == 42
    assert gem_up.requests[-1].path == "/v1beta/models/gemini-2.5-flash:countTokens"


# -- an OpenAI-compatible upstream (translated), and an OpenAI client on a Gemini upstream ------------------


def test_a_gemini_client_on_an_openai_compatible_upstream(topo, chat_up):
    chat_up.script(tool_use("get_weather", {"city": "Paris"}))
    c = client(topo)
    r = c.models.generate_content(model="chat-local", contents="Weather in Paris?", config=types.GenerateContentConfig(
        system_instruction="Be brief.", tools=[types.Tool(function_declarations=[WEATHER])], max_output_tokens=64,
        automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True)))
    [call] = r.function_calls
    assert call.name == "get_weather" and call.args == {"city": "Paris"}
    sent = chat_up.requests[-1]
    assert sent.header("authorization") == f"Bearer {KEY}"
    body = sent.json()
    assert [m["role"] for m in body["messages"]] == ["system", "user"] and body["max_tokens"] == 64
    assert body["tools"][0]["function"]["parameters"]["properties"]["city"]["enum"] == ["Paris", "Rome"]


def test_an_openai_client_on_a_gemini_upstream(topo, gem_up):
    import openai

    gem_up.script(tool_use("get_weather", {"city": "Rome"}))
    oai = openai.OpenAI(base_url=topo.gateway_url + "/v1", api_key="gk-openai-client", max_retries=0)
    r = oai.chat.completions.create(model="gemini-2.5-flash", messages=[{"role": "user", "content": "Weather?"}], tools=[
        {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {}}}}])
    [call] = r.choices[0].message.tool_calls
    assert call.function.name == "get_weather" and json.loads(call.function.arguments) == {"city": "Rome"}
    got = gem_up.requests[-1]
    assert got.path == "/v1beta/models/gemini-2.5-flash:streamGenerateContent" and got.query == "alt=sse"
    assert got.header("x-goog-api-key") == "gk-openai-client"
    assert got.json()["contents"] == [{"role": "user", "parts": [{"text": "Weather?"}]}]


# -- the real Gemini CLI ----------------------------------------------------------------------------------------


def cli_answers(req: RecordedRequest) -> Reply:
    """JSON to the router's classifier; a shell call until its output is in the conversation; then text."""
    body = req.json()
    if (body.get("generationConfig") or {}).get("responseMimeType") == "application/json":
        return text('{"complexity_reasoning": "Simple.", "complexity_score": 10}')
    for content in body["contents"]:
        for part in content["parts"]:
            if "functionResponse" in part:
                return text("The command printed: " + part["functionResponse"]["response"].get("output", "")[-200:])
    names = {d["name"] for t in body.get("tools") or [] for d in t.get("functionDeclarations") or []}
    if "run_shell_command" in names and "echo" in json.dumps(body["contents"]):
        return tool_use("run_shell_command", {"command": "echo hi-from-gemini-cli"})
    return text("Hello from the scripted upstream.")


@pytest.fixture(scope="module")
def cli_topo(nats_server, tmp_path_factory):
    with GeminiUpstream(cli_answers) as up:
        d = tmp_path_factory.mktemp("gemini-cli")
        (d / "routes.yaml").write_text(f'upstreams:\n  gem: {{url: "{up.url}/v1beta", wire: gemini}}\n'
                                       'routes:\n  - {model: "*", upstream: gem}\n')
        settings = base_settings(nats_server.url, routes=str(d / "routes.yaml"), admin_keys=(ADMIN,))
        with running(Topology(settings, log_dir=d / "logs", services=("adjudicator", "kvmmu", "gateway"))) as t:
            yield t, up


@pytest.mark.slow
def test_real_gemini_cli_completes_a_turn_through_fak(cli_topo, tmp_path):
    """`gemini -p` with its model router on: the classifier's JSON-schema request and the main turn both
    go through fak to the upstream, none refused."""
    topo, up = cli_topo
    before = len(up.requests)
    run, result = gemini_run(topo.gateway_url, tmp_path, "Say hello.", api_key=KEY, timeout=240)
    assert run.returncode == 0 and result.get("response") == "Hello from the scripted upstream.", (run.stdout[-2000:], run.stderr[-2000:])
    sent = up.requests[before:]
    assert sent and all(r.header("x-goog-api-key") == KEY for r in sent)
    assert any(r.path.endswith(":streamGenerateContent") and r.query == "alt=sse" for r in sent)
    assert any(r.path.endswith(":generateContent") and "responseJsonSchema" in r.json()["generationConfig"] for r in sent)
    for route in ("gemini_generate", "gemini_stream"):
        assert not [s for s in statuses(topo, route) if not s.startswith("2")], statuses(topo, route)


@pytest.mark.slow
def test_real_gemini_cli_runs_a_shell_tool_the_upstream_proposes(cli_topo, tmp_path):
    """--yolo: the upstream proposes run_shell_command, fak allows it, the CLI runs it, its output comes back
    as a functionResponse that fak screens before it reaches the upstream."""
    topo, up = cli_topo
    before = len(up.requests)
    run, result = gemini_run(topo.gateway_url, tmp_path, "Run `echo hi-from-gemini-cli` and tell me what it printed.",
                             api_key=KEY, model="gemini-2.5-flash", yolo=True, timeout=240)
    assert run.returncode == 0 and "hi-from-gemini-cli" in result.get("response", ""), (run.stdout[-2000:], run.stderr[-2000:])
    assert result["stats"]["tools"]["byName"]["run_shell_command"]["success"] == 1
    second = up.requests[before:][-1].json()
    [fr] = [p["functionResponse"] for c in second["contents"] for p in c["parts"] if "functionResponse" in p]
    output = fr["response"]["output"]
    assert "hi-from-gemini-cli" in output
    screened = wait_for(lambda: [x for x in audit(topo.gateway_url, kind="result") if x.get("block") == block_id(output)])
    assert screened and screened[0]["outcome"] == "clean"
