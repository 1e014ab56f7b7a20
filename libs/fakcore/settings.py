"""Every setting of every fak process, in one typed place.

A setting is a field of `Settings` with a description. Its value comes, last one winning, from the default
here, the environment (`FAK_<FIELD>` upper-cased, so a container can set all of them), then a command-line
flag (`--<field-with-dashes>`). The README's configuration table is generated from this class and a unit
test keeps the two in step.

Strict on purpose: a value that does not read as its type (a choice outside its `Literal`, a boolean other than
true/false/1/0/yes/no/on/off, a number or size that does not parse or is out of its range), a TLS file that
cannot be read or a certificate without its key, and a `FAK_*` variable that is no setting fail
`Settings.load` with one line naming the variable or flag, the value and the choices, so a typo never
quietly turns screening off. `fak up` reports it and exits 2 before it starts any process.

Secrets (the fields in SECRETS: API and admin keys, the NATS password, signing keys) travel to child processes only in the environment, never on
a command line, and never appear in a repr or a log line; keys may come from files (`api_keys_file`).
"""

from __future__ import annotations

import argparse
import difflib
import math
import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal, get_args, get_origin

import msgspec

ENV_PREFIX = "FAK_"
# FAK_* variables that fak reads and that are not settings; any other FAK_* name is refused as a misspelling.
# (compose.yaml's own variables come from its .env, which an operator may also have in the shell running fak.)
NOT_SETTINGS = frozenset({
    "FAK_GATEWAY_PORT", "FAK_PROMETHEUS_PORT", "FAK_GRAFANA_PORT",  # compose.yaml: the host ports it publishes
    "FAK_PROMETHEUS_RETENTION", "FAK_GRAFANA_ADMIN_PASSWORD", "FAK_CUDA_KV_BUDGET",  # compose.yaml: its .env
    *(f"FAK_NATS_{user}_PASSWORD" for user in ("GATEWAY", "ADJUDICATOR", "KVMMU", "ENGINE", "ADMIN")),  # the bus users
    "FAK_BENCH_DIR", "FAK_LLAMA_BENCH",  # bench/llamacpp.py: where llama.cpp is built, or a llama-bench to use
})
NOT_SETTINGS_PREFIXES = ("FAK_TEST_",)  # the tests' own variables: process tags, upstream keys in routes files
BOOLEANS = {"true": True, "false": False, "1": True, "0": False, "yes": True, "no": False, "on": True, "off": False}
KEYS_FILES = ("api_keys", "admin_keys", "tenants")  # settings that may also come from a `<name>_file`, one a line
SECRETS = frozenset({"api_keys", "admin_keys", "tenants", "nats_password", "verdict_key", "release_key"})  # masked in repr; only ever in the environment


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
    verdict_key: Annotated[str, _doc("HMAC-SHA256 key of verdicts: the adjudicator signs its verdicts with it; a gateway or kvmmu that has it refuses unsigned or badly signed ones (fail closed). `fak up` generates one per data dir for its embedded nats-server. Empty: verdicts are not signed or checked.")] = ""
    release_key: Annotated[str, _doc("HMAC-SHA256 key of Releases (the verdict barrier): the gateway signs them; an engine that has it ignores unsigned or badly signed ones, so a held request waits for the real one. `fak up` generates one per data dir for its embedded nats-server. Empty: not signed or checked.")] = ""
    nats_tls_ca: Annotated[str, _doc("CA bundle (PEM) that verifies the NATS server's certificate. With it (or `nats_tls_cert`, or a tls:// URL) every bus connection is TLS, handshake first (the server's `tls` block needs `handshake_first`), verified, never plaintext. Empty: the system's CAs, if TLS is on.")] = ""
    nats_tls_cert: Annotated[str, _doc("Client certificate (PEM) for a NATS server that verifies clients (`verify: true`); with `nats_tls_key`.")] = ""
    nats_tls_key: Annotated[str, _doc("Private key (PEM) of `nats_tls_cert`.")] = ""
    nats_tls_server_cert: Annotated[str, _doc("`fak up`: certificate (PEM; its names include 127.0.0.1) of the embedded nats-server, which then requires TLS; its services connect with tls:// and verify it with `nats_tls_ca`. With `nats_tls_cert` too, the server also requires client certificates signed by `nats_tls_ca`.")] = ""
    nats_tls_server_key: Annotated[str, _doc("`fak up`: private key (PEM) of `nats_tls_server_cert`.")] = ""
    stream_replicas: Annotated[int, _doc("Replicas of every JetStream stream fak creates (verdicts, audit log), 1 to 5; more than 1 needs a JetStream cluster (3 on the three-node cluster of deploy/k8s). The adjudicator, the streams' owner, updates existing streams to it.")] = 1

    # -- the gateway -----------------------------------------------------------------------------------
    host: Annotated[str, _doc("Gateway bind address.")] = "127.0.0.1"
    port: Annotated[int, _doc("Gateway HTTP port.")] = 8080
    models: Annotated[tuple[str, ...], _doc("Models the gateway routes (comma separated). Default: the served `model`. Each in-kernel one needs a live worker before /healthz reports ready.")] = ()
    api_keys: Annotated[tuple[str, ...], _doc("Gateway API keys (comma separated), added to those in `api_keys_file`. None at all: no key is required. Prefer the variable or the file: a flag shows in `ps`.")] = ()
    api_keys_file: Annotated[str, _doc("A file of gateway API keys, one a line (blank lines and `#` comments ignored), read at start-up; child processes get the path, not the keys. Missing, unreadable or empty: an error.")] = ""
    tenants: Annotated[tuple[str, ...], _doc("Tenants of several API keys: `tenant=key` entries, comma separated (`acme=sk-1,acme=sk-2`). A tenant's keys share its KV-cache partition (prefix reuse, `cached_tokens`) and read each other's records in the operator views (audit, requests, console); a key in no entry is a tenant of its own. A tenant is letters, digits, `_`, `.`, `-`; every key one of `api_keys`, in one tenant only. Holds keys: prefer the variable to the flag.")] = ()
    tenants_file: Annotated[str, _doc("A file of `tenant=key` entries, one a line (blank lines and `#` comments ignored), added to `tenants`, read at start-up; child processes get the path, not the keys. Missing, unreadable or empty: an error.")] = ""
    max_body_bytes: Annotated[int, _doc("Largest request body the gateway accepts, in bytes (413 above it).")] = 4 * 1024 * 1024
    ack_timeout_s: Annotated[float, _doc("How long the gateway waits for an engine worker to accept a request before failing it (503).")] = 5.0
    idle_timeout_s: Annotated[float, _doc("Longest silence between two streamed engine messages before the request fails (504).")] = 120.0
    worker_stale_s: Annotated[float, _doc("A worker not heard from for this long is treated as gone (its streams fail, not-yet-started requests go to another worker).")] = 3.0
    adjudicate: Annotated[bool, _doc("Gateway: screen tool results and adjudicate tool calls (the quarantine fan-out). Off: requests pass unscreened (benchmarks only).")] = True
    adjudicate_timeout_s: Annotated[float, _doc("How long the gateway waits for a verdict; none in time fails the request (503), never lets it through.")] = 10.0
    verdict_barrier: Annotated[Literal["engine", "gateway"], _doc("Where requests with unscreened tool results wait: `engine` (held: prefill runs while screening, no token before the Release) or `gateway` (screen first, then send).")] = "engine"
    verdict_cache_size: Annotated[int, _doc("Clean tool-result verdicts a gateway remembers (by block id), so repeated results are not screened again.")] = 100000
    admin_keys: Annotated[tuple[str, ...], _doc("Keys for the gateway's operator endpoints (/v1/fak/audit, /v1/fak/requests/…): every tenant's records. An API key reads only its own tenant's. Comma separated, added to those in `admin_keys_file`. Neither admin nor API keys: those endpoints refuse (403).")] = ()
    admin_keys_file: Annotated[str, _doc("A file of operator keys, one a line (blank lines and `#` comments ignored), read at start-up; child processes get the path, not the keys. Missing, unreadable or empty: an error.")] = ""
    responses_ttl_s: Annotated[int, _doc("How long stored Responses-API responses (`store`, for previous_response_id and GET /v1/responses/{id}) are kept, in seconds; in JetStream KV, so every gateway replica sees them.")] = 30 * 24 * 3600
    responses_max_bytes: Annotated[str, _doc("The response store's size limit (JetStream KV bucket); when full the oldest responses go first.")] = "1GiB"
    audit_buffer: Annotated[int, _doc("Audit records (verdicts, eviction receipts) a gateway keeps in memory for /v1/fak/audit; older ones stay in JetStream.")] = 20000
    base_url: Annotated[str, _doc("Upstream mode: the API every model not served in-kernel goes to (e.g. http://127.0.0.1:11434/v1 for an OpenAI-compatible server, https://… for Anthropic's), with the client's own key. `fak up` then starts no engine worker unless `models` names in-kernel ones.")] = ""
    upstream_wire: Annotated[Literal["openai", "anthropic", "responses", "gemini"], _doc("What `base_url` speaks: `openai` (chat completions; the URL ends in its version, /v1), `responses` (OpenAI's Responses API, /v1/responses; the URL ends in /v1), `anthropic` (messages; the URL without /v1) or `gemini` (Google's Gemini API; the URL ends in /v1beta).")] = "openai"
    routes: Annotated[str, _doc("A routes file (YAML): model ids, globs and aliases mapped to the in-kernel engine or to named upstreams (url, wire, auth, key variable, timeout). See libs/fakcore/routes.py.")] = ""
    mcp: Annotated[str, _doc("An MCP servers file (YAML): upstream MCP servers (streamable-HTTP URLs, stdio commands the gateway launches and restarts) fronted at /mcp: tools listed under `<server>__<tool>` unless denied by policy or poisoned, calls adjudicated, results screened. See libs/fakcore/mcp_config.py. Empty: no /mcp.")] = ""

    # -- the engine ------------------------------------------------------------------------------------
    model: Annotated[str, _doc("Model an engine worker serves: `synthetic`, `smollm2-135m`, a .gguf path, a safetensors dir, or hf://org/repo.")] = "synthetic"
    backend: Annotated[Literal["reference", "numba"], _doc("Engine numeric path: `numba` (the fast CPU path) or `reference` (numpy f32, the HuggingFace oracle's twin: slow).")] = "numba"
    threads: Annotated[int, _doc("Compute threads of the numba backend (0: all cores).")] = 0
    cuda_device: Annotated[int, _doc("engine-cuda: the GPU this worker serves, an index among those CUDA_VISIBLE_DEVICES shows (one worker per GPU; a container given one GPU: 0).")] = 0
    activations: Annotated[Literal["auto", "f32", "int8"], _doc("numba backend: `auto` (the default: int8 where the CPU has an int8 path, else f32; the log, the heartbeat and the receipts' device name the choice), `int8` (int8 dot products with AVX-512 VNNI, AVX-VNNI or AVX2, the best the CPU has: as llama.cpp multiplies, faster decode, close to but not bit-equal with the reference), or `f32` (argmax-exact vs the reference).")] = "auto"
    worker_id: Annotated[str, _doc("Engine worker name on the bus (default: host-pid).")] = ""
    max_sessions: Annotated[int, _doc("Sequences an engine worker decodes together (continuous batching width).")] = 16
    max_queue: Annotated[int, _doc("Requests an engine worker queues beyond `max_sessions` before refusing (overloaded).")] = 64
    announce_interval_s: Annotated[float, _doc("Seconds between worker/service heartbeats on the bus.")] = 1.0
    cache_dir: Annotated[str, _doc("Model cache directory (default: ~/.cache/fak).")] = ""
    prometheus_targets: Annotated[str, _doc("`fak up`: the Prometheus file-SD list it keeps of every service's metrics endpoint (default `<cache dir>/prometheus/targets.json`; `off`: none).")] = ""
    sampling: Annotated[str, _doc("Engine: sampling for requests that leave it unset, e.g. `temperature=0.2,top_p=0.9,top_k=40` (temperature 0: greedy). A knob not named here: the recommendation of the model's makers (the catalogue, `fak model list` shows it; a GGUF's `general.sampling.*`; `generation_config.json`), else llama.cpp's conservative temperature 0.8, top_k 40, top_p 0.95 (`fak status` shows what a worker uses). What a request sets always wins.")] = ""
    kv_budget: Annotated[str, _doc("KV-cache memory of an engine worker (a size, read at start-up: e.g. 512MiB, 2GiB): finished sequences are kept for prefix reuse and dropped least-recently-used first above it; 0 keeps none.")] = "1GiB"
    kv_min_prefix: Annotated[int, _doc("Fewest shared prompt tokens worth reusing from a cached sequence.")] = 16
    kv_evict_mode: Annotated[Literal["exact", "shift"], _doc("How a quarantined block's KV spans are evicted: `exact` (drop, recompute the suffix: bit-identical to a fresh prefill) or `shift` (drop, re-rotate survivors' keys; no recompute).")] = "exact"
    state_checkpoint_every: Annotated[int, _doc("Hybrid models (qwen3next, qwen35): positions between copies of a sequence's linear-attention state; exact eviction recomputes from the latest copy at or before the span (smaller: less recompute, more memory).")] = 256
    kv_verify: Annotated[bool, _doc("After each eviction, prefill the surviving tokens into a scratch cache and report in the receipt whether the cache is bit-identical (doubles the eviction cost).")] = True
    hold_timeout_s: Annotated[float, _doc("Verdict barrier: how long a held request waits for its Release before it fails (504).")] = 30.0

    # -- the adjudicator -------------------------------------------------------------------------------
    policy: Annotated[str, _doc("Policy: tool-call rules and each key's screening settings (thresholds, allowlist, flag mode, span quarantine); a YAML file, or a folder with default.yaml and one <key id>.yaml per API key. Read by the adjudicator, and by the gateway for /mcp's listing and for how a key's quarantines are applied. Empty: the built-in policy (deploy/policies/default.yaml).")] = ""
    policy_reload_s: Annotated[float, _doc("How often the adjudicator checks the policy files for changes (hot reload; a bad file keeps the old policy). 0: never.")] = 2.0
    screen_threshold: Annotated[float, _doc("Inline screening: a tool result scoring at or above this is quarantined. 0.4: any rule (borderline ones score 0.45); 0.5: a strong rule or two borderline ones.")] = 0.4
    screen_model: Annotated[Literal["sync", "async", "off"], _doc("Model-stage screening: `sync` (before the verdict), `async` (after it: a late quarantine, enforced by eviction) or `off`.")] = "sync"
    screen_model_threshold: Annotated[float, _doc("Model stage: probability at or above which a tool result is quarantined (0: the threshold shipped with the model).")] = 0.0
    screen_judge: Annotated[Literal["off", "async", "sync"], _doc("Judge stage: a second opinion from a model on fak's engine (screening/probe.py, screening/judge.py). `async` (after the verdict: a late quarantine, enforced by eviction and the context filter), `sync` (before it; the gateway's `adjudicate_timeout_s` must cover the judge) or `off`. On: the adjudicator does not start until a worker of `screen_judge_model` answers (`fak up` starts one).")] = "off"
    screen_judge_method: Annotated[Literal["probe", "ask"], _doc("Judge stage: `probe`, a trained linear probe of the model's hidden states (the head shipped for `screen_judge_model` in fakcore/data/screening/probe-<model>.npz; CLAIMS.md 15), or `ask`, the model asked whether the text holds instructions aimed at the assistant, scored P(Yes)/(P(Yes)+P(No)) (for an instruct model; near chance at 135M: CLAIMS.md 59).")] = "probe"
    screen_judge_model: Annotated[str, _doc("The judge stage's model (pulled, or a path), served by an engine worker. With `probe`, a model a head is shipped for.")] = "gemma3-270m"
    screen_judge_threshold: Annotated[float, _doc("Judge stage: the score at or above which a tool result is quarantined. 0: the method's own (probe: the head's, calibrated on the training split; ask: 0.36, ~1% FPR for smollm2-135m on a sample of it).")] = 0.0
    screen_judge_timeout_s: Annotated[float, _doc("Judge stage: how long one question may take; at start-up, how long the adjudicator waits for a judge worker (x4).")] = 30.0

    # -- every process ---------------------------------------------------------------------------------
    metrics_port: Annotated[int, _doc("Port of a non-HTTP service's /metrics and /healthz (0: a free port, announced on the bus).")] = 0
    metrics_host: Annotated[str, _doc("Bind address of a non-HTTP service's /metrics and /healthz.")] = "127.0.0.1"
    log_level: Annotated[Literal["DEBUG", "INFO", "WARNING", "ERROR"], _doc("Log level (DEBUG, INFO, WARNING, ERROR).")] = "INFO"

    # -- not settings: filled by `load` (no variable, no flag) ----------------------------------------
    _api_keys_from_file: tuple[str, ...] = ()  # the part of `api_keys` read from `api_keys_file`
    _admin_keys_from_file: tuple[str, ...] = ()  # the part of `admin_keys` read from `admin_keys_file`
    _tenants_from_file: tuple[str, ...] = ()  # the part of `tenants` read from `tenants_file`

    # ------------------------------------------------------------------------------------------------
    def tenant_of(self) -> dict[str, str]:
        """API key id -> its configured tenant, for the keys `tenants` names."""
        from fakcore.policy import key_id

        return {key_id(key): tenant for key, tenant in tenant_map(self.tenants, self.api_keys, "tenants").items()}

    @property
    def gateway_url(self) -> str:
        """Where a process on this machine reaches the gateway: a wildcard bind address means loopback."""
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::", "") else self.host
        return f"http://{f'[{host}]' if ':' in host else host}:{self.port}"

    @property
    def routed_models(self) -> tuple[str, ...]:
        return self.models or (self.model,)

    @property
    def kv_budget_bytes(self) -> int:
        return parse_bytes(self.kv_budget)

    @property
    def responses_max_bytes_int(self) -> int:
        return parse_bytes(self.responses_max_bytes)

    @property
    def nats_servers(self) -> list[str]:
        return [u.strip() for u in self.nats_url.split(",") if u.strip()]

    @property
    def nats_tls(self) -> bool:
        """Whether bus connections are TLS: a CA or a client certificate configured, or a tls:// URL."""
        return bool(self.nats_tls_ca or self.nats_tls_cert) or any(u.startswith("tls://") for u in self.nats_servers)

    def replace(self, **changes: Any) -> Settings:
        return msgspec.structs.replace(self, **changes)

    def to_env(self) -> dict[str, str]:
        """This configuration as FAK_* variables, for a child process (in its environment: never on its
        command line). Keys read from a keys file stay out: the child gets the file's path and reads it."""
        env = {}
        for field in setting_fields():
            value = getattr(self, field.name)
            if field.name in KEYS_FILES:
                from_file = getattr(self, f"_{field.name}_from_file")
                value = tuple(k for k in value if k not in from_file)
            env[ENV_PREFIX + field.name.upper()] = ",".join(value) if isinstance(value, tuple) else str(value)
        return env

    def __repr__(self) -> str:  # secrets masked: a Settings in a log line or a traceback shows no key
        shown = (f"{f.name}={'***' if f.name in SECRETS and getattr(self, f.name) else repr(getattr(self, f.name))}"
                 for f in setting_fields())
        return f"Settings({', '.join(shown)})"

    @classmethod
    def load(cls, env: dict[str, str] | None = None, args: argparse.Namespace | None = None, **overrides: Any) -> Settings:
        """Defaults, then `env` (default os.environ), then parsed CLI flags, then explicit overrides; then
        the keys files. Anything wrong raises SettingsError with one line naming where it came from."""
        env = os.environ if env is None else env
        fields = {f.name: f for f in setting_fields()}
        _refuse_unknown(env, fields)
        raw: dict[str, Any] = {}
        where: dict[str, str] = {}  # setting -> the variable or flag its value came from, for errors
        for name, field in fields.items():
            key = ENV_PREFIX + name.upper()
            if key in env:
                where[name] = key
                raw[name] = _parse(field, env[key], f"{key}={env[key]}")
        if args is not None:
            for name, field in fields.items():
                value = getattr(args, name, None)
                if value is not None:
                    flag = "--" + name.replace("_", "-")
                    where[name] = flag
                    raw[name] = _parse(field, value, f"{flag}={value}")
        for name, value in overrides.items():
            if name not in fields:
                raise SettingsError(f"{name}: no such setting{_did_you_mean(name, fields)}")
            where[name] = name
            raw[name] = _parse(fields[name], value, f"{name}={value}")
        _check_tls_files(raw, where)
        if raw.get("sampling"):
            sampling_defaults(raw["sampling"], where["sampling"])
        for name in KEYS_FILES:
            path = raw.get(f"{name}_file", "")
            if path:
                from_file = read_keys_file(path, where[f"{name}_file"], "entry" if name == "tenants" else "key")
                raw[f"_{name}_from_file"] = from_file
                raw[name] = tuple(dict.fromkeys((*from_file, *raw.get(name, ()))))  # file first: to_env round-trips
        if raw.get("tenants"):
            files = f"{where['tenants_file']}={raw['tenants_file']}" if raw.get("tenants_file") else ""
            if files:  # its entries numbered as in the file
                tenant_map(raw["_tenants_from_file"], raw.get("api_keys", ()), files)
            given = " + ".join(filter(None, (files, where.get("tenants", ""))))  # both: numbered file first
            tenant_map(raw["tenants"], raw.get("api_keys", ()), given)
        try:
            return msgspec.convert(raw, cls, strict=False)
        except msgspec.ValidationError as exc:
            raise SettingsError(f"invalid setting: {exc}") from exc


class SettingsError(ValueError):
    pass


SAMPLING_KNOBS = {"temperature": (float, 0.0, 100.0), "top_p": (float, 0.0, 1.0), "top_k": (int, 0, 2**31 - 1)}


def sampling_defaults(text: str, where: str = "sampling") -> dict[str, float | int]:
    """`temperature=0.2,top_p=0.9` -> {"temperature": 0.2, "top_p": 0.9}; anything else is a SettingsError."""
    out: dict[str, float | int] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, eq, value = (s.strip() for s in item.partition("="))
        if name not in SAMPLING_KNOBS or not eq:
            raise SettingsError(f"{where}: {item!r} is not knob=value with a knob of {', '.join(SAMPLING_KNOBS)}"
                                f"{_did_you_mean(name, SAMPLING_KNOBS)}")
        kind, lo, hi = SAMPLING_KNOBS[name]
        try:
            number = kind(value)
        except ValueError:
            raise SettingsError(f"{where}: {name}={value!r} is not {'an integer' if kind is int else 'a number'}") from None
        if not (math.isfinite(number) and lo <= number <= hi):
            raise SettingsError(f"{where}: {name}={value} is outside {lo:g}..{hi:g}")
        out[name] = number
    return out


def setting_fields() -> tuple[msgspec.structs.FieldInfo, ...]:
    """The fields of Settings that are settings (the `_` ones are filled by `load`)."""
    return tuple(f for f in msgspec.structs.fields(Settings) if not f.name.startswith("_"))


def describe() -> list[tuple[str, str, str, str]]:
    """(flag, env var, default, description) for every setting: the CLI help and the README table."""
    rows = []
    for field in setting_fields():
        meta = next((a for a in get_args(field.type)[1:] if isinstance(a, msgspec.Meta)), None)
        default = field.default
        shown = ",".join(default) if isinstance(default, tuple) else str(default)
        rows.append((f"--{field.name.replace('_', '-')}", ENV_PREFIX + field.name.upper(), shown, meta.description if meta else ""))
    return rows


def add_arguments(parser: argparse.ArgumentParser, only: set[str] | None = None) -> None:
    """One `--flag` per setting (all as text; `Settings.load` converts). Defaults stay None = not given."""
    for field in setting_fields():
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
    try:
        size = float(num) if unit in units else math.nan
    except ValueError:
        size = math.nan
    if not (size >= 0 and math.isfinite(size)):
        raise SettingsError(f"cannot read {text!r} as a size (examples: 0, 4096, 512MiB, 2GiB)")
    return int(size * units[unit])


def read_keys_file(path: str, where: str, what: str = "key") -> tuple[str, ...]:
    """The keys (or `tenant=key` entries) in a keys file: one a line; blank lines and lines starting with # are skipped."""
    try:
        lines = Path(path).expanduser().read_text().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise SettingsError(f"{where}={path}: cannot read the keys file ({exc.strerror or exc})") from exc
    keys = tuple(dict.fromkeys(s for s in (line.strip() for line in lines) if s and not s.startswith("#")))
    if not keys:
        raise SettingsError(f"{where}={path}: the keys file holds no {what}")
    return keys


TENANT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


def tenant_map(entries: tuple[str, ...], api_keys: tuple[str, ...], where: str) -> dict[str, str]:
    """`tenant=key` entries -> {key: tenant}; a malformed entry, a key that is none of `api_keys` or one
    in two tenants is a SettingsError naming the entry by its number and tenant, never the key."""
    out: dict[str, str] = {}
    for n, entry in enumerate(entries, 1):
        tenant, eq, key = (part.strip() for part in entry.partition("="))
        if not eq or not key or not TENANT_NAME.fullmatch(tenant):
            raise SettingsError(f"{where}: entry {n} is not tenant=key with a tenant of letters, digits, _ . - "
                                f"(at most 64)")
        if key not in api_keys:
            raise SettingsError(f"{where}: entry {n} (tenant {tenant}): the key is none of the api_keys")
        if out.get(key, tenant) != tenant:
            raise SettingsError(f"{where}: entry {n}: the key is in tenants {out[key]} and {tenant}")
        out[key] = tenant
    return out


def _check_tls_files(raw: dict[str, Any], where: dict[str, str]) -> None:
    """Every TLS file given exists and reads; a certificate comes with its key (and a key with its
    certificate). What the files hold is checked where they are used (bus.tls_context, nats-server)."""
    for name in TLS_FILES:
        path = raw.get(name, "")
        if path:
            try:
                with open(Path(path).expanduser(), "rb") as f:
                    f.read(1)
            except OSError as exc:
                raise SettingsError(f"{where[name]}={path}: cannot read the file ({exc.strerror or exc})") from exc
    for cert, key in TLS_PAIRS:
        if bool(raw.get(cert)) != bool(raw.get(key)):
            given, missing = (cert, key) if raw.get(cert) else (key, cert)
            raise SettingsError(f"{where[given]}={raw[given]}: {ENV_PREFIX}{missing.upper()} is not set "
                                "(a certificate and its key go together)")


# -- reading values ------------------------------------------------------------------------------------
SIZES = frozenset({"kv_budget", "responses_max_bytes"})  # text settings that must read as a size (parse_bytes)
RANGES = {"stream_replicas": (1, 5),  # whole-number settings with bounds (JetStream keeps 1 to 5 replicas)
          "state_checkpoint_every": (1, 1 << 20)}
TLS_FILES = ("nats_tls_ca", "nats_tls_cert", "nats_tls_key", "nats_tls_server_cert", "nats_tls_server_key")
TLS_PAIRS = (("nats_tls_cert", "nats_tls_key"), ("nats_tls_server_cert", "nats_tls_server_key"))


def _parse(field: msgspec.structs.FieldInfo, value: Any, where: str) -> Any:
    """`value` (text from a variable or flag, or a Python value) as the field's type, or SettingsError."""
    base = get_args(field.type)[0] if get_origin(field.type) is Annotated else field.type
    text = value.strip() if isinstance(value, str) else None
    if field.name in SECRETS:
        where = where.split("=", 1)[0]  # never a key in an error
    if get_origin(base) is Literal:
        choices = get_args(base)
        value = value if text is None else text
        if value not in choices:
            raise SettingsError(f"{where}: expected one of {', '.join(choices)}{_did_you_mean(value, choices)}")
        return value
    elif base is bool and text is not None:
        if text.lower() not in BOOLEANS:
            raise SettingsError(f"{where}: expected one of {', '.join(BOOLEANS)}{_did_you_mean(text, BOOLEANS)}")
        return BOOLEANS[text.lower()]
    elif base is int and (text is not None or field.name in RANGES):
        try:
            number = int(text) if text is not None else value
        except ValueError:
            raise SettingsError(f"{where}: expected a whole number") from None
        low, high = RANGES.get(field.name, (-math.inf, math.inf))
        if isinstance(number, int) and not low <= number <= high:
            raise SettingsError(f"{where}: expected a whole number from {low} to {high}")
        return number
    elif base is float and text is not None:
        try:
            number = float(text)
        except ValueError:
            number = math.nan
        if not math.isfinite(number):
            raise SettingsError(f"{where}: expected a number")
        return number
    elif get_origin(base) is tuple and text is not None:
        return tuple(v.strip() for v in text.split(",") if v.strip())
    if field.name in SIZES:
        try:
            parse_bytes(value)
        except SettingsError:
            raise SettingsError(f"{where}: expected a size (examples: 0, 4096, 512MiB, 2GiB)") from None
    return value


def _refuse_unknown(env: Any, fields: dict[str, Any]) -> None:
    """A FAK_* variable that is no setting (and none of NOT_SETTINGS) is a misspelling: refuse it, by name."""
    known = {ENV_PREFIX + name.upper() for name in fields}
    for key in sorted(env):
        if key.startswith(ENV_PREFIX) and key not in known and key not in NOT_SETTINGS \
                and not key.startswith(NOT_SETTINGS_PREFIXES):
            hint = _did_you_mean(key, known) or " (the settings are in README.md, Configuration)"
            raise SettingsError(f"{key}: no such setting{hint}")  # the value is not shown: it may be a key


def _did_you_mean(value: Any, choices: Any) -> str:
    """' (did you mean X?)' for the closest choice, case aside; '' when none is close."""
    by_lower = {str(c).lower(): str(c) for c in choices}
    close = difflib.get_close_matches(str(value).lower(), list(by_lower), n=1)
    return f" (did you mean {by_lower[close[0]]}?)" if close else ""
