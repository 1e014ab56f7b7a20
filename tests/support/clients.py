"""The real agent clients the end-to-end tests drive, as installed by `make clients` (clients/package.json):
Claude Code, Codex CLI and Gemini CLI.

Claude Code runs headless with `claude -p PROMPT --output-format json` against ANTHROPIC_BASE_URL. It needs
no onboarding or login in -p mode: an API key in the environment and a HOME it can write are enough.
`claude_env` builds that environment from nothing (never the caller's, so no real key or CLAUDE_CODE_*
setting leaks in) and turns off everything that would reach the internet (telemetry, error reports,
auto-update, the HEAD /api/hello connectivity probe).

Permissions: `--allowedTools Bash` lets the Bash tool run without a prompt. `--dangerously-skip-permissions`
and `--permission-mode bypassPermissions` are refused when running as root unless IS_SANDBOX=1 is set.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import tempfile
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


# ========================================================================================== Codex CLI
# `codex exec PROMPT` runs one headless turn against a custom Responses provider, with no login: CODEX_HOME
# (here also HOME) is a temporary directory whose config.toml names the provider (`codex_config`) and the
# environment variable the key comes from (sent as `authorization: Bearer`). Codex only ever calls
# POST {base_url}/v1/responses with `stream: true`; --json makes stdout one JSON event a line
# (`codex_events`; the last is `turn.completed` with usage), and stderr carries the log.
#
# The tools Codex offers depend on the model's catalog metadata: a model of the bundled catalog (gpt-5.5)
# gets the freeform `apply_patch` custom tool, any other name gets fallback metadata (no apply_patch; patches
# go through `exec_command` as an `apply_patch <<'EOF'` heredoc, which Codex intercepts). `like="gpt-5.5"`
# gives another model name that metadata through a one-entry model_catalog_json (which replaces the bundled
# catalog). The sandbox (bundled bubblewrap) works in this container: workspace-write lets commands write in
# the workspace and /tmp only. `features.plugins = false` stops the DNS look-ups of github.com, api.github.com
# and chatgpt.com that a default run makes; nothing else leaves the machine.

CODEX_API_KEY_ENV = "FAK_API_KEY"


def codex_bin() -> Path:
    """The pinned Codex CLI: a node launcher (bin/codex.js) that execs the native binary of this platform."""
    path = CLIENTS / "node_modules" / ".bin" / "codex"
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: run `make clients` (npm ci --prefix clients) first")
    return path


def codex_config(base_url: str, model: str = "gpt-5.5", *, sandbox: str = "workspace-write",
                 catalog: str | os.PathLike[str] | None = None) -> str:
    """config.toml for a headless, offline `codex exec` against the Responses API under `base_url`/v1.

    Retries are off (Codex's own defaults: 4 request and 5 stream retries, a 300 s idle timeout between SSE
    events) so that a failing gateway fails the run at once; `--strict-config` rejects any key this version
    does not know, so a version bump that renames one is loud.
    """
    lines = [
        f'model = "{model}"',
        'model_provider = "fak"',
        'approval_policy = "never"',  # exec never asks; a refused command goes back to the model as its output
        f'sandbox_mode = "{sandbox}"',  # read-only | workspace-write | danger-full-access
        "check_for_update_on_startup = false",
        'web_search = "disabled"',  # else a `web_search` tool is sent (a hosted tool a gateway cannot run)
    ]
    if catalog is not None:
        lines.append(f'model_catalog_json = "{os.fspath(catalog)}"')
    lines += [
        "",
        "[model_providers.fak]",
        'name = "fak"',
        f'base_url = "{base_url}/v1"',
        'wire_api = "responses"',
        f'env_key = "{CODEX_API_KEY_ENV}"',
        "request_max_retries = 0",
        "stream_max_retries = 0",
        "supports_websockets = false",  # the default for a custom provider; true tries ws:// first, then falls back
        "",
        "[analytics]",
        "enabled = false",
        "",
        "[feedback]",
        "enabled = false",
        "",
        "[otel]",
        'exporter = "none"',
        "",
        "[history]",
        'persistence = "none"',
        "",
        "[features]",
        "plugins = false",  # the plugin/app marketplace sync is what reaches the internet
    ]
    return "\n".join(lines) + "\n"


def codex_catalog(model: str, like: str = "gpt-5.5") -> dict:
    """A one-model catalog giving `model` the bundled metadata of `like` (`codex debug models --bundled`)."""
    with tempfile.TemporaryDirectory() as home:
        out = subprocess.run([os.fspath(codex_bin()), "debug", "models", "--bundled"], capture_output=True,
                             text=True, check=True, timeout=60, stdin=subprocess.DEVNULL,
                             env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": home, "CODEX_HOME": home})
    entry = next(m for m in json.loads(out.stdout)["models"] if m["slug"] == like)
    return {"models": [{**entry, "slug": model, "display_name": model}]}


def codex_env(base_url: str, api_key: str, home: str | os.PathLike[str], *, model: str = "gpt-5.5",
              sandbox: str = "workspace-write", like: str | None = None, **extra: str) -> dict[str, str]:
    """Write `home`/config.toml (and catalog.json with `like`) and return the environment for `codex exec`.

    `home` should be an empty temporary directory; Codex keeps its state there (sqlite files, skills, an
    installation_id). Built from nothing like `claude_env`, so no OPENAI_* or CODEX_* variable leaks in.
    """
    catalog = None
    if like is not None:
        catalog = Path(home, "catalog.json")
        catalog.write_text(json.dumps(codex_catalog(model, like)))
    Path(home, "config.toml").write_text(codex_config(base_url, model, sandbox=sandbox, catalog=catalog))
    env = {
        "PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),  # exec_command needs a shell
        "HOME": os.fspath(home),
        "CODEX_HOME": os.fspath(home),
        CODEX_API_KEY_ENV: api_key,
    }
    env.update(extra)
    return env


def codex_args(prompt: str, *, cwd: str | os.PathLike[str], json_events: bool = True,
               extra: tuple[str, ...] = ()) -> list[str]:
    """The command line of one headless run with `cwd` as the workspace (no git repository needed)."""
    return [os.fspath(codex_bin()), "exec", "--skip-git-repo-check", "--ephemeral", "--strict-config",
            "--color", "never", *(("--json",) if json_events else ()), "-C", os.fspath(cwd), *extra, prompt]


def codex_exec(base_url: str, workspace: str | os.PathLike[str], prompt: str, *, api_key: str = "sk-dummy",
               model: str = "gpt-5.5", sandbox: str = "workspace-write", like: str | None = None,
               timeout: float = 180, extra: tuple[str, ...] = (), **env: str) -> subprocess.CompletedProcess[str]:
    """Run one `codex exec --json` turn in `workspace` against `base_url` (a fresh CODEX_HOME each time)."""
    with tempfile.TemporaryDirectory() as home:
        return subprocess.run(codex_args(prompt, cwd=workspace, extra=extra),
                              env=codex_env(base_url, api_key, home, model=model, sandbox=sandbox, like=like, **env),
                              stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout)


def codex_events(stdout: str) -> list[dict]:
    """The --json events of a run: thread.started, turn.started, item.started/completed (file_change,
    command_execution, agent_message, ...), then turn.completed {usage} or turn.failed {error}."""
    return [json.loads(line) for line in stdout.splitlines() if line.strip()]


# ========================================================================================= Gemini CLI
# `gemini -p PROMPT --output-format json` runs one headless turn; its stdout is one JSON object (`response`,
# `stats` with per-model request counts and per-tool decisions; on failure `error`). API-key auth needs the
# choice written down: with GOOGLE_GEMINI_BASE_URL alone the CLI picks its "gateway" auth type, which its
# headless check refuses ("Invalid auth method selected"), so settings.json selects `gemini-api-key` and the
# key comes from GEMINI_API_KEY (sent as x-goog-api-key). Telemetry, usage statistics, auto-update and
# folder trust are off in that file; GEMINI_CLI_NO_RELAUNCH keeps it one process (it otherwise re-execs
# node with a larger heap).
#
# Models: without -m the CLI routes each turn with a classifier request (a JSON-schema generateContent to a
# flash-lite model) before the main one; `-m MODEL` bypasses the router, and every request goes to MODEL.
# Tools: headless default approval offers only read-only tools (read_file, list_directory, glob,
# grep_search, google_web_search, ...), which run without asking; `--yolo` (`--approval-mode yolo`) adds
# run_shell_command, write_file, replace, web_fetch and approves them all. The CLI calls only
# POST {base}/v1beta/models/{model}:streamGenerateContent?alt=sse (and :generateContent for side requests).

GEMINI_SETTINGS = {
    "security": {"auth": {"selectedType": "gemini-api-key"}, "folderTrust": {"enabled": False}},
    "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
    "privacy": {"usageStatisticsEnabled": False},
    "telemetry": {"enabled": False},
}


def gemini_bin() -> Path:
    """The pinned Gemini CLI (a node bundle)."""
    path = CLIENTS / "node_modules" / ".bin" / "gemini"
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: run `make clients` (npm ci --prefix clients) first")
    return path


def gemini_env(base_url: str, api_key: str, home: str | os.PathLike[str], settings: dict | None = None,
               **extra: str) -> dict[str, str]:
    """Write `home`/.gemini/settings.json (GEMINI_SETTINGS, `settings` over it) and return the environment
    for a headless, offline `gemini -p` against `base_url` (no /v1beta: the SDK appends it). Built from
    nothing, like `claude_env`."""
    Path(home, ".gemini").mkdir(parents=True, exist_ok=True)
    Path(home, ".gemini", "settings.json").write_text(json.dumps({**GEMINI_SETTINGS, **(settings or {})}, indent=2))
    env = {
        "PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),  # run_shell_command needs a shell
        "HOME": os.fspath(home),
        "GEMINI_API_KEY": api_key,
        "GOOGLE_GEMINI_BASE_URL": base_url,
        "GEMINI_CLI_NO_RELAUNCH": "true",
    }
    env.update(extra)
    return env


def gemini_args(prompt: str, *, model: str | None = None, yolo: bool = False, extra: tuple[str, ...] = ()) -> list[str]:
    return [os.fspath(gemini_bin()), "-p", prompt, "--output-format", "json", *(("-m", model) if model else ()),
            *(("--yolo",) if yolo else ()), *extra]


def gemini_run(base_url: str, workspace: str | os.PathLike[str], prompt: str, *, api_key: str = "gk-dummy",
               model: str | None = None, yolo: bool = False, timeout: float = 180, extra: tuple[str, ...] = (),
               settings: dict | None = None, **env: str) -> tuple[subprocess.CompletedProcess[str], dict]:
    """One headless run in `workspace` with a fresh HOME: the process and its JSON result ({} if none). The
    CLI runs in its own session, killed with everything it started if it outlives `timeout`."""
    with tempfile.TemporaryDirectory() as home:
        proc = subprocess.Popen(gemini_args(prompt, model=model, yolo=yolo, extra=extra),
                                env=gemini_env(base_url, api_key, home, settings, **env), cwd=workspace, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            out, err = proc.communicate()
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, 9)  # anything it left behind (a shell tool's children)
    run = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    text = out.strip() or err.strip()
    try:
        result = json.loads(text[text.index("{"):]) if "{" in text else {}
    except ValueError:
        result = {}
    return run, result
