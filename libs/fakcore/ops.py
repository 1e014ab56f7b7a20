"""The operator's commands against a running fak: `fak status`, `fak audit tail`, `fak chat MODEL`, and the
offline ones `fak policy check FILE` and `fak model rm NAME`.

They talk to the gateway over its HTTP API only (the same endpoints an operator's scripts use), at
FAK_HOST:FAK_PORT or `--url`; the operator endpoints take the first admin key (FAK_ADMIN_KEYS / _FILE) or
`--key`. Standard library only, so they work in the venv `make up` builds without the SDKs.
"""

from __future__ import annotations

import json
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

from fakcore.settings import Settings

TIMEOUT_S = 10.0


class OpsError(Exception):
    """The running system cannot be reached or refused: one line for the terminal."""


def gateway_url(settings: Settings, url: str = "") -> str:
    """--url if given, else where this machine reaches the configured gateway."""
    return url.rstrip("/") if url else settings.gateway_url


def _request(url: str, key: str = "", body: dict | None = None, timeout: float = TIMEOUT_S) -> urllib.request.Request:
    headers = {"content-type": "application/json"} if body is not None else {}
    if key:
        headers["authorization"] = f"Bearer {key}"
    data = json.dumps(body).encode() if body is not None else None
    return urllib.request.Request(url, data=data, headers=headers, method="POST" if body is not None else "GET")


def get_json(url: str, key: str = "", ok_statuses: tuple[int, ...] = (200,)) -> dict:
    """GET a JSON document; a refused connection or an error status is an OpsError naming what to do."""
    try:
        with urllib.request.urlopen(_request(url, key), timeout=TIMEOUT_S) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as e:
        text = e.read()
        if e.code in ok_statuses:
            return json.loads(text or b"{}")
        raise OpsError(f"{url}: HTTP {e.code}: {_message(text)}") from None
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        raise OpsError(f"no fak gateway at {url.split('/v1')[0].split('/healthz')[0]} ({reason}); is `fak up` running?") from None


def _message(text: bytes) -> str:
    try:
        doc = json.loads(text)
    except ValueError:
        return text.decode(errors="replace")[:200]
    err = doc.get("error", doc) if isinstance(doc, dict) else doc
    return err.get("message", str(err)) if isinstance(err, dict) else str(err)


def admin_key(settings: Settings) -> str:
    """The operator key to send: the first configured (FAK_ADMIN_KEYS, then _FILE), else the one `fak up` made."""
    if settings.admin_keys:
        return settings.admin_keys[0]
    from fakcore.launcher import admin_key_path

    for path in filter(None, (settings.admin_keys_file, str(admin_key_path(settings)))):
        try:
            lines = [ln.strip() for ln in Path(path).read_text().splitlines()]
        except OSError:
            continue
        keys = [ln for ln in lines if ln and not ln.startswith("#")]
        if keys:
            return keys[0]
    return ""


# -- fak status --------------------------------------------------------------------------------------------
def status(settings: Settings, url: str = "", out: IO[str] = sys.stdout) -> int:
    """The running system from /healthz: ready or not (and why), the models and routes, each service and
    worker with its load. Exit 0 when ready, 1 when up but not ready."""
    base = gateway_url(settings, url)
    h = get_json(base + "/healthz", ok_statuses=(200, 503))
    ready = "ready" if h.get("ok") else "NOT READY"
    print(f"fak at {base}: {ready}, up {h.get('uptime_s', 0):.0f} s, nats {'connected' if h.get('nats') else 'DOWN'}", file=out)
    print(f"  models:   {', '.join(h.get('models', [])) or '(none)'}", file=out)
    for r in h.get("routes", []):
        print(f"  route:    {r.get('model', r.get('pattern', '?'))} -> {r.get('engine', '?')}", file=out)
    for w in h.get("workers", []):
        load = f"{w.get('active', 0)} active, {w.get('queued', 0)} queued of {w.get('capacity', '?')}"
        print(f"  worker:   {w.get('worker')}  {w.get('model')}  {w.get('backend', '')} {w.get('device', '')}  {load}", file=out)
        if w.get("sampling"):
            print(f"            sampling unless a request says: {', '.join(f'{k}={v:g}' for k, v in w['sampling'].items())}", file=out)
    print(f"  services: {', '.join(h.get('services', [])) or '(none reported)'}", file=out)
    for what in ("unserved", "missing_services", "failing_services"):
        if h.get(what):
            print(f"  {what.replace('_', ' ')}: {', '.join(h[what])}", file=out)
    return 0 if h.get("ok") else 1


# -- fak audit tail -------------------------------------------------------------------------------------
def audit_line(r: dict) -> str:
    """One audit record (a verdict, a call decision, an eviction receipt) as one line."""
    ts = time.strftime("%H:%M:%S", time.localtime(r.get("ts") or 0))
    kind = r.get("kind", "?")
    if kind == "eviction":
        return (f"{ts} eviction {r.get('receipt_id', '')} {r.get('worker', '')} blocks={','.join(r.get('blocks', []))} "
                f"tokens {r.get('tokens_before')}->{r.get('tokens_after')} {r.get('mode', '')} "
                f"identical={r.get('identical')}")
    what = r.get("tool") or r.get("block", "")
    extra = r.get("rule") or r.get("detector") or ""
    reason = f" — {r['reason']}" if r.get("reason") else ""
    return f"{ts} {kind} {r.get('outcome', '')} {what} {extra} req={r.get('request_id', '')}{reason}".replace("  ", " ")


def audit_tail(settings: Settings, url: str = "", key: str = "", follow: bool = True, lines: int = 20,
               out: IO[str] = sys.stdout, interval_s: float = 1.0, stop: Callable[[], bool] = lambda: False) -> int:
    """The last `lines` audit records, oldest first; with `follow`, then every new one as it arrives."""
    base, key = gateway_url(settings, url), key or admin_key(settings)
    seen: set[tuple] = set()

    def fresh(limit: int) -> list[dict]:
        records = get_json(f"{base}/v1/fak/audit?limit={limit}", key)["records"]  # newest first
        new = [r for r in reversed(records) if _identity(r) not in seen]
        seen.update(_identity(r) for r in new)
        return new

    backlog = fresh(5000)  # what the gateway holds now: only the last `lines` are shown, the rest counts as seen
    for r in backlog[len(backlog) - lines:] if lines else []:
        print(audit_line(r), file=out, flush=True)
    while follow and not stop():
        time.sleep(interval_s)
        for r in fresh(500):
            print(audit_line(r), file=out, flush=True)
    return 0


def _identity(r: dict) -> tuple:
    return (r.get("kind"), r.get("request_id"), r.get("block"), r.get("tool"), r.get("ts"), r.get("receipt_id"))


# -- fak chat -----------------------------------------------------------------------------------------------
def stream_chat(base: str, model: str, messages: list[dict], key: str = "") -> Iterator[str]:
    """The assistant's reply to `messages`, piece by piece, over the gateway's OpenAI chat wire (SSE)."""
    req = _request(f"{base}/v1/chat/completions", key, {"model": model, "messages": messages, "stream": True})
    try:
        with urllib.request.urlopen(req, timeout=600) as r:
            for raw in r:
                line = raw.decode().strip()
                if not line.startswith("data:") or line == "data: [DONE]":
                    continue
                event = json.loads(line[5:])
                if "error" in event:
                    raise OpsError(_message(json.dumps(event).encode()))
                for choice in event.get("choices", []):
                    if choice.get("delta", {}).get("content"):
                        yield choice["delta"]["content"]
    except urllib.error.HTTPError as e:
        raise OpsError(f"HTTP {e.code}: {_message(e.read())}") from None
    except (urllib.error.URLError, OSError) as e:
        raise OpsError(f"no fak gateway at {base} ({getattr(e, 'reason', e)}); is `fak up` running?") from None


def chat(settings: Settings, model: str, url: str = "", key: str = "", system: str = "",
         inp: IO[str] = sys.stdin, out: IO[str] = sys.stdout) -> int:
    """A terminal chat: each line read is a user turn, the reply streams back; end with EOF (Ctrl-D) or /exit."""
    base, key = gateway_url(settings, url), key or next(iter(settings.api_keys), "")
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    tty = inp.isatty()
    while True:
        if tty:
            print("you> ", end="", file=out, flush=True)
        line = inp.readline()
        if not line or line.strip() in ("/exit", "/quit"):
            return 0
        if not line.strip():
            continue
        messages.append({"role": "user", "content": line.rstrip("\n")})
        if tty:
            print(f"{model}> ", end="", file=out, flush=True)
        reply = []
        for piece in stream_chat(base, model, messages, key):
            reply.append(piece)
            print(piece, end="", file=out, flush=True)
        print(file=out, flush=True)
        messages.append({"role": "assistant", "content": "".join(reply)})


# -- offline ------------------------------------------------------------------------------------------------
def policy_check(path: str, out: IO[str] = sys.stdout) -> int:
    """Parse a policy file or folder as the adjudicator would: 0 and a summary, or 1 and the error."""
    from fakcore.policy import PolicyError
    from fakcore.policy.store import load_set

    try:
        policies = load_set(path)
    except PolicyError as exc:
        print(f"fak: {exc}", file=sys.stderr)
        return 1
    print(f"{path}: ok — {len(policies.default.tools)} tool rules in the default policy, {len(policies.keys)} per-key "
          "policies", file=out)
    return 0


def model_rm(name: str, cache: str = "", out: IO[str] = sys.stdout) -> int:
    """Delete a pulled model from the cache (a name `fak model list` shows)."""
    import difflib
    import shutil

    from fakcore.models.sources import PULLABLE, pulled_path

    if name not in PULLABLE:
        close = difflib.get_close_matches(name.lower(), list(PULLABLE), n=1, cutoff=0.6)
        hint = f" (did you mean {close[0]}?)" if close else ""
        print(f"fak: unknown model {name!r}{hint}: `fak model list` shows the models", file=sys.stderr)
        return 2
    path = pulled_path(name, cache)
    if not path.exists():
        print(f"{name}: not pulled ({path})", file=out)
        return 0
    size = path.stat().st_size
    shutil.rmtree(path.parent)
    print(f"{name}: removed {path.parent} ({size / 2**20:.0f} MiB)", file=out)
    return 0
