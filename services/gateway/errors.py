"""Errors in each wire's own shape.

A handler raises `WireError(kind, message)`; the app renders it for the wire the request came in on:
OpenAI `{"error": {"message", "type", "param", "code"}}`, Anthropic `{"type": "error", "error": {"type",
"message"}}`, Google (the Gemini wire) `{"error": {"code", "message", "status"}}`, with the status that wire
uses for that kind. A refusal for load carries `retry_after`
(seconds), sent as the `retry-after` header, which both wires' SDKs honour when they retry.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from fakcore.protocol import ErrorCode

# kind -> (HTTP status, OpenAI error type, Anthropic error type, Anthropic status)
KINDS = {
    "invalid_request": (400, "invalid_request_error", "invalid_request_error", 400),
    "authentication": (401, "authentication_error", "authentication_error", 401),
    "permission": (403, "permission_error", "permission_error", 403),
    "not_found": (404, "invalid_request_error", "not_found_error", 404),
    "too_large": (413, "invalid_request_error", "request_too_large", 413),
    "rate_limit": (429, "rate_limit_error", "rate_limit_error", 429),
    "internal": (500, "server_error", "api_error", 500),
    "unavailable": (503, "service_unavailable", "overloaded_error", 503),
    # every worker is full: 429 is what OpenAI sends when "the engine is currently overloaded" (type
    # server_error) and what its SDKs retry on; Anthropic's own overload status is 529
    "overloaded": (429, "server_error", "overloaded_error", 529),
    "timeout": (504, "timeout", "api_error", 504),
    "bad_gateway": (502, "server_error", "api_error", 502),  # an upstream that cannot be reached or broke its reply
    "not_implemented": (501, "server_error", "api_error", 501),
}

# kind -> (HTTP status, Google's canonical status) on the Gemini wire: an overloaded model is Gemini's 503
# UNAVAILABLE ("The model is overloaded"), which its SDKs and Gemini CLI retry
GOOGLE = {
    "invalid_request": (400, "INVALID_ARGUMENT"),
    "authentication": (401, "UNAUTHENTICATED"),
    "permission": (403, "PERMISSION_DENIED"),
    "not_found": (404, "NOT_FOUND"),
    "too_large": (413, "INVALID_ARGUMENT"),
    "rate_limit": (429, "RESOURCE_EXHAUSTED"),
    "internal": (500, "INTERNAL"),
    "unavailable": (503, "UNAVAILABLE"),
    "overloaded": (503, "UNAVAILABLE"),
    "timeout": (504, "DEADLINE_EXCEEDED"),
    "bad_gateway": (502, "UNAVAILABLE"),
    "not_implemented": (501, "UNIMPLEMENTED"),
}

RETRY_AFTER_S = 1.0  # what a refusal for load asks clients to wait: about one announce of the workers' load

# engine error codes -> kinds
ENGINE_KINDS = {
    ErrorCode.INVALID: "invalid_request",
    ErrorCode.CONTEXT_LENGTH: "invalid_request",
    ErrorCode.UNSUPPORTED: "invalid_request",
    ErrorCode.OVERLOADED: "overloaded",
    ErrorCode.NO_WORKER: "unavailable",
    ErrorCode.TIMEOUT: "timeout",
    ErrorCode.INTERNAL: "internal",
}


@dataclass
class WireError(Exception):
    kind: str
    message: str
    param: str | None = None
    code: str | None = None
    retry_after: float | None = None  # seconds, for the retry-after header
    status: int | None = None  # an upstream's own status, kept on both wires (else the kind's)

    def __post_init__(self) -> None:
        super().__init__(self.message)

    @classmethod
    def from_engine(cls, code: str, message: str) -> WireError:
        kind = ENGINE_KINDS.get(code, "internal")
        return cls(kind, message, code=code, retry_after=RETRY_AFTER_S if kind == "overloaded" else None)

    def openai(self) -> tuple[int, dict]:
        status, etype, _, _ = KINDS[self.kind]
        status = self.status or status
        code = self.code or ("model_not_found" if self.kind == "not_found" else None)
        return status, {"error": {"message": self.message, "type": etype, "param": self.param, "code": code}}

    def anthropic(self) -> tuple[int, dict]:
        _, _, etype, status = KINDS[self.kind]
        status = self.status or status
        return status, {"type": "error", "error": {"type": etype, "message": self.message}}

    def google(self) -> tuple[int, dict]:
        status, name = GOOGLE[self.kind]
        status = self.status or status
        return status, {"error": {"code": status, "message": self.message, "status": name}}

    def render(self, wire: str) -> tuple[int, dict]:
        if wire == "gemini":
            return self.google()
        return self.anthropic() if wire == "anthropic" else self.openai()


GOOGLE_HEADERS = ("x-goog-api-key", "x-goog-api-client")  # what google-genai and Gemini CLI send, and no other SDK


def google_client(headers: Mapping[str, str], query: Mapping[str, str]) -> bool:
    """A Google client on a path other wires share (GET /v1/models: the google-genai SDK's default version)."""
    return any(h in headers for h in GOOGLE_HEADERS) or "key" in query


def wire_of(path: str, headers: Mapping[str, str] | None = None, query: Mapping[str, str] | None = None) -> str:
    """Which wire's error shape a request speaks: Gemini's under /v1beta/, for /v1/models/{model}:{action},
    and for a Google client's /v1/models; Anthropic's under /v1/messages; else OpenAI's."""
    if path.startswith("/v1beta/") or path == "/v1beta" or (path.startswith("/v1/models/") and ":" in path):
        return "gemini"
    if path.startswith("/v1/models") and google_client(headers or {}, query or {}):
        return "gemini"
    return "anthropic" if path.startswith("/v1/messages") else "openai"
