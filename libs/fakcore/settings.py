"""Every setting of every fak process, in one typed place.

A setting is a field of `Settings` with a description. Its value comes, last one winning, from the default
here, the environment (`FAK_<FIELD>` upper-cased, so a container can set all of them), then a command-line
flag (`--<field-with-dashes>`). The README's configuration table is generated from this class and a unit
test keeps the two in step.
"""

from __future__ import annotations

import argparse
import os
from typing import Annotated, Any, get_args, get_origin

import msgspec

ENV_PREFIX = "FAK_"


def _doc(text: str) -> msgspec.Meta:
    return msgspec.Meta(description=text)


class Settings(msgspec.Struct, frozen=True, kw_only=True):
    # -- the bus ---------------------------------------------------------------------------------------
    nats_url: Annotated[str, _doc("NATS server URL(s), comma separated. Empty: `fak up` starts an embedded nats-server with JetStream.")] = ""
    nats_user: Annotated[str, _doc("NATS user name (per-service credentials in deployments).")] = ""
    nats_password: Annotated[str, _doc("NATS password for `nats_user`.")] = ""
    nats_creds: Annotated[str, _doc("Path to a NATS .creds file (JWT + nkey), instead of user/password.")] = ""
    nats_port: Annotated[int, _doc("Port of the embedded nats-server started by `fak up` (0: a free port).")] = 0
    data_dir: Annotated[str, _doc("Where the embedded nats-server keeps its JetStream data (quarantine verdicts, the audit log) across restarts; one `fak up` at a time per dir. Empty: `<cache_dir>/data`; `temp`: a temporary dir removed on stop.")] = ""

    # -- the gateway -----------------------------------------------------------------------------------
    host: Annotated[str, _doc("Gateway bind address.")] = "127.0.0.1"
    port: Annotated[int, _doc("Gateway HTTP port.")] = 8080
    models: Annotated[tuple[str, ...], _doc("Models the gateway routes (comma separated). Default: the served `model`.")] = ()
    api_keys: Annotated[tuple[str, ...], _doc("Gateway API keys (comma separated). Empty: no key is required.")] = ()
    max_body_bytes: Annotated[int, _doc("Largest request body the gateway accepts, in bytes (413 above it).")] = 4 * 1024 * 1024
    ack_timeout_s: Annotated[float, _doc("How long the gateway waits for an engine worker to accept a request before failing it (503).")] = 5.0
    idle_timeout_s: Annotated[float, _doc("Longest silence between two streamed engine messages before the request fails (504).")] = 120.0
    worker_stale_s: Annotated[float, _doc("A worker not heard from for this long is treated as gone (its streams fail, not-yet-started requests go to another worker).")] = 3.0
    adjudicate: Annotated[bool, _doc("Gateway: screen tool results and adjudicate tool calls (the quarantine fan-out). Off: requests pass unscreened (benchmarks only).")] = True
    adjudicate_timeout_s: Annotated[float, _doc("How long the gateway waits for a verdict; none in time fails the request (503), never lets it through.")] = 10.0
    verdict_barrier: Annotated[str, _doc("Where requests with unscreened tool results wait: `engine` (held: prefill runs while screening, no token before the Release) or `gateway` (screen first, then send).")] = "engine"
    verdict_cache_size: Annotated[int, _doc("Clean tool-result verdicts a gateway remembers (by block id), so repeated results are not screened again.")] = 100000
    admin_keys: Annotated[tuple[str, ...], _doc("Keys for the gateway's operator endpoints (/v1/fak/audit, /v1/fak/requests/…), comma separated. Empty: those endpoints refuse (403).")] = ()
    audit_buffer: Annotated[int, _doc("Audit records (verdicts, eviction receipts) a gateway keeps in memory for /v1/fak/audit; older ones stay in JetStream.")] = 20000
    base_url: Annotated[str, _doc("Upstream mode: the API every model not served in-kernel goes to (e.g. http://127.0.0.1:11434/v1 for an OpenAI-compatible server, https://… for Anthropic's), with the client's own key. `fak up` then starts no engine worker unless `models` names in-kernel ones.")] = ""
    upstream_wire: Annotated[str, _doc("What `base_url` speaks: `openai` (chat completions; the URL ends in its version, /v1) or `anthropic` (messages; the URL without /v1).")] = "openai"
    routes: Annotated[str, _doc("A routes file (YAML): model ids, globs and aliases mapped to the in-kernel engine or to named upstreams (url, wire, auth, key variable, timeout). See libs/fakcore/routes.py.")] = ""

    # -- the engine ------------------------------------------------------------------------------------
    model: Annotated[str, _doc("Model an engine worker serves: `synthetic`, `smollm2-135m`, a .gguf path, a safetensors dir, or hf://org/repo.")] = "synthetic"
    backend: Annotated[str, _doc("Engine numeric path: `reference` (numpy f32) or `numba` (fast CPU).")] = "reference"
    threads: Annotated[int, _doc("Compute threads of the numba backend (0: all cores).")] = 0
    activations: Annotated[str, _doc("numba backend: `f32` activations (argmax-exact vs the reference) or `int8` (int8 dot products with AVX-512 VNNI or AVX2, whichever the CPU has; faster, approximate).")] = "f32"
    worker_id: Annotated[str, _doc("Engine worker name on the bus (default: host-pid).")] = ""
    max_sessions: Annotated[int, _doc("Sequences an engine worker decodes together (continuous batching width).")] = 16
    max_queue: Annotated[int, _doc("Requests an engine worker queues beyond `max_sessions` before refusing (overloaded).")] = 64
    announce_interval_s: Annotated[float, _doc("Seconds between worker/service heartbeats on the bus.")] = 1.0
    cache_dir: Annotated[str, _doc("Model cache directory (default: ~/.cache/fak).")] = ""
    kv_budget: Annotated[str, _doc("KV-cache memory of an engine worker (e.g. 512MiB, 2GiB): finished sequences are kept for prefix reuse and dropped least-recently-used first above it; 0 keeps none.")] = "1GiB"
    kv_min_prefix: Annotated[int, _doc("Fewest shared prompt tokens worth reusing from a cached sequence.")] = 16
    kv_evict_mode: Annotated[str, _doc("How a quarantined block's KV spans are evicted: `exact` (drop, recompute the suffix: bit-identical to a fresh prefill) or `shift` (drop, re-rotate survivors' keys; no recompute).")] = "exact"
    kv_verify: Annotated[bool, _doc("After each eviction, prefill the surviving tokens into a scratch cache and report in the receipt whether the cache is bit-identical (doubles the eviction cost).")] = True
    hold_timeout_s: Annotated[float, _doc("Verdict barrier: how long a held request waits for its Release before it fails (504).")] = 30.0

    # -- the adjudicator -------------------------------------------------------------------------------
    policy: Annotated[str, _doc("Policy for tool-call adjudication: a YAML file, or a folder with default.yaml and one <key id>.yaml per API key. Empty: the built-in policy (deploy/policies/default.yaml).")] = ""
    policy_reload_s: Annotated[float, _doc("How often the adjudicator checks the policy files for changes (hot reload; a bad file keeps the old policy). 0: never.")] = 2.0
    screen_threshold: Annotated[float, _doc("Inline screening: a tool result scoring at or above this is quarantined. 0.4: any rule (borderline ones score 0.45); 0.5: a strong rule or two borderline ones.")] = 0.4
    screen_model: Annotated[str, _doc("Model-stage screening: `sync` (before the verdict), `async` (after it: a late quarantine, enforced by eviction) or `off`.")] = "sync"
    screen_model_threshold: Annotated[float, _doc("Model stage: probability at or above which a tool result is quarantined (0: the threshold shipped with the model).")] = 0.0

    # -- every process ---------------------------------------------------------------------------------
    metrics_port: Annotated[int, _doc("Port of a non-HTTP service's /metrics and /healthz (0: a free port, announced on the bus).")] = 0
    metrics_host: Annotated[str, _doc("Bind address of a non-HTTP service's /metrics and /healthz.")] = "127.0.0.1"
    log_level: Annotated[str, _doc("Log level (DEBUG, INFO, WARNING, ERROR).")] = "INFO"

    # ------------------------------------------------------------------------------------------------
    @property
    def routed_models(self) -> tuple[str, ...]:
        return self.models or (self.model,)

    @property
    def kv_budget_bytes(self) -> int:
        return parse_bytes(self.kv_budget)

    @property
    def nats_servers(self) -> list[str]:
        return [u.strip() for u in self.nats_url.split(",") if u.strip()]

    def replace(self, **changes: Any) -> Settings:
        return msgspec.structs.replace(self, **changes)

    def to_env(self) -> dict[str, str]:
        """This configuration as FAK_* variables, for a child process."""
        env = {}
        for field in msgspec.structs.fields(self):
            value = getattr(self, field.name)
            env[ENV_PREFIX + field.name.upper()] = ",".join(value) if isinstance(value, tuple) else str(value)
        return env

    @classmethod
    def load(cls, env: dict[str, str] | None = None, args: argparse.Namespace | None = None, **overrides: Any) -> Settings:
        """Defaults, then `env` (default os.environ), then parsed CLI flags, then explicit overrides."""
        env = os.environ if env is None else env
        raw: dict[str, Any] = {}
        for field in msgspec.structs.fields(cls):
            key = ENV_PREFIX + field.name.upper()
            if key in env:
                raw[field.name] = _from_text(field.type, env[key])
        if args is not None:
            for field in msgspec.structs.fields(cls):
                value = getattr(args, field.name, None)
                if value is not None:
                    raw[field.name] = _from_text(field.type, value) if isinstance(value, str) else value
        raw.update(overrides)
        try:
            return msgspec.convert(raw, cls, strict=False)
        except msgspec.ValidationError as exc:
            raise SettingsError(f"invalid setting: {exc}") from exc


class SettingsError(ValueError):
    pass


def describe() -> list[tuple[str, str, str, str]]:
    """(flag, env var, default, description) for every setting: the CLI help and the README table."""
    rows = []
    for field in msgspec.structs.fields(Settings):
        meta = next((a for a in get_args(field.type)[1:] if isinstance(a, msgspec.Meta)), None)
        default = field.default
        shown = ",".join(default) if isinstance(default, tuple) else str(default)
        rows.append((f"--{field.name.replace('_', '-')}", ENV_PREFIX + field.name.upper(), shown, meta.description if meta else ""))
    return rows


def add_arguments(parser: argparse.ArgumentParser, only: set[str] | None = None) -> None:
    """One `--flag` per setting (all as text; `Settings.load` converts). Defaults stay None = not given."""
    for field in msgspec.structs.fields(Settings):
        if only is not None and field.name not in only:
            continue
        meta = next((a for a in get_args(field.type)[1:] if isinstance(a, msgspec.Meta)), None)
        parser.add_argument(f"--{field.name.replace('_', '-')}", dest=field.name, default=None, metavar=field.name.upper(),
                            help=(meta.description if meta else "") + f" [env {ENV_PREFIX}{field.name.upper()}]")


def parse_bytes(text: str) -> int:
    """'512MiB' -> 536870912; '2G' -> 2e9; '0' -> 0."""
    units = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "kib": 2**10, "m": 10**6, "mb": 10**6, "mib": 2**20,
             "g": 10**9, "gb": 10**9, "gib": 2**30, "t": 10**12, "tb": 10**12, "tib": 2**40}
    s = str(text).strip().lower().replace(" ", "")
    num = s.rstrip("abcdefghijklmnopqrstuvwxyz")
    unit = s[len(num):]
    if not num or unit not in units:
        raise SettingsError(f"cannot read {text!r} as a size (examples: 0, 4096, 512MiB, 2GiB)")
    return int(float(num) * units[unit])


def _from_text(annotation: Any, value: Any) -> Any:
    base = get_args(annotation)[0] if get_origin(annotation) is Annotated else annotation
    if isinstance(value, str) and get_origin(base) is tuple:
        return tuple(v.strip() for v in value.split(",") if v.strip())
    if isinstance(value, str) and base is bool:
        return value.strip().lower() in ("1", "true", "yes", "on")
    return value
