"""The gateway's other model routes over HTTP, without NATS (support.gateway: the real app, a scripted
engine): legacy completions, token counting on the Anthropic and Responses wires, and the model lists, each in
its wire's shape, and bad input refused in that shape before an engine sees it."""

from __future__ import annotations

from tests.unit.gateway.support import MODEL, PROMPT_TOKENS, TOKENS, FakeEngines, gateway, settings, sse_data

TEXT = "".join(TOKENS)


async def test_a_legacy_completion_and_its_stream():
    engines = FakeEngines(settings())
    async with gateway(engines) as client:
        r = await client.post("/v1/completions", json={"model": MODEL, "prompt": "Say hello", "max_tokens": 5, "temperature": 0})
        s = await client.post("/v1/completions", json={"model": MODEL, "prompt": "Say hello", "max_tokens": 5, "stream": True})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["object"] == "text_completion" and body["model"] == MODEL
    assert [c["text"] for c in body["choices"]] == [TEXT] and body["choices"][0]["finish_reason"] == "stop"
    assert body["usage"]["prompt_tokens"] == PROMPT_TOKENS and body["usage"]["completion_tokens"] == len(TOKENS)
    first = engines.sent[0]
    assert (first.sampling.max_tokens, first.sampling.temperature) == (5, 0)
    assert s.status_code == 200 and s.headers["content-type"].startswith("text/event-stream")
    chunks = sse_data(s.text)
    assert chunks[-1] == "[DONE]"
    assert "".join(c["choices"][0]["text"] for c in chunks[:-1] if c.get("choices")) == TEXT


async def test_a_legacy_completion_without_a_prompt_is_an_openai_400():
    engines = FakeEngines(settings())
    async with gateway(engines) as client:
        r = await client.post("/v1/completions", json={"model": MODEL, "max_tokens": "many"})
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error", r.text
    assert not engines.sent


async def test_anthropic_count_tokens_is_the_engines_count():
    async with gateway(FakeEngines(settings())) as client:
        r = await client.post("/v1/messages/count_tokens", headers={"anthropic-version": "2023-06-01"},
                              json={"model": MODEL, "messages": [{"role": "user", "content": "Weather?"}]})
        bad = await client.post("/v1/messages/count_tokens", headers={"anthropic-version": "2023-06-01"},
                                json={"model": MODEL, "messages": "not a list"})
    assert r.status_code == 200 and r.json() == {"input_tokens": PROMPT_TOKENS}, r.text
    assert bad.status_code == 400 and bad.json()["type"] == "error" and bad.json()["error"]["type"] == "invalid_request_error"


async def test_responses_input_tokens_is_the_engines_count():
    async with gateway(FakeEngines(settings())) as client:
        r = await client.post("/v1/responses/input_tokens", json={"model": MODEL, "input": "Weather?"})
    assert r.status_code == 200 and r.json() == {"object": "response.input_tokens", "input_tokens": PROMPT_TOKENS}, r.text


async def test_the_model_list_in_each_wires_shape_and_one_model():
    async with gateway(FakeEngines(settings())) as client:
        openai = (await client.get("/v1/models")).json()
        anthropic = (await client.get("/v1/models", headers={"anthropic-version": "2023-06-01"})).json()
        google = (await client.get("/v1/models", headers={"x-goog-api-key": "k"})).json()
        one = await client.get(f"/v1/models/{MODEL}")
        missing = await client.get("/v1/models/no-such-model")
    assert openai["object"] == "list" and [m["id"] for m in openai["data"]] == [MODEL]
    assert [m["id"] for m in anthropic["data"]] == [MODEL] and anthropic["first_id"] == MODEL and anthropic["has_more"] is False
    assert [m["name"] for m in google["models"]] == [f"models/{MODEL}"]
    assert one.status_code == 200 and one.json()["id"] == MODEL and one.json()["object"] == "model"
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "model_not_found", missing.text
