"""NATS helpers shared by every service: connecting, streamed request/reply, JetStream set-up.

Connections reconnect forever (a service outlives a nats-server restart) and are drained on shutdown so
that no in-flight message is lost. A streamed request fails fast when nobody is subscribed (NATS answers
"503 no responders" at once) and never waits longer than its timeouts.

A connection with a user name (FAK_NATS_USER: one per service, permissions.py) puts its reply inboxes under
`_INBOX.<user>`, the only inboxes that user may subscribe to, so no service reads another's replies.

TLS (FAK_NATS_TLS_CA, a client certificate, or a tls:// URL): the client opens every connection with the
TLS handshake, before the server has said a word (nats-py's tls_handshake_first; the server's `tls` block
needs `handshake_first`), and verifies the server's certificate and name. nats-py's usual upgrade happens
only when the server's plaintext INFO asks for it, so a plaintext server, or anyone in between, could keep
the connection, the password with it, in the clear; a TLS-first client has nothing to fall back to.

Every stream fak creates gets FAK_STREAM_REPLICAS replicas: the connection remembers the settings it was
made with, so `ensure_streams(nc)` needs nothing more from its caller.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import ssl
import weakref
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import msgspec
import nats
from nats.aio.client import Client as NATS
from nats.js.api import RetentionPolicy, StorageType, StreamConfig

from fakcore.permissions import inbox_prefix
from fakcore.protocol import subjects
from fakcore.settings import Settings

log = logging.getLogger("fak.bus")
_replicas: weakref.WeakKeyDictionary[NATS, int] = weakref.WeakKeyDictionary()  # connection -> FAK_STREAM_REPLICAS


class NoResponders(Exception):
    """Nobody is subscribed to the subject (no worker for the model, service down)."""


class BusTimeout(Exception):
    """A reply did not come within its timeout; `first` tells whether it was the first reply."""

    def __init__(self, message: str, first: bool = True):
        super().__init__(message)
        self.first = first


class Rejected(Exception):
    """A reply failed its check (a verdict without its sender's signature): treated as no reply at all."""


class PeerLost(Exception):
    """The peer answering a streamed request is gone (the caller's `lost()` said why, in the message)."""


class TooLarge(Exception):
    """The message is larger than the server's max_payload: it cannot be sent as one NATS message."""

    def __init__(self, subject: str, size: int, limit: int):
        super().__init__(f"a {size}-byte message on {subject} exceeds the bus's {limit}-byte message limit")
        self.size, self.limit = size, limit


def _check_size(nc: NATS, subject: str, payload: bytes) -> None:
    if len(payload) > nc.max_payload:
        raise TooLarge(subject, len(payload), nc.max_payload)


def tls_context(settings: Settings) -> ssl.SSLContext | None:
    """The client side of the bus's TLS: verify the server with FAK_NATS_TLS_CA (else the system's CAs),
    present FAK_NATS_TLS_CERT where set. None when TLS is off. A file that does not hold what it should is a
    ConnectionError naming its setting."""
    if not settings.nats_tls:
        return None
    ca = settings.nats_tls_ca
    try:
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=str(Path(ca).expanduser()) if ca else None)
    except (OSError, ssl.SSLError) as exc:
        raise ConnectionError(f"FAK_NATS_TLS_CA={ca}: not a CA bundle in PEM ({exc})") from exc
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if settings.nats_tls_cert:
        try:
            context.load_cert_chain(Path(settings.nats_tls_cert).expanduser(), Path(settings.nats_tls_key).expanduser())
        except (OSError, ssl.SSLError) as exc:
            raise ConnectionError(f"FAK_NATS_TLS_CERT={settings.nats_tls_cert}, FAK_NATS_TLS_KEY={settings.nats_tls_key}: "
                                  f"not a certificate and its key in PEM ({exc})") from exc
    return context


async def connect(settings: Settings, name: str, *, connect_timeout: float = 5.0) -> NATS:
    """Connect with reconnect-forever and logging callbacks; raise ConnectionError (with the last error the
    client saw: a refused certificate, bad credentials) if the first connect fails."""
    if not settings.nats_servers:
        raise ConnectionError("no NATS server configured: set FAK_NATS_URL (or run `fak up`, which starts one)")
    last_error: list[Exception] = []

    async def on_error(exc: Exception) -> None:
        last_error[:] = [exc]
        log.warning("%s: nats error: %s", name, exc)

    async def on_disconnect() -> None:
        log.warning("%s: disconnected from nats", name)

    async def on_reconnect() -> None:
        log.info("%s: reconnected to nats", name)

    options: dict[str, Any] = dict(
        servers=settings.nats_servers,
        name=name,
        connect_timeout=max(1, int(connect_timeout)),
        allow_reconnect=True,
        max_reconnect_attempts=-1,
        reconnect_time_wait=0.5,
        error_cb=on_error,
        disconnected_cb=on_disconnect,
        reconnected_cb=on_reconnect,
        pending_size=64 * 1024 * 1024,
    )
    if settings.nats_creds:
        options["user_credentials"] = settings.nats_creds
    elif settings.nats_user:
        options["user"] = settings.nats_user
        options["password"] = settings.nats_password
        options["inbox_prefix"] = inbox_prefix(settings.nats_user)
    tls = tls_context(settings)
    if tls is not None:
        options.update(tls=tls, tls_handshake_first=True)  # TLS before anything else: no plaintext fallback
    # The first connection must succeed within connect_timeout: a service should not start half-alive.
    try:
        nc = await asyncio.wait_for(nats.connect(**options), timeout=connect_timeout + 1)
    except (TimeoutError, OSError, nats.errors.Error) as exc:
        cause = last_error[0] if last_error else exc
        raise ConnectionError(f"{name}: cannot connect to NATS at {settings.nats_url}: {_explain(cause, tls is not None)}") from exc
    _replicas[nc] = settings.stream_replicas
    return nc


def _explain(exc: Exception, tls: bool) -> str:
    text = str(exc) or type(exc).__name__
    if tls and isinstance(exc, ssl.SSLError) and "WRONG_VERSION_NUMBER" in text:
        return (f"{text}: the server answered the TLS handshake in plaintext (no TLS, or no `handshake_first` "
                "in its tls block; deploy/README.md, TLS)")
    return text


def _is_no_responders(msg: Any) -> bool:
    return bool(msg.headers) and msg.headers.get("Status") == "503" and not msg.data


async def stream_request(
    nc: NATS,
    subject: str,
    payload: bytes,
    decoder: msgspec.msgpack.Decoder,
    *,
    first_timeout: float,
    idle_timeout: float,
    is_last: Any,
    lost: Callable[[], str] | None = None,
    check_every: float = 0.5,
) -> AsyncIterator[Any]:
    """Publish `payload` with a private reply inbox and yield decoded replies until `is_last(reply)`.

    Raises NoResponders at once when no subscriber exists, BusTimeout when the first reply takes longer
    than `first_timeout` or a later one longer than `idle_timeout`. With `lost`, a wait longer than
    `check_every` asks it whether the peer is still there: a non-empty answer raises PeerLost with it, so
    a dead peer fails the stream in seconds rather than after the idle timeout.
    """
    _check_size(nc, subject, payload)
    inbox = nc.new_inbox()
    queue: asyncio.Queue = asyncio.Queue()

    async def on_msg(msg: Any) -> None:
        queue.put_nowait(msg)

    sub = await nc.subscribe(inbox, cb=on_msg)
    try:
        await nc.publish(subject, payload, reply=inbox)
        await nc.flush()
        loop = asyncio.get_running_loop()
        timeout, first = first_timeout, True
        while True:
            deadline = loop.time() + timeout
            while True:
                left = deadline - loop.time()
                if left <= 0:
                    raise BusTimeout(f"no reply on {subject} within {timeout:.1f}s", first=first)
                try:
                    # asyncio.timeout, not wait_for: on 3.11 wait_for loses a cancellation that lands as
                    # the reply does, and a cancelled request must stop (the client left)
                    async with asyncio.timeout(min(left, check_every) if lost else left):
                        msg = await queue.get()
                    break
                except TimeoutError:
                    reason = lost() if lost else ""
                    if reason:
                        raise PeerLost(reason) from None
            if _is_no_responders(msg):
                raise NoResponders(subject)
            reply = decoder.decode(msg.data)
            yield reply
            if is_last(reply):
                return
            timeout, first = idle_timeout, False
    finally:
        try:
            await sub.unsubscribe()
        except Exception:  # connection closing: nothing left to unsubscribe from
            pass


async def request(nc: NATS, subject: str, payload: bytes, decoder: msgspec.msgpack.Decoder, *, timeout: float,
                  accept: Callable[[Any, bytes], bool] | None = None) -> Any:
    """One request, one decoded reply; NoResponders / BusTimeout as for stream_request. With `accept`, a
    reply it refuses (given the decoded reply and its bytes) raises Rejected."""
    _check_size(nc, subject, payload)
    try:
        msg = await nc.request(subject, payload, timeout=timeout)
    except nats.errors.NoRespondersError:
        raise NoResponders(subject) from None
    except nats.errors.TimeoutError:
        raise BusTimeout(f"no reply on {subject} within {timeout:.1f}s") from None
    reply = decoder.decode(msg.data)
    if accept is not None and not accept(reply, msg.data):
        raise Rejected(f"the reply on {subject} failed its signature check")
    return reply


def stream_replicas(nc: NATS) -> int:
    """FAK_STREAM_REPLICAS of the settings `nc` was connected with (bus.connect); 1 for another connection."""
    return _replicas.get(nc, 1)


async def ensure_stream(nc: NATS, config: StreamConfig, replicas: int | None = None) -> Any:
    """Create (or update) a JetStream stream with `replicas` replicas (default: stream_replicas(nc)); returns
    the JetStream context. Retries while a fresh server's JetStream is still starting, then fails clearly."""
    config = dataclasses.replace(config, num_replicas=replicas or stream_replicas(nc))
    js = nc.jetstream()
    for attempt in range(20):
        try:
            try:
                await js.add_stream(config)  # the same configuration again: a no-op
            except nats.js.errors.BadRequestError:  # it exists with another one: its owner updates it
                try:
                    await js.update_stream(config)
                except (nats.errors.TimeoutError, nats.js.errors.APIError) as exc:  # not the owner (permissions.py)
                    log.warning("stream %s differs from this service's configuration and stays as it is: %s",
                                config.name, exc or type(exc).__name__)
            return js
        except (nats.js.errors.ServiceUnavailableError, nats.errors.TimeoutError, nats.errors.NoRespondersError):
            await asyncio.sleep(0.25 * (attempt + 1))
    raise ConnectionError("JetStream is not available on the NATS server (start it with -js)")


async def ensure_streams(nc: NATS, replicas: int | None = None) -> Any:
    """The stream holding quarantine verdicts; returns the JetStream context."""
    return await ensure_stream(nc, StreamConfig(
        name=subjects.VERDICT_STREAM,
        subjects=["fak.v1.verdict.>"],
        retention=RetentionPolicy.LIMITS,  # every consumer (each gateway, the kvmmu) reads every verdict
        storage=StorageType.FILE,
        max_age=30 * 24 * 3600,
        duplicate_window=120,
    ), replicas)
