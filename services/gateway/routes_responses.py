"""The OpenAI Responses routes: POST /v1/responses (the pipeline, with stored conversations for
`previous_response_id`), GET and DELETE /v1/responses/{id}, POST /v1/responses/input_tokens."""

from __future__ import annotations

from typing import Any

from litestar import Request, Response, delete, get, post
from litestar.response import Stream

from fak_gateway import openai_wire, responses_wire
from fak_gateway.errors import WireError
from fak_gateway.handling import (
    State,
    key_id_of,
    pipeline_of,
    proxied,
    receipt_headers,
    respond,
    session_of,
    sse,
    state_of,
)
from fak_gateway.responses_store import ResponseStore
from fakcore.protocol import CountTokensRequest


@post("/v1/responses", status_code=200)
async def responses(request: Request) -> Response | Stream:
    state, body = state_of(request), await request.body()
    r = responses_wire.decode_request(body)
    pipeline = pipeline_of(state)
    route = pipeline.route(r.model)
    key = key_id_of(request)
    upstream = pipeline.same_wire(route, "responses")
    if upstream is not None:  # Responses -> Responses: the client's JSON goes through (the upstream stores)
        turn = responses_wire.to_bus(r, [], session_of(request), strict=False)
        return await proxied(state, request, "responses", "responses",
                             pipeline.proxied(route, upstream, turn.req, key).responses(body, request.headers, r.stream))
    store = store_of(state)
    history = await store.conversation(r.previous_response_id, key) if r.previous_response_id else []
    turn = responses_wire.to_bus(r, history, session_of(request))
    first, replies = await pipeline.start(turn.req, route, request.headers, key, r.prompt_cache_key or "")
    headers = receipt_headers(first, state)
    if ignored := responses_wire.ignored(r, [*history, *turn.items]):
        headers["x-fak-ignored"] = ",".join(ignored)  # accepted, but not acted on

    async def keep(response: dict[str, Any]) -> None:
        if r.store is not False:
            await store.put(key, r.previous_response_id or "", turn.items, response)

    if r.stream:
        return sse(state, "responses", "responses", responses_wire.stream(turn, first, replies, keep), headers)

    async def collect() -> dict[str, Any]:
        response = await responses_wire.response(turn, replies)
        await keep(response)
        return response

    return await respond(request, collect(), headers, first)


def store_of(state: State) -> ResponseStore:
    if state.responses is None:
        raise WireError("unavailable", "the gateway has no bus connection: the response store is unavailable")
    return state.responses


@get("/v1/responses/{response_id:str}")
async def get_response(request: Request, response_id: str) -> Response:
    stored = await store_of(state_of(request)).get(response_id, key_id_of(request))
    if stored is None:
        raise WireError("not_found", f"response {response_id!r} was not found (never stored, expired or deleted)")
    return Response(stored.response)


@delete("/v1/responses/{response_id:str}", status_code=200)
async def delete_response(request: Request, response_id: str) -> Response:
    if not await store_of(state_of(request)).delete(response_id, key_id_of(request)):
        raise WireError("not_found", f"response {response_id!r} was not found (never stored, expired or deleted)")
    return Response({"id": response_id, "object": "response", "deleted": True})


@post("/v1/responses/input_tokens", status_code=200)
async def response_input_tokens(request: Request) -> Response:
    state = state_of(request)
    r = openai_wire.decode(await request.body(), responses_wire.InputTokensRequest)
    route = pipeline_of(state).route(r.model)
    if not route.inkernel:
        raise WireError("not_implemented", f"model {r.model!r} is served by an upstream; count locally")
    key = key_id_of(request)
    history = await store_of(state).conversation(r.previous_response_id, key) if r.previous_response_id else []
    messages = responses_wire.to_messages([*history, *responses_wire.input_items(r.input)], r.instructions)
    counted = CountTokensRequest(model=route.target, messages=messages, tools=responses_wire.to_tools(r.tools))
    assert state.engines is not None
    if state.guard is not None:
        state.filter.apply(counted.messages)
    return Response({"object": "response.input_tokens", "input_tokens": await state.engines.count_tokens(counted)})
