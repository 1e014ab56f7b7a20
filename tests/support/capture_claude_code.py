"""Re-capture what the pinned Claude Code really sends: `python -m tests.support.capture_claude_code`.

Runs `claude -p "run: echo hi"` twice against a scripted Anthropic upstream (a Bash tool_use, then text)
and writes the request bodies, byte for byte, and the first request's headers to tests/data/claude_code/:

    messages_1.json                    first turn, default settings (model claude-opus-*, adaptive thinking)
    messages_2.json                    second turn: the assistant's tool_use and the user's tool_result
    messages_custom_model_nothink.json second turn with ANTHROPIC_MODEL=synthetic, CLAUDE_CODE_DISABLE_THINKING=1
    headers_1.json                     the headers of messages_1 as received, in order

Run it after bumping clients/package.json and review the diff: the gateway's Anthropic decoder is tested
against these files.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile

from tests.support.clients import REPO, claude_args, claude_env
from tests.support.upstreams import AnthropicUpstream, RecordedRequest, Reply, text, tool_use

OUT = REPO / "tests" / "data" / "claude_code"


def bash_then_text(req: RecordedRequest) -> Reply:
    """Answer a Bash tool_use until a tool_result is in the conversation, then text."""
    blocks = [b for m in req.json()["messages"] if isinstance(m["content"], list) for b in m["content"]]
    if any(b.get("type") == "tool_result" for b in blocks):
        return text("The command printed hi.")
    return tool_use("Bash", {"command": "echo hi", "description": "Print hi"})


def run(**env: str) -> list[RecordedRequest]:
    with tempfile.TemporaryDirectory() as home, tempfile.TemporaryDirectory() as cwd, \
            AnthropicUpstream(bash_then_text) as up:
        p = subprocess.run(claude_args("run: echo hi"), env=claude_env(up.url, "sk-ant-dummy", home, **env),
                           cwd=cwd, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)
        result = json.loads(p.stdout)
        if p.returncode or result.get("is_error") or result.get("num_turns") != 2:
            sys.exit(f"claude failed (rc {p.returncode}): {p.stdout[-2000:]}\n{p.stderr[-2000:]}")
        return up.requests_to("/v1/messages")


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    first, second = run()
    (OUT / "messages_1.json").write_bytes(first.body)
    (OUT / "messages_2.json").write_bytes(second.body)
    (OUT / "headers_1.json").write_text("[\n" + ",\n".join(json.dumps(h) for h in first.headers) + "\n]\n")
    *_, custom = run(ANTHROPIC_MODEL="synthetic", CLAUDE_CODE_DISABLE_THINKING="1")
    (OUT / "messages_custom_model_nothink.json").write_bytes(custom.body)
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
