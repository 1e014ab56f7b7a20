"""Re-capture what the pinned Gemini CLI really sends: `python -m tests.support.capture_gemini_cli`.

Runs `gemini -p` against a scripted Gemini upstream (`reads_then_text`: a read_file call, or with --yolo a
run_shell_command call, then text once a functionResponse is in the conversation; JSON to the router's
classifier) and writes the request bodies, byte for byte, to tests/data/gemini/:

    stream_1.json     first turn, `-m gemini-2.5-flash` (the router bypassed): the default read-only tools
    stream_2.json     second turn: the model's functionCall (read_file) and the CLI's functionResponse
    yolo_2.json       second turn with --yolo: every tool, a run_shell_command call and its output
    router_1.json     without -m: the classifier request (responseMimeType + responseJsonSchema, flash-lite)
    headers_1.json    the headers of stream_1.json as received, in order

Run it after bumping clients/package.json and review the diff: the Gemini wire is tested against these.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from tests.support.clients import REPO, gemini_run
from tests.support.upstreams import GeminiUpstream, RecordedRequest, Reply, text, tool_use

OUT = REPO / "tests" / "data" / "gemini"
ROUTER_ANSWER = '{"complexity_reasoning": "A single read.", "complexity_score": 10}'


def reads_then_text(req: RecordedRequest) -> Reply:
    body = req.json()
    if (body.get("generationConfig") or {}).get("responseMimeType") == "application/json":
        return text(ROUTER_ANSWER)
    if b'"functionResponse"' in req.body:
        return text("The file says hello.")
    names = {d["name"] for t in body.get("tools") or [] for d in t.get("functionDeclarations") or []}
    if "run_shell_command" in names:
        return tool_use("run_shell_command", {"command": "echo hi"})
    return tool_use("read_file", {"file_path": "notes.txt"})


def run(*, model: str | None = "gemini-2.5-flash", yolo: bool = False) -> list[RecordedRequest]:
    with tempfile.TemporaryDirectory() as ws, GeminiUpstream(reads_then_text) as up:
        Path(ws, "notes.txt").write_text("hello\n")
        proc, result = gemini_run(up.url, ws, "Read notes.txt (or run `echo hi`) and tell me what it says.",
                                  model=model, yolo=yolo, timeout=300)
        if proc.returncode or "response" not in result:
            sys.exit(f"gemini failed (rc {proc.returncode}): {proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
        return [r for r in up.requests if up.is_model_call(r)]


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    first, second, *_ = run()
    (OUT / "stream_1.json").write_bytes(first.body)
    (OUT / "stream_2.json").write_bytes(second.body)
    (OUT / "headers_1.json").write_text("[\n" + ",\n".join(json.dumps(h) for h in first.headers) + "\n]\n")
    *_, yolo = run(yolo=True)
    (OUT / "yolo_2.json").write_bytes(yolo.body)
    router = next(r for r in run(model=None) if r.path.endswith(":generateContent"))
    (OUT / "router_1.json").write_bytes(router.body)
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
