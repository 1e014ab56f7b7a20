"""Re-capture what the pinned Codex CLI really sends: `python -m tests.support.capture_codex`.

Runs `codex exec --json "Add hello.txt ..."` twice against a scripted Responses server (`patch_then_text`:
one patch that adds hello.txt, then a final message), checks that the patch landed in the workspace and
that exactly two POST /v1/responses were made, and writes to tests/data/codex/:

    responses_1.json               first request, model gpt-5.5 (bundled catalog: freeform apply_patch tool)
    responses_2.json               its follow-up: + custom_tool_call and custom_tool_call_output
    responses_custom_model_2.json  follow-up with model "synthetic" (fallback metadata: no apply_patch tool;
                                   the patch goes through exec_command, so function_call + function_call_output)
    headers_1.json                 the headers of responses_1 as received, in order

Bodies are the bytes Codex sent (compact JSON, its key order) with `client_metadata` sorted and `Redactor`
applied: temp dirs, uuids, the date, the start time and tool wall times replaced by stable stand-ins; the
key is a dummy. `content-length` in
headers_1.json is the unredacted length. Run it after bumping clients/package.json and review the diff
(tests/data/codex/NOTES.md describes what is in them).

`ResponsesUpstream` is a Responses wire for `tests.support.upstreams`' scripted server (it could move there):
POST /v1/responses answers the SSE events that Codex and the OpenAI SDKs read when `stream` is true, else
the Response object. A ToolUse becomes a `custom_tool_call` (its input is `input["input"]`) when the request
declares a custom tool of that name, else a `function_call`; a Thinking block becomes a `reasoning` item
with one summary part and its signature as `encrypted_content`. `omit` drops stream events by type, for
probing what a client requires.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.support.clients import REPO, codex_args, codex_env, codex_events
from tests.support.upstreams import (
    Message,
    RecordedRequest,
    Reply,
    ScriptedUpstream,
    Text,
    Thinking,
    ToolUse,
    text,
    tool_use,
)

OUT = REPO / "tests" / "data" / "codex"

PATCH = "*** Begin Patch\n*** Add File: hello.txt\n+hello from fak\n*** End Patch\n"


# ============================================================================== the Responses wire


class ResponsesUpstream(ScriptedUpstream):
    """POST /v1/responses (JSON or SSE); everything else is a 404 in OpenAI's error shape."""

    model_paths = frozenset({"/v1/responses"})

    def __init__(self, replies: Any = (), *, omit: frozenset[str] = frozenset(), **kw: Any):
        super().__init__(replies, **kw)
        self.omit = omit  # stream event types not to send

    def error_body(self, status: int, message: str) -> Any:
        kind = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error",
                429: "rate_limit_exceeded"}.get(status, "server_error")
        return {"error": {"message": message, "type": kind, "param": None, "code": kind}}

    def _items(self, m: Message, request: dict) -> list[dict]:
        custom = {t.get("name") for t in request.get("tools") or () if t.get("type") == "custom"}
        items: list[dict] = []
        for b in m.blocks:
            match b:
                case Text():
                    items.append({"id": self.next_id("msg_scripted_"), "type": "message", "status": "completed",
                                  "role": "assistant",
                                  "content": [{"type": "output_text", "text": b.text, "annotations": []}]})
                case ToolUse() if b.name in custom:
                    items.append({"id": self.next_id("ctc_scripted_"), "type": "custom_tool_call",  # no status
                                  "call_id": b.id or self.next_id("call_scripted_"), "name": b.name,
                                  "input": b.input["input"]})
                case ToolUse():
                    items.append({"id": self.next_id("fc_scripted_"), "type": "function_call",
                                  "status": "completed", "call_id": b.id or self.next_id("call_scripted_"),
                                  "name": b.name, "arguments": json.dumps(b.input)})
                case Thinking():
                    items.append({"id": self.next_id("rs_scripted_"), "type": "reasoning",
                                  "summary": [{"type": "summary_text", "text": b.thinking}],
                                  "encrypted_content": b.signature})
        return items

    def _usage(self, m: Message) -> dict:
        u = m.usage or self.usage
        return {"input_tokens": u.input_tokens + u.cache_read_input_tokens,
                "input_tokens_details": {"cached_tokens": u.cache_read_input_tokens, "cache_write_tokens": 0},
                "output_tokens": u.output_tokens, "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": u.input_tokens + u.cache_read_input_tokens + u.output_tokens}

    def _response(self, rid: str, request: dict, status: str, output: list[dict], usage: dict | None) -> dict:
        return {"id": rid, "object": "response", "created_at": int(time.time()), "status": status,
                "model": request.get("model", "scripted"), "output": output, "usage": usage,
                "parallel_tool_calls": request.get("parallel_tool_calls", True),
                "tool_choice": request.get("tool_choice", "auto"), "tools": request.get("tools", []),
                "previous_response_id": request.get("previous_response_id"), "store": request.get("store", True),
                "error": None, "incomplete_details": None, "instructions": request.get("instructions"),
                "metadata": {}, "temperature": None, "top_p": None, "text": {"format": {"type": "text"}},
                "reasoning": request.get("reasoning"), "truncation": "disabled"}

    def encode(self, m: Message, request: dict) -> dict:
        return self._response(self.next_id("resp_scripted_"), request, "completed", self._items(m, request),
                              self._usage(m))

    def stream_events(self, m: Message, request: dict) -> Iterator[bytes]:
        rid = self.next_id("resp_scripted_")
        seq = iter(range(1 << 30))

        def ev(kind: str, **fields: Any) -> list[bytes]:
            if kind in self.omit:
                return []
            return [f"event: {kind}\ndata: {json.dumps({'type': kind, 'sequence_number': next(seq), **fields})}\n\n"
                    .encode()]

        yield from ev("response.created", response=self._response(rid, request, "in_progress", [], None))
        yield from ev("response.in_progress", response=self._response(rid, request, "in_progress", [], None))
        items = self._items(m, request)
        for i, item in enumerate(items):
            where = {"item_id": item["id"], "output_index": i}
            match item["type"]:
                case "message":
                    yield from ev("response.output_item.added", output_index=i, item={**item, "status": "in_progress",
                                                                                     "content": []})
                    part = item["content"][0]
                    yield from ev("response.content_part.added", **where, content_index=0, part={**part, "text": ""})
                    for p in _pieces(part["text"]):
                        yield from ev("response.output_text.delta", **where, content_index=0, delta=p, logprobs=[])
                    yield from ev("response.output_text.done", **where, content_index=0, text=part["text"],
                                  logprobs=[])
                    yield from ev("response.content_part.done", **where, content_index=0, part=part)
                case "custom_tool_call":
                    yield from ev("response.output_item.added", output_index=i, item={**item, "input": ""})
                    for p in _pieces(item["input"], 16):
                        yield from ev("response.custom_tool_call_input.delta", **where, delta=p)
                    yield from ev("response.custom_tool_call_input.done", **where, input=item["input"])
                case "function_call":
                    yield from ev("response.output_item.added", output_index=i,
                                  item={**item, "arguments": "", "status": "in_progress"})
                    for p in _pieces(item["arguments"], 8):
                        yield from ev("response.function_call_arguments.delta", **where, delta=p)
                    yield from ev("response.function_call_arguments.done", **where, arguments=item["arguments"])
                case "reasoning":
                    yield from ev("response.output_item.added", output_index=i, item={**item, "summary": []})
                    summary = item["summary"][0]
                    yield from ev("response.reasoning_summary_part.added", **where, summary_index=0,
                                  part={**summary, "text": ""})
                    yield from ev("response.reasoning_summary_text.delta", **where, summary_index=0,
                                  delta=summary["text"])
                    yield from ev("response.reasoning_summary_text.done", **where, summary_index=0,
                                  text=summary["text"])
                    yield from ev("response.reasoning_summary_part.done", **where, summary_index=0, part=summary)
            yield from ev("response.output_item.done", output_index=i, item=item)
        yield from ev("response.completed", response=self._response(rid, request, "completed", items, self._usage(m)))


def _pieces(s: str, size: int = 0) -> list[str]:
    if size:
        return [s[i:i + size] for i in range(0, len(s), size)] or [s]
    return re.findall(r"\s*\S+\s*|\s+", s) or [s]


# ================================================================================== the capture


def patch_then_text(req: RecordedRequest) -> Reply:
    """Answer one apply_patch call until its output is in the input, then a final message.

    A model with catalog metadata (gpt-5.5) gets the freeform `apply_patch` custom tool; one without gets only
    `exec_command`, and Codex intercepts an `apply_patch` heredoc run through it and applies the patch itself.
    """
    body = req.json()
    if any(item.get("type") in ("custom_tool_call_output", "function_call_output") for item in body["input"]):
        return text("Added hello.txt.")
    if any(t.get("type") == "custom" and t.get("name") == "apply_patch" for t in body.get("tools") or ()):
        return tool_use("apply_patch", {"input": PATCH})
    return tool_use("exec_command", {"cmd": f"apply_patch <<'EOF'\n{PATCH}EOF\n"})


class Redactor:
    """Makes a capture stable and free of this machine: the temp dirs get fixed names, each distinct uuid
    (session, turn, item and installation ids) a numbered stand-in, the date and start time fixed values,
    the port PORT. One redactor per run keeps ids consistent between the bodies and the headers."""

    UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")

    def __init__(self, home: str, cwd: str):
        self.paths = {home: "/tmp/codex-home", cwd: "/tmp/workspace"}
        self.uuids: dict[str, str] = {}

    def __call__(self, s: str) -> str:
        for real, fake in self.paths.items():
            s = s.replace(real, fake)
        s = self.UUID.sub(lambda m: self.uuids.setdefault(m[0], f"00000000-0000-0000-0000-{len(self.uuids) + 1:012d}"),
                          s)
        s = re.sub(r"<current_date>[^<]*</current_date>", "<current_date>2000-01-01</current_date>", s)
        s = re.sub(r'(turn_started_at_unix_ms\\*":)\d+', r"\g<1>0", s)
        return re.sub(r"127\.0\.0\.1:\d+", "127.0.0.1:PORT", s)


def run(model: str) -> tuple[list[RecordedRequest], Redactor]:
    """One `codex exec` that must apply PATCH in two requests; the requests and the run's redactor."""
    with tempfile.TemporaryDirectory() as home, tempfile.TemporaryDirectory() as cwd, \
            ResponsesUpstream(patch_then_text) as up:
        p = subprocess.run(codex_args("Add hello.txt containing 'hello from fak'.", cwd=cwd),
                           env=codex_env(up.url, "sk-dummy", home, model=model),
                           stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=180)
        added = Path(cwd, "hello.txt")
        seen = [f"{r.method} {r.path}" for r in up.requests]
        said = [e["item"].get("text") for e in codex_events(p.stdout) if e["type"] == "item.completed"]
        if p.returncode or not added.exists() or added.read_text() != "hello from fak\n" or len(seen) != 2 \
                or set(seen) != {"POST /v1/responses"} or said[-1:] != ["Added hello.txt."]:
            sys.exit(f"codex failed (rc {p.returncode}, requests {seen}): {p.stdout[-2000:]}\n{p.stderr[-3000:]}")
        return up.requests, Redactor(home, cwd)


def body(req: RecordedRequest, redact: Redactor) -> bytes:
    """The body as sent, redacted. Codex writes compact JSON (which json.dumps below reproduces byte for
    byte) but `client_metadata` from a hash map, in a different order each run: it is sorted here."""
    obj = json.loads(req.body)
    obj["client_metadata"] = dict(sorted(obj["client_metadata"].items()))
    s = json.dumps(obj, separators=(",", ":"), ensure_ascii=False)
    s = re.sub(r"Wall time: [\d.]+ seconds", "Wall time: 0.1 seconds", s)  # in the tool outputs
    return redact(s).encode()


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    (first, second), redact = run("gpt-5.5")
    (OUT / "responses_1.json").write_bytes(body(first, redact))
    (OUT / "responses_2.json").write_bytes(body(second, redact))
    headers = [[k, "Bearer sk-dummy" if k == "authorization" else redact(v)] for k, v in first.headers]
    (OUT / "headers_1.json").write_text("[\n" + ",\n".join(json.dumps(h) for h in headers) + "\n]\n")
    (_, custom), redact = run("synthetic")
    (OUT / "responses_custom_model_2.json").write_bytes(body(custom, redact))
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
