"""The whole bus protocol: every message fak processes exchange, and every subject they use.

Messages are msgspec Structs encoded as msgpack. Each is tagged with its class name (field `t`) and carries
the schema version (field `v`), so one decoder per subject reads any message of its union and a reader can
tell an old peer from a new one. Evolution rules (msgspec's): new fields only at the end and always with a
default; never re-purpose a field; unknown fields are ignored by older readers.

Subjects are versioned (`fak.v1.…`) and built only by the functions of `subjects` below.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from typing import Any, Literal

import msgspec

SCHEMA_VERSION = 1


# Every enum-like field is a Literal: a peer that sends another value is refused at decode, not guessed at.
Role = Literal["system", "user", "assistant", "tool"]
ToolChoice = Literal["auto", "none", "required", "function"]
FinishReason = Literal["stop", "length", "tool_calls"]
ErrorCodeName = Literal["overloaded", "invalid_request", "context_length_exceeded", "unsupported", "no_worker",
                        "timeout", "internal"]
EngineKind = Literal["fak-cpu", "fak-cuda"]
Verdict = Literal["clean", "quarantine"]
Stage = Literal["", "policy", "inline", "model", "cache"]
ContentKind = Literal["tool_result", "tool_description"]  # what a screened text is (an MCP tool's description: tool poisoning)
AuditKind = Literal["call", "result"]
Outcome = Literal["allow", "deny", "clean", "quarantine"]
Replace = Literal["whole", "spans"]  # how a quarantine is applied: the whole tool result, or only its offending spans
EvictMode = Literal["exact", "shift"]
EvictCause = Literal["verdict", "release", "command"]
EvictCheck = Literal["fresh-prefill", "structure"]


class Message(msgspec.Struct, tag_field="t", tag=True, kw_only=True):
    v: int = SCHEMA_VERSION


# ---------------------------------------------------------------------------------------------------------
# Conversation content, as the engine sees it (the gateway translates every wire into this)
# ---------------------------------------------------------------------------------------------------------


class ToolCall(msgspec.Struct, kw_only=True):
    id: str
    name: str
    arguments: str = "{}"  # JSON text, exactly as the model produced it


class ChatMessage(msgspec.Struct, kw_only=True, omit_defaults=True):
    role: Role
    content: str = ""
    tool_calls: list[ToolCall] = []
    tool_call_id: str = ""  # role == tool: which call this answers
    name: str = ""  # role == tool: the tool's name
    block: str = ""  # content hash naming this block on the bus (kv spans, quarantine verdicts)


def block_id(content: str) -> str:
    """The content hash naming a block (a tool result, a message) everywhere on the bus.

    Equal content, equal id: a quarantined tool result is recognised when it comes back in a later request,
    whatever the session, without screening it again."""
    return "b" + hashlib.sha256(content.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def receipt_id(worker: str, sequence: str, digest_before: str, digest_after: str) -> str:
    """The id an eviction receipt (KvEvicted) goes by in headers, the audit view and the console: a hash of who
    evicted from which sequence and the cache's digests before and after."""
    return "r" + hashlib.sha256(f"{worker}\0{sequence}\0{digest_before}\0{digest_after}".encode()).hexdigest()[:20]


CUSTOM_TOOL_INPUT = "input"  # the one (string) argument of a custom tool on the bus


class ToolSpec(msgspec.Struct, kw_only=True, omit_defaults=True):
    name: str
    description: str = ""
    parameters: dict[str, Any] = {}  # JSON Schema of the arguments
    # custom: a freeform tool (the Responses API's, e.g. Codex's apply_patch). On the bus it is a function
    # with one string argument, `input`; `format` is the client's ({"type": "grammar", "syntax": "lark" |
    # "regex", "definition": …} or {"type": "text"}).
    kind: Literal["function", "custom"] = "function"
    format: dict[str, Any] = {}


class Sampling(msgspec.Struct, kw_only=True, omit_defaults=True):
    max_tokens: int = 256
    # None: the client left it to the model. An engine worker uses the served model's defaults (settings, else
    # the model's own recommendation, else 1 / 1 / off); an upstream is sent nothing and applies its own.
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None  # 0: off
    seed: int | None = None
    stop: list[str] = []
    logprobs: bool = False  # report each generated token's log-probability (TokenChunk.logprobs)
    top_logprobs: int = 0  # with logprobs: the most likely alternatives to report per token, 0..20


class Usage(msgspec.Struct, kw_only=True):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0  # prompt tokens served from a reused KV prefix


class Receipt(msgspec.Struct, kw_only=True):
    """Names exactly what produced an answer."""

    engine: EngineKind
    worker: str
    backend: str  # numeric path: "reference", "numba", "cuda"
    device: str
    model: str
    weights_digest: str  # sha256 over the loaded tensors' bytes
    incarnation: str = ""  # this run of the worker process (a restarted worker keeps its name, not this)


# ---------------------------------------------------------------------------------------------------------
# Engine: generation and token counting
# ---------------------------------------------------------------------------------------------------------


class GenerateRequest(Message, kw_only=True):
    request_id: str
    model: str
    messages: list[ChatMessage] = []
    prompt: str | None = None  # raw prompt (/v1/completions): no chat template
    tools: list[ToolSpec] = []
    tool_choice: ToolChoice = "auto"  # function: then tool_choice_name
    tool_choice_name: str = ""
    response_schema: dict[str, Any] | None = None  # JSON Schema the output must match
    sampling: Sampling = msgspec.field(default_factory=Sampling)
    session: str = ""  # optional session pinning (x-fak-session)
    hold: bool = False  # verdict barrier: the worker may prefill, but samples nothing before a Release
    tenant: str = ""  # whose cached prefixes this request may reuse: the gateway's tenant id (API key id, cache salt)
    # retired, never to be reused with another meaning: deadline_ms (never implemented; older peers may still send it)


class Release(Message, kw_only=True):
    """Broadcast on subjects.RELEASE: the verdicts of a held request are in. The worker holding it evicts
    the quarantined blocks' spans from the request's cache (exact mode) and starts decoding."""

    request_id: str
    quarantined: list[str] = []  # block ids whose spans must go before the first token is sampled
    sig: bytes = b""  # HMAC-SHA256 by its sender (encode_signed); checked where a key is configured


class Accepted(Message, kw_only=True):
    """First reply of a worker that took a generate request: who has it, and what it will run on."""

    request_id: str
    receipt: Receipt
    queued: int = 0  # requests ahead of this one
    prompt_tokens: int = 0
    held: bool = False  # the request asked for `hold` and this worker will sample nothing before its Release


class TokenLogprob(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A token and its log-probability: the log-softmax of the model's raw logits at its position (before
    temperature, top-k/top-p or a grammar), as OpenAI reports it."""

    id: int
    text: str  # the token's bytes read as UTF-8 (U+FFFD where they stop inside a character)
    logprob: float  # natural log; -9999.0 for a probability of 0, as OpenAI (JSON has no -inf)
    raw: bytes = b""  # the bytes the token stands for
    top: list[TokenLogprob] = []  # the most likely tokens at this position, most likely first (Sampling.top_logprobs)


class TokenChunk(Message, kw_only=True):
    request_id: str
    seq: int  # 0, 1, 2 … : order check for the consumer
    text: str  # decoded text delta (may be empty while a UTF-8 sequence is incomplete)
    token_ids: list[int] = []
    logprobs: list[TokenLogprob] = []  # Sampling.logprobs: the tokens whose text is in this delta, in order


class GenerateDone(Message, kw_only=True):
    request_id: str
    seq: int
    finish_reason: FinishReason
    usage: Usage
    receipt: Receipt
    tool_calls: list[ToolCall] = []
    stop_sequence: str = ""  # the stop string that ended generation, if one did


class GenerateError(Message, kw_only=True):
    request_id: str
    code: ErrorCodeName  # see ErrorCode
    message: str


class ErrorCode:
    OVERLOADED = "overloaded"  # worker queue full: retry later (HTTP 429 / Anthropic 529, with retry-after)
    INVALID = "invalid_request"  # the request cannot be served as asked (HTTP 400)
    CONTEXT_LENGTH = "context_length_exceeded"  # prompt + max_tokens beyond the model's window (HTTP 400)
    UNSUPPORTED = "unsupported"  # a feature this model/engine does not have (HTTP 400)
    NO_WORKER = "no_worker"  # nobody serves the model (HTTP 503)
    TIMEOUT = "timeout"  # the engine went silent (HTTP 504)
    INTERNAL = "internal"  # a bug (HTTP 500)


class CancelRequest(Message, kw_only=True):
    """Broadcast: the client went away; whichever worker holds the request drops it."""

    request_id: str


class CountTokensRequest(Message, kw_only=True):
    model: str
    messages: list[ChatMessage] = []
    tools: list[ToolSpec] = []
    prompt: str | None = None


class CountTokensReply(Message, kw_only=True):
    input_tokens: int


class ProbeRequest(Message, kw_only=True):
    """Screening's probe (screening/probe.py): the residual stream after `layer` layers of `model` over `text`
    (each piece of at most PROBE_CHUNK tokens read from its own BOS), projected on `direction` token by
    token. Nothing is generated and no cache is kept."""

    request_id: str
    model: str
    text: str
    layer: int
    direction: list[float]  # (dim,) of the model
    weights_digest: str = ""  # the weights the direction was trained on: a worker with others refuses


class ProbeReply(Message, kw_only=True):
    request_id: str
    starts: list[int]  # each token's first character in the text (BOS left out)
    ends: list[int]  # and the character after its last
    values: list[float]  # each token's hidden state . direction, in the same order


EngineReply = Accepted | TokenChunk | GenerateDone | GenerateError
CountReply = CountTokensReply | GenerateError
ProbeResult = ProbeReply | GenerateError


class Announce(Message, kw_only=True):
    """Engine worker heartbeat: what it serves and how busy it is."""

    worker: str
    model: str
    engine: EngineKind
    backend: str
    device: str
    weights_digest: str
    context_length: int
    capacity: int  # sequences decoded together
    active: int  # sequences being decoded now
    queued: int  # requests waiting for a slot
    metrics_url: str = ""
    ts: float = 0.0
    queue_limit: int = 0  # requests it queues beyond `capacity` before refusing (overloaded)
    incarnation: str = ""  # this run of the worker process: a new value means the old one's streams are gone
    sampling: dict[str, float] = {}  # what a request's unset knobs become (FAK_SAMPLING, else the makers', else conservative)


class Heartbeat(Message, kw_only=True):
    """Liveness of a non-engine service (gateway, adjudicator, kvmmu)."""

    service: str
    instance: str
    ok: bool = True
    detail: str = ""
    metrics_url: str = ""
    ts: float = 0.0


# ---------------------------------------------------------------------------------------------------------
# Adjudication
# ---------------------------------------------------------------------------------------------------------


class AdjudicateCall(Message, kw_only=True):
    request_id: str
    tool: str
    arguments: str  # JSON text
    session: str = ""
    key_id: str = ""  # which API key's policy applies
    tainted: bool = False  # untrusted content (a tool result) is already in the session
    server: str | None = None  # a call through /mcp: the MCP server it goes to (for the audit record)


class CallVerdict(Message, kw_only=True):
    allow: bool
    rule: str  # id of the rule that decided ("default" when none matched)
    reason: str = ""
    sig: bytes = b""  # HMAC-SHA256 by its sender (encode_signed); checked where a key is configured


class AdjudicateResult(Message, kw_only=True):
    request_id: str
    tool: str
    content: str
    block: str  # content hash of the tool result
    session: str = ""
    key_id: str = ""
    kind: ContentKind = "tool_result"
    # the gateway already holds a quarantine of this block and asks again because this key's screening section
    # may judge it otherwise (an allowlist, flag mode, its own thresholds): a quarantine is not published again
    quarantined: bool = False
    server: str | None = None  # a text from /mcp (a tool's result or description): the MCP server that sent it


class TextSpan(msgspec.Struct, kw_only=True, omit_defaults=True):
    """Characters [start, end) of a screened text (Python string offsets, i.e. code points) that screening
    found offending. Not a KV span (`Span` is token positions in a cache)."""

    start: int
    end: int
    detector: str = ""  # the rule (or "model:…") that found it; "" = the verdict's detector
    reason: str = ""


class ResultVerdict(Message, kw_only=True):
    block: str
    verdict: Verdict
    detector: str = ""
    score: float = 0.0
    reason: str = ""
    stage: Stage = ""  # which screening stage decided (model: async, a later QuarantineVerdict may follow)
    sig: bytes = b""  # HMAC-SHA256 by its sender (encode_signed); checked where a key is configured
    spans: list[TextSpan] = []  # where in the content screening found it (a quarantine, or a flagged clean)
    replace: Replace = "whole"  # the key's policy: a quarantine replaces the whole result, or only `spans`
    # the key's screening section shaped this verdict: "screening.allow.tools.<glob>", "screening.allow.blocks",
    # "screening.mode" (flag), "screening.inline_threshold"… A gateway keeps such a clean verdict for that
    # policy only (or not at all), never for every key.
    rule: str = ""
    flagged: bool = False  # flag mode: screening would have quarantined (detector, score, spans say why); it passes


AdjudicatorReply = CallVerdict | ResultVerdict | GenerateError


class QuarantineVerdict(Message, kw_only=True):
    """Published once to JetStream; every gateway's context filter and the kvmmu consume it."""

    block: str
    detector: str
    score: float
    reason: str = ""
    session: str = ""
    request_id: str = ""
    ts: float = 0.0
    stage: Stage = ""  # "model" after an async second opinion: a late quarantine
    sig: bytes = b""  # HMAC-SHA256 by its sender (encode_signed); checked where a key is configured
    spans: list[TextSpan] = []  # the offending characters (a gateway whose key's policy says `spans` removes only these)


class AuditRecord(Message, kw_only=True):
    """One verdict, for the audit log (JetStream subjects.AUDIT, read back by the gateway's /v1/fak/audit).

    Call verdicts and screening verdicts are recorded by the adjudicator; verdicts the gateway answers from
    its cache (a block seen before) by the gateway, with stage "cache"."""

    kind: AuditKind
    outcome: Outcome
    request_id: str = ""
    session: str = ""
    key_id: str = ""
    tool: str = ""
    block: str = ""  # result: the tool result's block id
    arguments: str = ""  # call: the arguments as the model wrote them (truncated)
    rule: str = ""  # call: the policy rule that decided; result: the screening rule that shaped it (ResultVerdict.rule)
    detector: str = ""  # result: the detector that decided ("allowlist" when the policy exempts the result)
    score: float = 0.0
    reason: str = ""
    stage: Stage = ""
    latency_ms: float = 0.0
    source: str = ""  # the instance that decided
    ts: float = 0.0
    spans: list[TextSpan] = []  # result: the offending characters of the tool result
    window: str = ""  # result: the text around the first span (at most WINDOW_CHARS), what an operator reads first
    flagged: bool = False  # result, flag mode: `outcome` is what screening found; the content passed, nothing was published
    server: str | None = None  # a verdict on a tool of /mcp: its MCP server (tool names the tool as listed)


WINDOW_CHARS = 300  # AuditRecord.window's longest


# ---------------------------------------------------------------------------------------------------------
# KV memory management
# ---------------------------------------------------------------------------------------------------------


class Span(msgspec.Struct, kw_only=True):
    block: str  # content hash of the message / tool result occupying the range
    start: int  # first token position
    end: int  # one past the last token position


class KvSpans(Message, kw_only=True):
    """Engine -> kvmmu: the span map of one cached sequence on one worker."""

    worker: str
    sequence: str  # the worker's id for the cached sequence
    session: str = ""
    length: int = 0
    spans: list[Span] = []
    dropped: bool = False  # the sequence left the cache (LRU, finished session)


class KvStatsRequest(Message, kw_only=True):
    worker: str = ""  # empty: every worker the kvmmu knows


class KvWorkerStats(msgspec.Struct, kw_only=True):
    worker: str
    sequences: int
    tokens: int
    spans: int
    bytes: int = 0  # KV memory held by the worker's caches (allocated)
    budget: int = 0  # FAK_KV_BUDGET in bytes: idle sequences are dropped LRU-first above it
    active: int = 0  # sequences in use by a request now (never dropped)
    lookups: int = 0  # prefix look-ups (one per admitted request)
    hits: int = 0  # look-ups that reused a cached prefix
    cached_tokens: int = 0  # prompt tokens served from reused prefixes, in total
    evictions: int = 0  # span evictions done by this worker
    dropped: int = 0  # whole sequences dropped to stay under the budget
    maps: list[KvSpans] = []  # every cached sequence's span map (worker kv.stats only)


class KvStats(Message, kw_only=True):
    workers: list[KvWorkerStats] = []
    blocks: int = 0  # distinct content blocks mapped
    evictions: int = 0


class KvEvict(Message, kw_only=True):
    """kvmmu -> one worker (subjects.worker(w, "kv.evict"), request/reply): evict these blocks' spans from
    every sequence of the worker that holds them (cached, in flight or queued). Replied with KvEvictReply."""

    blocks: list[str]
    mode: EvictMode = "exact"  # exact: drop + recompute the suffix | shift: drop + re-rotate survivors' keys
    cause: EvictCause = "verdict"
    request_id: str = ""  # the verdict's (or held request's) request id, for the audit trail


class KvEvicted(Message, kw_only=True):
    """The receipt of one eviction from one cached sequence, on subjects.KV_EVICTED.

    Positions are the sequence's before the eviction. `digest_*` are sha256 over the committed keys and
    values of every layer (KVCache.digest). `check` says how the result was verified: "fresh-prefill" (the
    surviving tokens were prefilled into a scratch cache and compared), "structure" (token ids and span
    map only; FAK_KV_VERIFY off)."""

    worker: str
    sequence: str
    session: str = ""
    request_id: str = ""
    cause: EvictCause | Literal[""] = ""
    blocks: list[str] = []
    spans: list[Span] = []  # the ranges removed (in the sequence, before eviction)
    mode: EvictMode = "exact"
    tokens_before: int = 0  # cached tokens before
    tokens_after: int = 0  # cached tokens after
    tokens_recomputed: int = 0  # suffix tokens run through the model again (exact mode)
    digest_before: str = ""
    digest_after: str = ""
    check: EvictCheck = "structure"
    identical: bool = False  # the cache equals a fresh prefill of the surviving tokens bit for bit
    max_abs_dev: float = -1.0  # max |K - K_fresh|, |V - V_fresh| over every layer (-1: not measured)
    layer_dev: list[float] = []  # per layer, the same maximum
    attends_evicted: bool = False  # whether any position can still attend to an evicted one (never, by construction)
    backend: str = ""
    batch_invariant: bool = False  # the backend promises per-token results independent of batch shape
    seconds: float = 0.0  # eviction time (without the verification)
    note: str = ""
    ts: float = 0.0


class KvEvictReply(Message, kw_only=True):
    worker: str
    receipts: list[KvEvicted] = []


class KvSync(Message, kw_only=True):
    """kvmmu -> every worker (broadcast on subjects.KV_SYNC): publish all your span maps again (a kvmmu that
    just started knows nothing)."""

    reason: str = ""


KvmmuRequest = KvStatsRequest
KvmmuReply = KvStats | GenerateError


# ---------------------------------------------------------------------------------------------------------
# Subjects: built only here
# ---------------------------------------------------------------------------------------------------------

_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")  # "~" is the escape, so it is escaped too


def subject_token(name: str) -> str:
    """A model or worker name as one NATS subject token (no '.', '*', '>' or spaces)."""
    return _UNSAFE.sub(lambda m: "".join(f"~{b:02x}" for b in m.group().encode()), name) or "_"


class subjects:
    ANNOUNCE = "fak.v1.engine.announce"
    HEALTH = "fak.v1.health.>"
    ADJUDICATE_CALL = "fak.v1.adjudicate.call"
    ADJUDICATE_RESULT = "fak.v1.adjudicate.result"
    QUARANTINE = "fak.v1.verdict.quarantine"
    KV_SPANS = "fak.v1.kv.spans"
    KV_EVICTED = "fak.v1.kv.evicted"
    KV_STATS = "fak.v1.kv.stats"
    CANCEL = "fak.v1.engine.cancel"
    RELEASE = "fak.v1.engine.release"
    KV_SYNC = "fak.v1.kv.sync"
    VERDICT_STREAM = "FAK_VERDICTS"  # JetStream stream holding fak.v1.verdict.>
    AUDIT = "fak.v1.audit.verdict"  # AuditRecord, on the AUDIT_STREAM
    AUDIT_STREAM = "FAK_AUDIT"  # JetStream stream holding fak.v1.audit.>
    RESPONSES = "fak.v1.responses.>"  # stored Responses-API responses, one subject per response (and chunk)
    RESPONSES_STREAM = "FAK_RESPONSES"  # JetStream stream of them: the last value per subject, like a KV bucket

    @staticmethod
    def generate(model: str) -> str:
        return f"fak.v1.engine.generate.{subject_token(model)}"

    @staticmethod
    def judge(model: str) -> str:
        """Screening's questions to a model (screening/judge.py): a one-token, logprobs-only GenerateRequest,
        answered by the model's workers in their queue group; nothing else is served here."""
        return f"fak.v1.engine.judge.{subject_token(model)}"

    @staticmethod
    def probe(model: str) -> str:
        """Screening's probe of a model's hidden states (a ProbeRequest), answered in its queue group."""
        return f"fak.v1.engine.probe.{subject_token(model)}"

    @staticmethod
    def count_tokens(model: str) -> str:
        return f"fak.v1.engine.count.{subject_token(model)}"

    @staticmethod
    def engine_queue(model: str) -> str:
        return f"engine.{subject_token(model)}"

    @staticmethod
    def worker(worker: str, verb: str) -> str:
        """Session-affine and control subjects of one worker: generate, kv.evict, kv.stats."""
        return f"fak.v1.engine.{subject_token(worker)}.{verb}"

    @staticmethod
    def health(service: str) -> str:
        return f"fak.v1.health.{subject_token(service)}"


ADJUDICATOR_QUEUE = "adjudicator"
KVMMU_QUEUE = "kvmmu"
KVMMU_DURABLE = "kvmmu"  # the kvmmu's durable JetStream consumer of quarantine verdicts (shared by replicas)


# ---------------------------------------------------------------------------------------------------------
# Codec: one encoder, one decoder per union, built once
# ---------------------------------------------------------------------------------------------------------

_encoder = msgspec.msgpack.Encoder()


def encode(msg: msgspec.Struct) -> bytes:
    return _encoder.encode(msg)


# Signatures: the messages that decide safety (verdicts, Release) carry `sig`, an HMAC-SHA256 over
#   their encoding without `sig` (read back from the bytes, so fields a newer sender added are covered)
#   + the subject they are sent on + for a reply, the sha256 of the request it answers,
# so a verdict is bound to its request and cannot be replayed as the answer to another one. Signed:
# Release, CallVerdict, ResultVerdict, QuarantineVerdict (their `sig` field).


def _mac(key: str, data: bytes, subject: str, request: bytes) -> bytes:
    fields = msgspec.msgpack.decode(data)
    if not isinstance(fields, dict):
        raise msgspec.DecodeError("not a message")
    fields.pop("sig", None)
    signed = b"fak.v1.sig\0" + subject.encode() + b"\0" + hashlib.sha256(request).digest() + _encoder.encode(fields)
    return hmac.new(key.encode(), signed, hashlib.sha256).digest()


def encode_signed(msg: msgspec.Struct, key: str, subject: str, request: bytes = b"") -> bytes:
    """`msg` encoded and, with a key, signed for `subject` (and the request it answers, for a reply)."""
    if not key:
        return encode(msg)
    unsigned = encode(msgspec.structs.replace(msg, sig=b""))
    return encode(msgspec.structs.replace(msg, sig=_mac(key, unsigned, subject, request)))


def signed_ok(data: bytes, key: str, subject: str, request: bytes = b"") -> bool:
    """Whether `data` carries its sender's signature for `subject` (and `request`). Without a key: True."""
    if not key:
        return True
    try:
        sig = msgspec.msgpack.decode(data).get("sig", b"")
        return isinstance(sig, bytes) and len(sig) == 32 and hmac.compare_digest(sig, _mac(key, data, subject, request))
    except (msgspec.DecodeError, AttributeError):
        return False


class Decoders:
    engine_request = msgspec.msgpack.Decoder(GenerateRequest | CountTokensRequest)
    engine_reply = msgspec.msgpack.Decoder(EngineReply)
    count_reply = msgspec.msgpack.Decoder(CountReply)
    probe_request = msgspec.msgpack.Decoder(ProbeRequest)
    probe_reply = msgspec.msgpack.Decoder(ProbeResult)
    cancel = msgspec.msgpack.Decoder(CancelRequest)
    release = msgspec.msgpack.Decoder(Release)
    announce = msgspec.msgpack.Decoder(Announce)
    heartbeat = msgspec.msgpack.Decoder(Heartbeat)
    adjudicate = msgspec.msgpack.Decoder(AdjudicateCall | AdjudicateResult)
    adjudicator_reply = msgspec.msgpack.Decoder(AdjudicatorReply)
    quarantine = msgspec.msgpack.Decoder(QuarantineVerdict)
    kv_spans = msgspec.msgpack.Decoder(KvSpans)
    kvmmu_request = msgspec.msgpack.Decoder(KvmmuRequest)
    kvmmu_reply = msgspec.msgpack.Decoder(KvmmuReply)
    kv_evict = msgspec.msgpack.Decoder(KvEvict)
    kv_evict_reply = msgspec.msgpack.Decoder(KvEvictReply | GenerateError)
    kv_evicted = msgspec.msgpack.Decoder(KvEvicted)
    kv_sync = msgspec.msgpack.Decoder(KvSync)
    audit = msgspec.msgpack.Decoder(AuditRecord)
