"""The real agent clients the end-to-end tests drive, as installed by `make clients` (clients/package.json).

Claude Code runs headless with `claude -p PROMPT --output-format json` against ANTHROPIC_BASE_URL. It needs
no onboarding or login in -p mode: an API key in the environment and a HOME it can write are enough.
`claude_env` builds that environment from nothing (never the caller's, so no real key or CLAUDE_CODE_*
setting leaks in) and turns off everything that would reach the internet (telemetry, error reports,
auto-update, the HEAD /api/hello connectivity probe).

Permissions: `--allowedTools Bash` lets the Bash tool run without a prompt. `--dangerously-skip-permissions`
and `--permission-mode bypassPermissions` are refused when running as root unless IS_SANDBOX=1 is set.
"""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CLIENTS = REPO / "clients"


def claude_bin() -> Path:
    """The pinned Claude Code binary (a native executable; no node process stays resident)."""
    path = CLIENTS / "node_modules" / ".bin" / "claude"
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: run `make clients` (npm ci --prefix clients) first")
    return path


def claude_env(base_url: str, api_key: str, home: str | os.PathLike[str], **extra: str) -> dict[str, str]:
    """The environment for a headless, offline, non-interactive `claude -p` against `base_url`.

    `home` should be an empty temporary directory: Claude Code writes ~/.claude.json and ~/.claude/ there.
    `extra` adds or overrides variables, e.g. ANTHROPIC_MODEL="synthetic" (sent as the request's model;
    Claude Code warns `unrecognized_model` on stderr and carries on) or CLAUDE_CODE_DISABLE_THINKING="1"
    (drops `thinking` and `context_management` from the requests).
    """
    env = {
        "PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),  # the Bash tool needs a shell
        "HOME": os.fspath(home),
        "ANTHROPIC_BASE_URL": base_url,
        "ANTHROPIC_API_KEY": api_key,  # sent as x-api-key; ANTHROPIC_AUTH_TOKEN would send a Bearer header
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",  # also stops the HEAD /api/hello probe of the base URL
        "DISABLE_TELEMETRY": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "DISABLE_BUG_COMMAND": "1",
        "DISABLE_COST_WARNINGS": "1",
        "CLAUDE_CODE_DISABLE_FEEDBACK_SURVEY": "1",
    }
    env.update(extra)
    return env


def claude_args(prompt: str, *, allowed_tools: str = "Bash", output_format: str = "json",
                extra: tuple[str, ...] = ()) -> list[str]:
    """The command line of one headless run; its stdout is one JSON result (`is_error`, `result`, `num_turns`)."""
    return [os.fspath(claude_bin()), "-p", prompt, "--allowedTools", allowed_tools,
            "--output-format", output_format, "--no-session-persistence", *extra]
