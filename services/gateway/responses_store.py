"""The response store of the Responses API: `store` (on by default, as OpenAI's), `previous_response_id`,
GET and DELETE /v1/responses/{id}.

It lives on JetStream, so every gateway replica sees every response: stream RESPONSES_STREAM keeps the
last message of each subject (a KV bucket's semantics) for `responses_ttl_s`, up to `responses_max_bytes`
(the oldest go first). A response is one head subject (`fak.v1.responses.<id>`: its owner's key id, the
previous response's id, the number of chunks) and its record in chunks under it (`….<id>.<i>`), each
under one NATS message, so a long conversation is never refused for its size. The record holds the
turn's input items and the response; a conversation is rebuilt by walking `previous` back.

A response belongs to the API key that made it: another key is told it does not exist. DELETE writes an
empty head (a tombstone), which replaces the old one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import nats.js.errors
from nats.js.api import DiscardPolicy, RetentionPolicy, StorageType, StreamConfig

from fak_gateway.errors import WireError
from fakcore import bus
from fakcore.protocol import subjects
from fakcore.settings import Settings

PREFIX = subjects.RESPONSES[:-1]  # "fak.v1.responses."
MAX_CHAIN = 10_000  # responses one conversation may chain back through
CHUNK_MARGIN = 4096  # room left in a NATS message beside a chunk (headers, the JetStream envelope)


@dataclass
class Stored:
    id: str
    key_id: str
    previous: str
    items: list[dict[str, Any]]  # that turn's input items
    response: dict[str, Any]


class ResponseStore:
    def __init__(self, nc: Any, settings: Settings):
        self.nc, self.settings = nc, settings
        self.js = nc.jetstream()

    async def start(self) -> None:
        s = self.settings
        self.js = await bus.ensure_stream(self.nc, StreamConfig(
            name=subjects.RESPONSES_STREAM, subjects=[subjects.RESPONSES], retention=RetentionPolicy.LIMITS,
            storage=StorageType.FILE, max_msgs_per_subject=1, discard=DiscardPolicy.OLD,
            max_age=float(s.responses_ttl_s), max_bytes=s.responses_max_bytes_int))

    async def put(self, key_id: str, previous: str, items: list[dict[str, Any]], response: dict[str, Any]) -> None:
        record = json.dumps({"items": items, "response": response}, ensure_ascii=False, separators=(",", ":")).encode()
        size = max(1024, self.nc.max_payload - CHUNK_MARGIN)
        chunks = [record[i:i + size] for i in range(0, len(record), size)] or [b""]
        rid = response["id"]
        try:
            for i, chunk in enumerate(chunks):
                await self.js.publish(f"{PREFIX}{rid}.{i}", chunk)
            head = {"key_id": key_id, "previous": previous, "chunks": len(chunks)}
            await self.js.publish(f"{PREFIX}{rid}", json.dumps(head).encode())  # last: a head means a whole record
        except (nats.errors.Error, OSError) as exc:
            raise WireError("unavailable", f"the response could not be stored ({exc or type(exc).__name__}); "
                                           "send store: false to skip storing") from None

    async def _last(self, subject: str) -> bytes | None:
        try:
            return (await self.js.get_last_msg(subjects.RESPONSES_STREAM, subject)).data or None
        except nats.js.errors.NotFoundError:
            return None
        except (nats.errors.Error, OSError) as exc:
            raise WireError("unavailable", f"the response store cannot be read ({exc or type(exc).__name__})") from None

    async def get(self, rid: str, key_id: str) -> Stored | None:
        """The stored response `rid` if `key_id` made it (and it is neither deleted nor expired)."""
        if not rid.startswith("resp_") or not rid[5:].isalnum():
            return None
        raw = await self._last(f"{PREFIX}{rid}")
        if raw is None:
            return None
        head = json.loads(raw)
        if head.get("key_id") != key_id:
            return None
        parts = []
        for i in range(int(head["chunks"])):
            part = await self._last(f"{PREFIX}{rid}.{i}")
            if part is None:  # expired under the head (the oldest go first when the store is full)
                return None
            parts.append(part)
        record = json.loads(b"".join(parts))
        return Stored(id=rid, key_id=key_id, previous=head.get("previous") or "", items=record["items"],
                      response=record["response"])

    async def delete(self, rid: str, key_id: str) -> bool:
        if await self.get(rid, key_id) is None:
            return False
        await self.js.publish(f"{PREFIX}{rid}", b"")
        return True

    async def conversation(self, rid: str, key_id: str) -> list[dict[str, Any]]:
        """The items of every response up to and including `rid`, oldest first: each turn's input, then
        its output. A missing link is a 404 naming it (expired, deleted, or another key's)."""
        chain: list[Stored] = []
        while rid:
            stored = await self.get(rid, key_id)
            if stored is None:
                raise WireError("not_found", f"previous response {rid!r} was not found (never stored, expired or deleted)",
                                param="previous_response_id")
            chain.append(stored)
            if len(chain) > MAX_CHAIN:
                raise WireError("invalid_request", f"the conversation chains back through more than {MAX_CHAIN} responses",
                                param="previous_response_id")
            rid = stored.previous
        items: list[dict[str, Any]] = []
        for stored in reversed(chain):
            items += stored.items
            items += [_replayable(i) for i in stored.response.get("output", [])]
        return items


def _replayable(item: dict[str, Any]) -> dict[str, Any]:
    """An output item as input to the next turn (output_text stays output_text; ids and status go)."""
    return {k: v for k, v in item.items() if k not in ("id", "status")}
