"""The locked bus (issue 10): the attacks an open NATS allowed, each refused, against the topology `fak up`
runs (Topology starting its own embedded nats-server: per-service users from permissions.py, signing keys).

Refused by the server (a permissions violation): connecting without credentials; as a compromised engine,
reading adjudication requests or anyone's replies, publishing Releases, quarantine verdicts or replies to an
inbox of its choosing, purging the verdict stream; as the gateway, answering adjudication requests. Refused
by the receiver, for a publisher that has the permission (a misconfigured deployment): an unsigned or
wrongly signed Release, quarantine verdict or verdict reply. And the locked topology serves as before.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import stat
import threading
import time
import urllib.request
import uuid

import msgspec
import nats
import openai
import pytest

from fakcore.launcher import Topology, stop_process
from fakcore.permissions import CONSUMER_PREFIX, inbox_prefix
from fakcore.protocol import (
    ADJUDICATOR_QUEUE,
    KVMMU_DURABLE,
    CancelRequest,
    ChatMessage,
    Decoders,
    GenerateRequest,
    QuarantineVerdict,
    Release,
    ResultVerdict,
    Sampling,
    _mac,
    block_id,
    encode,
    encode_signed,
    signed_ok,
    subjects,
)
from tests.conftest import base_settings, running, wait_for
from tests.integration.test_quarantine import MARKER, PAYLOAD, conversation

ADMIN = f"ops-key-{uuid.uuid4().hex}"  # an API key (admin), sent with every operator request below
V = subjects.VERDICT_STREAM


@pytest.fixture(scope="module")
def topo(tmp_path_factory):
    """adjudicator, kvmmu, one engine worker, the gateway, on an embedded nats-server this Topology starts,
    locked as `fak up` locks it."""
    tmp = tmp_path_factory.mktemp("locked")
    settings = base_settings("", data_dir=str(tmp / "data"), admin_keys=(ADMIN,))
    with running(Topology(settings, log_dir=tmp / "logs"), timeout=120) as t:
        assert t.nats is not None and t.secrets is not None
        yield t


@pytest.fixture(scope="module")
def oai(topo):
    return openai.OpenAI(base_url=topo.gateway_url + "/v1", api_key="-", max_retries=0, timeout=60)


# -- helpers ------------------------------------------------------------------------------------------------
class Conn:
    """A client connection as `user` ("" for none), its asynchronous server errors collected."""

    def __init__(self, topo: Topology, user: str = "", password: str | None = None):
        self.topo, self.user = topo, user
        self.password = topo.secrets.passwords.get(user, "") if password is None else password
        self.errors: list[str] = []
        self.nc: nats.NATS | None = None

    async def __aenter__(self) -> Conn:
        async def on_error(exc: Exception) -> None:
            self.errors.append(str(exc).lower())

        options = dict(servers=[self.topo.nats.url], name=f"attacker-{self.user or 'anonymous'}", error_cb=on_error,
                       allow_reconnect=False, connect_timeout=2)
        if self.user:
            options.update(user=self.user, password=self.password, inbox_prefix=inbox_prefix(self.user))
        self.nc = await nats.connect(**options)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.nc.close()

    async def refused(self, what: str, subject: str, timeout: float = 3.0) -> bool:
        """Whether the server reported a permissions violation for `what` (publish | subscription) to `subject`."""
        needle = f'permissions violation for {what} to "{subject}"'.lower()
        deadline = time.monotonic() + timeout
        while not any(needle in e for e in self.errors):
            if time.monotonic() > deadline:
                return False
            await asyncio.sleep(0.05)
        return True


def run(coro):
    return asyncio.run(coro)


def metrics_of(topo: Topology, service: str) -> str:
    """The /metrics text of a service, found from its heartbeat (as admin)."""
    async def url() -> str:
        async with Conn(topo, "admin") as c:
            nc = c.nc
            heard = asyncio.get_running_loop().create_future()

            async def on_beat(msg) -> None:
                beat = Decoders.heartbeat.decode(msg.data)
                if not heard.done():
                    heard.set_result(beat.metrics_url)

            await nc.subscribe(subjects.health(service), cb=on_beat)
            return await asyncio.wait_for(heard, 10)

    with urllib.request.urlopen(run(url()) + "/metrics", timeout=10) as r:
        return r.read().decode()


def counter(text: str, name: str, **labels: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def context(topo: Topology, request_id: str) -> dict:
    req = urllib.request.Request(f"{topo.gateway_url}/v1/fak/requests/{request_id}", headers={"authorization": f"Bearer {ADMIN}"})
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())


def tool_result(oai, content: str):
    return oai.chat.completions.create(model="synthetic", messages=conversation("Weather in Paris?", content), max_tokens=4,
                                       temperature=0)


# -- the signature itself (no processes) ------------------------------------------------------------------
def test_a_signature_binds_every_field_the_subject_and_the_request():
    v = ResultVerdict(block="b1", verdict="clean", score=0.1)
    data = encode_signed(v, "k", subjects.ADJUDICATE_RESULT, b"request 1")
    assert Decoders.adjudicator_reply.decode(data).sig and signed_ok(data, "k", subjects.ADJUDICATE_RESULT, b"request 1")
    assert not signed_ok(data, "k", subjects.ADJUDICATE_RESULT, b"request 2")  # a replay for another request
    assert not signed_ok(data, "k", subjects.ADJUDICATE_CALL, b"request 1")
    assert not signed_ok(data, "other", subjects.ADJUDICATE_RESULT, b"request 1")
    tampered = encode(msgspec.structs.replace(Decoders.adjudicator_reply.decode(data), verdict="quarantine"))
    assert not signed_ok(tampered, "k", subjects.ADJUDICATE_RESULT, b"request 1")
    assert not signed_ok(encode(v), "k", subjects.ADJUDICATE_RESULT, b"request 1") and not signed_ok(b"\xc1", "k", "s")
    assert signed_ok(encode(v), "", subjects.ADJUDICATE_RESULT)  # no key configured: nothing to check

    class Newer(msgspec.Struct, tag="Release", tag_field="t", kw_only=True):  # a later Release with a new field
        v: int = 1
        request_id: str
        quarantined: list[str] = []
        sig: bytes = b""
        reason: str = "a field this reader does not know"

    newer = Newer(request_id="r")
    signed = encode(msgspec.structs.replace(newer, sig=_mac("k", encode(newer), subjects.RELEASE, b"")))
    assert signed_ok(signed, "k", subjects.RELEASE) and Decoders.release.decode(signed).request_id == "r"


# -- the launcher's part --------------------------------------------------------------------------------------
def test_secrets_are_private_and_each_child_holds_only_its_own(topo):
    auth = topo.nats.auth_dir
    assert stat.S_IMODE(os.stat(auth).st_mode) == 0o700
    for f in ("nats.conf", "secrets.json"):
        assert stat.S_IMODE(os.stat(auth / f).st_mode) == 0o600
    s = topo.secrets
    for child in topo.children:
        env = _environ(child.proc.pid)
        user = "engine" if child.service == "engine-cpu" else child.service
        assert env["FAK_NATS_USER"] == user and env["FAK_NATS_PASSWORD"] == s.passwords[user]
        assert env["FAK_VERDICT_KEY"] == (s.verdict_key if child.service != "engine-cpu" else "")
        assert env["FAK_RELEASE_KEY"] == (s.release_key if child.service in ("gateway", "engine-cpu") else "")
        argv = open(f"/proc/{child.proc.pid}/cmdline", "rb").read().decode()
        assert not any(p in argv for p in s.passwords.values()) and s.verdict_key not in argv and s.release_key not in argv


def _environ(pid: int) -> dict[str, str]:
    with open(f"/proc/{pid}/environ", "rb") as f:
        return dict(e.decode().split("=", 1) for e in f.read().split(b"\0") if b"=" in e)


# -- refused by the server ------------------------------------------------------------------------------------
def test_no_credentials_no_connection(topo):
    async def attempt(user: str, password: str) -> None:
        async with Conn(topo, user, password):
            pass

    for user, password in (("", ""), ("engine", "guessed"), ("nobody", "x")):
        with pytest.raises(nats.errors.Error, match="Authorization Violation"):
            run(attempt(user, password))


def test_a_compromised_engine_cannot_judge_release_forge_or_purge(topo):
    async def main() -> None:
        async with Conn(topo, "admin") as watcher, Conn(topo, "engine") as attack:
            admin = watcher.nc
            seen: list[str] = []

            async def watch(msg) -> None:
                seen.append(msg.subject)

            js = admin.jetstream()
            await js.publish(subjects.QUARANTINE, encode_signed(QuarantineVerdict(block=block_id(uuid.uuid4().hex), detector="t",
                                                                                 score=1.0), topo.secrets.verdict_key, subjects.QUARANTINE))
            for subject in (subjects.RELEASE, subjects.QUARANTINE, f"{inbox_prefix('gateway')}.forged"):
                await admin.subscribe(subject, cb=watch)
            await admin.flush()
            before = (await js.stream_info(V)).state.messages
            assert before >= 1

            nc = attack.nc
            await nc.subscribe(subjects.ADJUDICATE_RESULT, queue=ADJUDICATOR_QUEUE)  # a fake adjudicator
            await nc.subscribe(subjects.ADJUDICATE_CALL)
            await nc.subscribe("_INBOX.>")  # everybody's replies
            await nc.publish(subjects.RELEASE, encode(Release(request_id="r1")))
            await nc.publish(subjects.QUARANTINE, encode(QuarantineVerdict(block="b0", detector="forged", score=1.0)))
            await nc.publish(f"{inbox_prefix('gateway')}.forged", b"a reply nobody asked for")
            with pytest.raises(nats.errors.TimeoutError):
                await nc.jetstream(timeout=1.0).purge_stream(V)
            with pytest.raises(nats.errors.TimeoutError):
                await nc.jetstream(timeout=1.0).delete_stream(V)
            await nc.subscribe(">")  # every subject
            for subject in (subjects.ADJUDICATE_RESULT, subjects.ADJUDICATE_CALL, "_INBOX.>", ">"):
                assert await attack.refused("subscription", subject), (subject, attack.errors)
            for subject in (subjects.RELEASE, subjects.QUARANTINE, f"{inbox_prefix('gateway')}.forged",
                            f"$JS.API.STREAM.PURGE.{V}", f"$JS.API.STREAM.DELETE.{V}"):
                assert await attack.refused("publish", subject), (subject, attack.errors)
            await asyncio.sleep(0.3)
            assert seen == []  # nothing of it reached anyone
            assert (await js.stream_info(V)).state.messages == before

    run(main())


def test_only_admin_purges_or_deletes_the_streams(topo):
    async def main() -> None:
        for user in ("gateway", "adjudicator", "kvmmu"):
            async with Conn(topo, user) as c:
                js = c.nc.jetstream(timeout=0.5)
                for op, verb in ((js.purge_stream, "PURGE"), (js.delete_stream, "DELETE")):
                    for stream in (V, subjects.AUDIT_STREAM):
                        with pytest.raises(nats.errors.TimeoutError):
                            await op(stream)
                        assert await c.refused("publish", f"$JS.API.STREAM.{verb}.{stream}"), (user, verb, stream)
                with pytest.raises(nats.errors.TimeoutError):  # the kvmmu's place in the verdicts
                    await js.delete_consumer(V, "kvmmu")
                assert await c.refused("publish", f"$JS.API.CONSUMER.DELETE.{V}.kvmmu"), user
        async with Conn(topo, "gateway") as c:  # reading the kvmmu's durable would take verdicts from it
            with pytest.raises(nats.errors.TimeoutError):
                await c.nc.request(f"$JS.API.CONSUMER.MSG.NEXT.{V}.kvmmu", b"1", timeout=0.5)
            assert await c.refused("publish", f"$JS.API.CONSUMER.MSG.NEXT.{V}.kvmmu")
        async with Conn(topo, "admin") as c:
            assert (await c.nc.jetstream().stream_info(V)).state.messages >= 1

    run(main())


def test_the_gateway_cannot_change_the_kvmmus_durable(topo):
    """The gateway creates consumers only by name, its own: no request of it changes the kvmmu's durable
    (a filter that matches nothing would stop every eviction)."""
    hijack = {"ack_policy": "explicit", "deliver_policy": "all", "filter_subject": "fak.v1.verdict.none",
              "max_deliver": 1, "ack_wait": 1000}
    create = f"$JS.API.CONSUMER.CREATE.{V}"

    async def main() -> None:
        async with Conn(topo, "admin") as admin, Conn(topo, "gateway") as c:
            js = admin.nc.jetstream()
            before = (await js.consumer_info(V, KVMMU_DURABLE)).config

            async def ask(subject: str, **config: object) -> dict:
                body = json.dumps({"stream_name": V, "config": {**hijack, **config}}).encode()
                return json.loads((await c.nc.request(subject, body, timeout=1.0)).data)

            for subject in (create, f"{create}.{KVMMU_DURABLE}.{subjects.QUARANTINE}", f"{create}.{KVMMU_DURABLE}.fak.v1.verdict.none"):
                with pytest.raises(nats.errors.TimeoutError):  # the bare create (its body names any consumer), the kvmmu's name
                    await ask(subject, name=KVMMU_DURABLE, filter_subject=subjects.QUARANTINE)
                assert await c.refused("publish", subject), (subject, c.errors)
            own = f"{CONSUMER_PREFIX}{uuid.uuid4().hex}"  # its own name in the subject, the kvmmu's in the body
            for config in ({"name": KVMMU_DURABLE}, {"durable_name": KVMMU_DURABLE}):
                reply = await ask(f"{create}.{own}.{subjects.QUARANTINE}", filter_subject=subjects.QUARANTINE, **config)
                assert "error" in reply or reply["name"] == own, (config, reply)  # refused, or the subject's name wins
            after = (await js.consumer_info(V, KVMMU_DURABLE)).config
            assert (after.filter_subject, after.max_deliver, after.ack_wait) == (before.filter_subject, before.max_deliver, before.ack_wait)
            names = [i.name for stream in (V, subjects.AUDIT_STREAM) for i in await js.consumers_info(stream)]
            assert KVMMU_DURABLE in names and all(n == KVMMU_DURABLE or n.startswith(CONSUMER_PREFIX) for n in names), names
            assert sum(n.startswith(CONSUMER_PREFIX) for n in names) >= 2  # the gateway's own: context filter, audit view

    run(main())


def test_no_one_but_the_gateway_cancels_and_no_one_but_admin_reads_everything(topo):
    """Cancelling another client's request (every worker obeys fak.v1.engine.cancel) and subscribing to
    every subject (">") are refused to every other service's user."""
    async def main() -> None:
        async with Conn(topo, "admin") as watcher:
            seen: list[str] = []
            heard = asyncio.Event()

            async def watch(msg) -> None:
                seen.append(msg.subject)
                heard.set()

            await watcher.nc.subscribe(subjects.CANCEL, cb=watch)
            await watcher.nc.flush()
            for user in ("engine", "kvmmu", "adjudicator"):
                async with Conn(topo, user) as attack:
                    await attack.nc.publish(subjects.CANCEL, encode(CancelRequest(request_id="someone-elses")))
                    await attack.nc.subscribe(">")
                    assert await attack.refused("publish", subjects.CANCEL), (user, attack.errors)
                    assert await attack.refused("subscription", ">"), (user, attack.errors)
            async with Conn(topo, "gateway") as gateway:
                await gateway.nc.subscribe(">")
                assert await gateway.refused("subscription", ">"), gateway.errors
                await gateway.nc.publish(subjects.CANCEL, encode(CancelRequest(request_id="its-own")))
                await gateway.nc.flush()
            await asyncio.wait_for(heard.wait(), 5)
            assert seen == [subjects.CANCEL]  # the gateway's own cancel, and nothing else

    run(main())


def test_the_gateway_cannot_answer_adjudication_requests(topo):
    async def main() -> None:
        async with Conn(topo, "gateway") as attack:
            nc = attack.nc
            await nc.subscribe(subjects.ADJUDICATE_RESULT, queue=ADJUDICATOR_QUEUE)
            await nc.subscribe(subjects.ADJUDICATE_CALL, queue=ADJUDICATOR_QUEUE)
            await nc.subscribe(subjects.generate("synthetic"), queue=subjects.engine_queue("synthetic"))  # a fake worker
            await nc.publish(subjects.QUARANTINE, encode(QuarantineVerdict(block="b0", detector="forged", score=1.0)))
            for subject in (subjects.ADJUDICATE_RESULT, subjects.ADJUDICATE_CALL, subjects.generate("synthetic")):
                assert await attack.refused("subscription", subject), (subject, attack.errors)
            assert await attack.refused("publish", subjects.QUARANTINE)

    run(main())


# -- refused by the receiver: a publisher with the permission but not the key ---------------------------------
def test_a_held_request_waits_for_a_signed_release(topo):
    """admin may publish anything: a Release without the gateway's signature, or signed with another key,
    does not start decoding; the signed one does."""
    async def main() -> None:
        async with Conn(topo, "admin") as c:
            nc = c.nc
            replies: asyncio.Queue = asyncio.Queue()

            async def on_reply(msg) -> None:
                replies.put_nowait(Decoders.engine_reply.decode(msg.data))

            inbox = nc.new_inbox()
            await nc.subscribe(inbox, cb=on_reply)
            rid = f"held-{uuid.uuid4().hex[:8]}"
            req = GenerateRequest(request_id=rid, model="synthetic", messages=[ChatMessage(role="user", content="hi")],
                                  sampling=Sampling(max_tokens=3, temperature=0), hold=True)
            await nc.publish(subjects.generate("synthetic"), encode(req), reply=inbox)
            accepted = await asyncio.wait_for(replies.get(), 20)
            assert type(accepted).__name__ == "Accepted" and accepted.held

            release = Release(request_id=rid)
            await nc.publish(subjects.RELEASE, encode(release))
            await nc.publish(subjects.RELEASE, encode_signed(release, "not-the-key", subjects.RELEASE))
            await nc.publish(subjects.RELEASE, encode_signed(release, topo.secrets.release_key, "fak.v1.engine.other"))
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(replies.get(), 2.0)  # still held
            await nc.publish(subjects.RELEASE, encode_signed(release, topo.secrets.release_key, subjects.RELEASE))
            first = await asyncio.wait_for(replies.get(), 20)
            assert type(first).__name__ in ("TokenChunk", "GenerateDone")

    run(main())
    text = metrics_of_worker(topo)
    assert counter(text, "fak_engine_unsigned_releases_total") >= 3


def metrics_of_worker(topo: Topology) -> str:
    async def url() -> str:
        async with Conn(topo, "admin") as c:
            nc = c.nc
            heard = asyncio.get_running_loop().create_future()

            async def on_announce(msg) -> None:
                if not heard.done():
                    heard.set_result(Decoders.announce.decode(msg.data).metrics_url)

            await nc.subscribe(subjects.ANNOUNCE, cb=on_announce)
            return await asyncio.wait_for(heard, 10)

    with urllib.request.urlopen(run(url()) + "/metrics", timeout=10) as r:
        return r.read().decode()


def test_an_unsigned_quarantine_verdict_is_ignored_a_signed_one_applied(topo, oai):
    forged, genuine = f"forged result {uuid.uuid4().hex}", f"genuine result {uuid.uuid4().hex}"
    before = counter(metrics_of(topo, "kvmmu"), "fak_kvmmu_verdicts_total", outcome="unsigned")

    async def publish() -> None:
        async with Conn(topo, "admin") as c:
            js = c.nc.jetstream()
            await js.publish(subjects.QUARANTINE, encode(QuarantineVerdict(block=block_id(forged), detector="forged", score=1.0)))
            await js.publish(subjects.QUARANTINE, encode_signed(QuarantineVerdict(block=block_id(genuine), detector="ops", score=1.0),
                                                                "not-the-key", subjects.QUARANTINE))
            await js.publish(subjects.QUARANTINE, encode_signed(QuarantineVerdict(block=block_id(genuine), detector="ops", score=1.0),
                                                                topo.secrets.verdict_key, subjects.QUARANTINE))

    run(publish())
    time.sleep(0.5)
    c = context(topo, tool_result(oai, forged).id)
    assert c["placeholders"] == [] and c["screened"] == [block_id(forged)]  # the forged verdict did not count
    c = context(topo, tool_result(oai, genuine).id)
    assert c["placeholders"] == [block_id(genuine)] and c["screened"] == []  # the signed one did
    assert wait_for(lambda: counter(metrics_of(topo, "kvmmu"), "fak_kvmmu_verdicts_total", outcome="unsigned") >= before + 2,
                    timeout=15)


# -- the locked topology serves -----------------------------------------------------------------------------
def test_a_request_with_tool_results_is_screened_end_to_end(topo, oai):
    r = tool_result(oai, PAYLOAD)
    assert r.choices[0].message is not None
    c = context(topo, r.id)
    assert MARKER not in json.dumps(c["messages"]) and len(c["screened"]) == 1 and c["evicted"] == c["screened"]
    clean = tool_result(oai, f"Sunny, 24C ({uuid.uuid4().hex[:6]}).")
    assert clean.choices[0].finish_reason in ("stop", "length")
    assert context(topo, clean.id)["placeholders"] == []
    # the kvmmu consumed the verdict through its durable consumer
    assert wait_for(lambda: counter(metrics_of(topo, "kvmmu"), "fak_kvmmu_verdicts_total", outcome="applied") >= 1, timeout=15)


def test_no_service_was_refused_anything(topo):
    """The table is complete: everything the services did so far, the server allowed (attackers aside)."""
    violations = [line for line in topo.nats.log_file.read_text(errors="replace").splitlines()
                  if re.search("violation", line, re.I) and "attacker-" not in line]
    assert violations == []


# -- last: the adjudicator replaced by an impostor that has the permission -----------------------------------
def test_verdicts_not_signed_for_their_request_fail_the_request(topo, oai):
    [adjudicator] = [c for c in topo.children if c.service == "adjudicator"]
    stop_process(adjudicator.proc)
    topo.children.remove(adjudicator)
    mode = {"sign": ""}

    async def impostor(ready: asyncio.Event, done: asyncio.Event) -> None:
        async with Conn(topo, "admin") as c:
            nc = c.nc

            async def answer(msg) -> None:
                req = Decoders.adjudicate.decode(msg.data)
                v = ResultVerdict(block=req.block, verdict="clean")
                key = topo.secrets.verdict_key
                data = {"none": lambda: encode(v),
                        "other-request": lambda: encode_signed(v, key, msg.subject, b"another request"),
                        "right": lambda: encode_signed(v, key, msg.subject, msg.data)}[mode["sign"]]()
                await msg.respond(data)

            await nc.subscribe(subjects.ADJUDICATE_RESULT, queue=ADJUDICATOR_QUEUE, cb=answer)
            await nc.flush()
            ready.set()
            await done.wait()

    loop = asyncio.new_event_loop()
    ready, done = asyncio.Event(), asyncio.Event()
    thread = threading.Thread(target=loop.run_until_complete, args=(impostor(ready, done),), daemon=True)
    thread.start()
    try:
        assert wait_for(ready.is_set, timeout=10)
        for sign in ("none", "other-request"):
            mode["sign"] = sign
            with pytest.raises(openai.APIStatusError) as err:
                tool_result(oai, f"Sunny ({uuid.uuid4().hex[:6]}).")
            assert err.value.status_code == 503 and "signature" in str(err.value), sign
        mode["sign"] = "right"  # an impostor with the key is indistinguishable: the key is the secret
        assert tool_result(oai, f"Sunny ({uuid.uuid4().hex[:6]}).").choices
        assert counter(metrics_text(topo), "fak_gateway_unsigned_verdicts_total", kind="result") >= 2
    finally:
        loop.call_soon_threadsafe(done.set)
        thread.join(10)
        topo.spawn("adjudicator")
        topo.wait_ready(60)


def metrics_text(topo: Topology) -> str:
    with urllib.request.urlopen(topo.gateway_url + "/metrics", timeout=10) as r:
        return r.read().decode()


# -- last of all: what the logs hold after everything above ---------------------------------------------------
def test_no_secret_is_in_any_log(topo):
    """No password, signing key or API key in any service's log file, nor in nats-server's."""
    s = topo.secrets
    secrets = {**{f"password of {u}": p for u, p in s.passwords.items()}, "verdict_key": s.verdict_key,
               "release_key": s.release_key, "admin API key": ADMIN}
    logs = [*topo.log_dir.glob("*.log"), topo.nats.log_file]
    assert topo.nats.log_file.stat().st_size > 0 and {"gateway.log", "kvmmu.log", "adjudicator.log"} <= {p.name for p in logs}
    found = [(name, log.name) for log in logs for name, secret in secrets.items() if secret in log.read_text(errors="replace")]
    assert found == []
