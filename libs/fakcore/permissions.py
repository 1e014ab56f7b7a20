"""Who may publish and subscribe to what on fak's bus: one table, least privilege, built from protocol.subjects.

Every service connects as its own NATS user (all engine workers share `engine`); `admin` is for operators
and for `fak up` itself. This table is the only place the permissions are written down: `fak up` renders
it into its embedded nats-server's configuration (natsd.py) and `render()` writes the same table for
compose and Kubernetes (`python -m fakcore.permissions`: the passwords as $FAK_NATS_<USER>_PASSWORD).

What it makes impossible (issue 10):
  - answering adjudicate requests, publishing quarantine verdicts: only `adjudicator` subscribes to
    fak.v1.adjudicate.* and publishes fak.v1.verdict.quarantine;
  - generating text: only `gateway` publishes engine generate requests; the adjudicator's judge stage may
    ask fak.v1.engine.judge.*, where a worker answers one-token yes/no questions and nothing else, and
    fak.v1.engine.probe.*, where it returns a projection of each token's hidden state (no text);
  - publishing Releases or cancels: only `gateway`;
  - answering engine requests: only `engine` subscribes to their subjects, and it may publish a reply only
    to the reply subject of a request it received (allow_responses), never to an inbox of its choosing;
  - reading other services' replies: each user's requests use its own inbox prefix (`_INBOX.<user>`, set
    by bus.connect), and those are the only inboxes it may subscribe to; the engine has none;
  - purging or deleting the streams, reading from or deleting the kvmmu's durable consumer: `admin` only;
  - changing the kvmmu's durable (its filter, max_deliver, ack_wait): only the kvmmu creates or updates
    it. The gateway's ordered consumers are created by name (`gateway-<random>`, the name in the subject,
    which the server matches against the request's config), never through the bare
    $JS.API.CONSUMER.CREATE.<stream>, whose body may name any consumer. NATS wildcards match whole tokens,
    so "names starting gateway-" can't be granted: the durables of others (DURABLES) are denied instead.
    A stream is updated by its owner (the adjudicator); gateway and kvmmu may create one that is missing
    (a create never changes an existing stream).

The messages that decide safety are also signed (protocol.encode_signed), so a deployment whose
permissions are wrong still fails closed: the adjudicator signs verdicts with `verdict_key` (the gateway
and the kvmmu check them), the gateway signs Releases with `release_key` (the engines check them). A
service is handed only the keys in KEYS.
"""

from __future__ import annotations

import json
import os
import secrets
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fakcore.protocol import KVMMU_DURABLE, subjects

USERS = ("gateway", "adjudicator", "kvmmu", "engine", "admin")
USER_OF = {"gateway": "gateway", "adjudicator": "adjudicator", "kvmmu": "kvmmu", "engine-cpu": "engine",
           "engine-cuda": "engine"}  # service (`fak serve NAME`) -> its NATS user
KEYS = {"gateway": ("verdict_key", "release_key"), "adjudicator": ("verdict_key",), "kvmmu": ("verdict_key",),
        "engine": ("release_key",), "admin": ("verdict_key", "release_key")}  # the signing keys each user holds
ENGINE_REPLY_WINDOW = "6h"  # how long an engine may stream replies to one request (a long generation)


def inbox_prefix(user: str) -> str:
    """The reply inboxes of `user`'s requests (bus.connect); the only inboxes it may subscribe to."""
    return f"_INBOX.{user}"


@dataclass(frozen=True)
class Grant:
    publish: tuple[str, ...]
    subscribe: tuple[str, ...]
    responses: tuple[int, str] | None = None  # allow_responses: (replies per request, -1: any number; window)
    deny_publish: tuple[str, ...] = ()  # refused even where `publish` allows it


_ANY = "_any_"  # a token subject_token keeps as it is, turned into the wildcard


def _wild(subject: str) -> str:
    return subject.replace(_ANY, "*")


def _stream(verb: str, stream: str) -> str:
    return f"$JS.API.STREAM.{verb}.{stream}"


DURABLES = {subjects.VERDICT_STREAM: (KVMMU_DURABLE,), subjects.AUDIT_STREAM: ()}  # stream -> durables, each its owner's
CONSUMER_PREFIX = "gateway-"  # the names of the gateway's ordered consumers (context_filter.GatewayConsumer)


def _named_consumer(stream: str, filter_subject: str) -> str:
    """A create of a consumer named in the subject (any one-token name) with `filter_subject` as its filter."""
    return f"$JS.API.CONSUMER.CREATE.{stream}.*.{filter_subject}"


def _others_durables() -> tuple[str, ...]:
    return tuple(f"$JS.API.CONSUMER.CREATE.{stream}.{d}.>" for stream, names in DURABLES.items() for d in names)


def table() -> dict[str, Grant]:
    """user -> what it may publish and subscribe, from every publish/subscribe/request call of its service."""
    s, V, A, D, R = subjects, subjects.VERDICT_STREAM, subjects.AUDIT_STREAM, KVMMU_DURABLE, subjects.RESPONSES_STREAM
    generate, count, affine = _wild(s.generate(_ANY)), _wild(s.count_tokens(_ANY)), _wild(s.worker(_ANY, "generate"))
    judge = _wild(s.judge(_ANY))  # screening's one-token questions (the worker serves nothing else there)
    probe = _wild(s.probe(_ANY))  # screening's probe of hidden states (projections only, nothing generated)
    evict, worker_stats = _wild(s.worker(_ANY, "kv.evict")), _wild(s.worker(_ANY, "kv.stats"))
    return {
        "gateway": Grant(
            publish=(generate, count, affine, s.CANCEL, s.RELEASE, s.ADJUDICATE_CALL, s.ADJUDICATE_RESULT,
                     s.AUDIT,  # verdicts it answers from its cache
                     s.health("gateway"),
                     _stream("CREATE", V), _stream("INFO", V), _stream("CREATE", A), _stream("INFO", A),
                     _stream("MSG.GET", V),  # the context filter: the last verdict, to know when it caught up
                     # its ordered consumers, by name (never the bare CREATE.<stream>: its body names any consumer)
                     _named_consumer(V, s.QUARANTINE), _named_consumer(A, s.AUDIT),
                     f"$JS.FC.{V}.>", f"$JS.FC.{A}.>",  # their flow control
                     # the response store: its stream, written and read by the gateways only
                     s.RESPONSES, _stream("CREATE", R), _stream("INFO", R), _stream("MSG.GET", R)),
            subscribe=(f"{inbox_prefix('gateway')}.>", s.ANNOUNCE, s.HEALTH, s.KV_EVICTED),
            deny_publish=_others_durables()),
        "adjudicator": Grant(
            publish=(s.QUARANTINE, s.AUDIT, s.health("adjudicator"), judge, probe,  # the judge stage asks, never generates
                     _stream("CREATE", V), _stream("INFO", V), _stream("UPDATE", V),  # the streams' owner
                     _stream("CREATE", A), _stream("INFO", A), _stream("UPDATE", A)),
            subscribe=(s.ADJUDICATE_CALL, s.ADJUDICATE_RESULT, f"{inbox_prefix('adjudicator')}.>"),
            responses=(1, "2m")),  # one verdict per request
        "kvmmu": Grant(
            publish=(evict, s.KV_EVICTED, s.KV_SYNC, s.health("kvmmu"),
                     _stream("CREATE", V), _stream("INFO", V),
                     # its durable consumer of quarantine verdicts, and no other
                     f"$JS.API.CONSUMER.INFO.{V}.{D}", f"$JS.API.CONSUMER.DURABLE.CREATE.{V}.{D}",
                     f"$JS.API.CONSUMER.CREATE.{V}.{D}", f"$JS.API.CONSUMER.CREATE.{V}.{D}.>",
                     f"$JS.API.CONSUMER.MSG.NEXT.{V}.{D}", f"$JS.ACK.{V}.{D}.>"),
            subscribe=(s.KV_SPANS, s.ANNOUNCE, s.KV_STATS, f"{inbox_prefix('kvmmu')}.>"),
            responses=(1, "2m")),  # kv.stats
        "engine": Grant(
            publish=(s.ANNOUNCE, s.KV_SPANS, s.KV_EVICTED, s.health("engine-cpu"), s.health("engine-cuda")),
            subscribe=(generate, count, affine, judge, probe, evict, worker_stats, s.CANCEL, s.RELEASE, s.KV_SYNC),
            # a generation streams many replies to its request's one reply subject, for as long as it runs
            responses=(-1, ENGINE_REPLY_WINDOW)),
        "admin": Grant(publish=(">",), subscribe=(">",)),
    }


# ---------------------------------------------------------------------------------------------------------
# The nats-server configuration
# ---------------------------------------------------------------------------------------------------------


class Var(str):
    """A nats-server configuration variable ($NAME, from the server's environment), written unquoted."""


ACCOUNT, SYSTEM_ACCOUNT = "FAK", "SYS"  # fak's users and their streams; the server's own (cluster, monitoring)


def authorization(passwords: Mapping[str, str]) -> dict[str, Any]:
    """Every user of the table with its password and permissions (the `users` of fak's account)."""
    users = []
    for user, grant in table().items():
        perms: dict[str, Any] = {"publish": {"allow": list(grant.publish)}, "subscribe": {"allow": list(grant.subscribe)}}
        if grant.deny_publish:
            perms["publish"]["deny"] = list(grant.deny_publish)
        if grant.responses is not None:
            perms["allow_responses"] = {"max": grant.responses[0], "expires": grant.responses[1]}
        users.append({"user": user, "password": passwords[user], "permissions": perms})
    return {"users": users}


def accounts(passwords: Mapping[str, str]) -> dict[str, Any]:
    """The `accounts` block: every user in fak's account, JetStream enabled for it, and a system account
    with no users (the server's internal traffic, JetStream's cluster metadata included; no client logs in)."""
    return {ACCOUNT: {"jetstream": "enabled", **authorization(passwords)}, SYSTEM_ACCOUNT: {}}


def render(passwords: Mapping[str, str] | None = None) -> str:
    """nats-server configuration text of the table: the passwords given, else $FAK_NATS_<USER>_PASSWORD."""
    passwords = passwords or {u: Var(f"FAK_NATS_{u.upper()}_PASSWORD") for u in USERS}
    return (f"# fak's bus: account {ACCOUNT} holds the users and their authorization (permissions), account "
            f"{SYSTEM_ACCOUNT} is the server's.\n# Rendered from libs/fakcore/permissions.py: do not edit.\n"
            f"accounts: {_conf(accounts(passwords))}\n"
            f"system_account: {json.dumps(SYSTEM_ACCOUNT)}\n")


def _conf(value: Any, indent: str = "") -> str:
    inner = indent + "  "
    if isinstance(value, Var):
        return f"${value}"
    if isinstance(value, dict):
        return "{\n" + "".join(f"{inner}{k}: {_conf(v, inner)}\n" for k, v in value.items()) + indent + "}"
    if isinstance(value, list):
        return "[\n" + "".join(f"{inner}{_conf(v, inner)}\n" for v in value) + indent + "]"
    return json.dumps(value)  # a double-quoted string ($ inside is not a variable) or a number


# ---------------------------------------------------------------------------------------------------------
# The secrets of one data dir: passwords and signing keys, generated once, kept in a private dir
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BusSecrets:
    passwords: dict[str, str]  # user -> NATS password
    verdict_key: str  # HMAC key: the adjudicator signs verdicts, the gateway and the kvmmu check them
    release_key: str  # HMAC key: the gateway signs Releases, the engines check them

    FILE = "secrets.json"

    @classmethod
    def load(cls, directory: Path) -> BusSecrets:
        data = json.loads((directory / cls.FILE).read_text())
        return cls(dict(data["passwords"]), data["verdict_key"], data["release_key"])

    @classmethod
    def load_or_create(cls, directory: Path) -> BusSecrets:
        """The secrets kept in `directory` (mode 0700, the file 0600), made for what is missing."""
        private_dir(directory)
        path = directory / cls.FILE
        data = json.loads(path.read_text()) if path.exists() else {}
        old = data.get("passwords", {})
        made = cls({u: old.get(u) or secrets.token_hex(24) for u in USERS},
                   data.get("verdict_key") or secrets.token_hex(32), data.get("release_key") or secrets.token_hex(32))
        record = {"passwords": made.passwords, "verdict_key": made.verdict_key, "release_key": made.release_key}
        if record != data:
            write_private(path, json.dumps(record, indent=1))
        return made

    def settings_for(self, service: str) -> dict[str, str]:
        """Settings overrides of one service: its user, its password, the signing keys it holds (others empty)."""
        user = USER_OF.get(service, service)
        held = KEYS[user]
        return {"nats_user": user, "nats_password": self.passwords[user], "nats_creds": "",
                "verdict_key": self.verdict_key if "verdict_key" in held else "",
                "release_key": self.release_key if "release_key" in held else ""}


def private_dir(directory: Path) -> Path:
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(directory, 0o700)
    return directory


def write_private(path: Path, text: str) -> None:
    """Write `text` to `path` readable by this user only (never, even for a moment, by others)."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)


if __name__ == "__main__":  # the table for compose / Kubernetes: python -m fakcore.permissions > permissions.conf
    sys.stdout.write(render())
