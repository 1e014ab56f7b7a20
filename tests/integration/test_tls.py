"""TLS on the bus (issue 10), with a self-signed CA made at test time (the `openssl` command).

An embedded nats-server that requires TLS serves bus.connect with the CA (a round trip, JetStream too) and
refuses a client without the CA or with another CA, and a plaintext client; a client with the CA refuses
a plaintext server (no fallback); with client verification on, a client without a certificate, or with
one another CA signed, is refused. And `fak up` with the TLS settings runs the whole stack on its TLS
(and client-verifying) embedded server: /healthz ok, a chat completion served. The tls blocks shipped,
commented, in deploy/nats/ work when switched on.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import ssl
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace

import nats
import pytest

from fakcore import bus
from fakcore.launcher import StartupError, Topology
from fakcore.natsd import EmbeddedNats, ServerTLS, server_binary
from fakcore.permissions import USERS, BusSecrets
from fakcore.settings import Settings
from tests.conftest import free_port
from tests.integration.test_supervision import chat, environ, fak_up, get


# -- a throw-away PKI ----------------------------------------------------------------------------------------
def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=30)


def make_ca(directory: Path, name: str) -> SimpleNamespace:
    cert, key = directory / f"{name}.pem", directory / f"{name}.key"
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "2",
             "-subj", f"/CN={name}", "-keyout", str(key), "-out", str(cert),
             "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    return SimpleNamespace(cert=str(cert), key=str(key))


def issue(ca: SimpleNamespace, directory: Path, name: str, usage: str, names: str = "") -> SimpleNamespace:
    """A certificate `ca` signed: usage serverAuth (with `names` as its subjectAltName) or clientAuth."""
    cert, key, csr, ext = (directory / f"{name}{s}" for s in (".pem", ".key", ".csr", ".ext"))
    ext.write_text("basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n"
                   f"extendedKeyUsage={usage}\nsubjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid\n"
                   + (f"subjectAltName={names}\n" if names else ""))
    _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-subj", f"/CN={name}",
             "-keyout", str(key), "-out", str(csr))
    _openssl("x509", "-req", "-in", str(csr), "-CA", ca.cert, "-CAkey", ca.key, "-CAcreateserial", "-days", "2",
             "-extfile", str(ext), "-out", str(cert))
    return SimpleNamespace(cert=str(cert), key=str(key))


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("pki")
    ca, other = make_ca(d, "fak-test-ca"), make_ca(d, "another-ca")
    return SimpleNamespace(
        ca=ca.cert, other_ca=other.cert,
        server=issue(ca, d, "server", "serverAuth", "IP:127.0.0.1,DNS:localhost"),
        client=issue(ca, d, "client", "clientAuth"),
        stranger=issue(other, d, "stranger", "clientAuth"))  # a client certificate of the wrong CA


@pytest.fixture(scope="module")
def tls_server(pki):
    """An embedded nats-server that requires TLS (not client certificates)."""
    with EmbeddedNats(tls=ServerTLS(pki.server.cert, pki.server.key)) as server:
        yield server


@pytest.fixture(scope="module")
def verifying_server(pki):
    """An embedded nats-server that requires TLS and a client certificate the test CA signed."""
    with EmbeddedNats(tls=ServerTLS(pki.server.cert, pki.server.key, ca_file=pki.ca)) as server:
        yield server


def settings(url: str, **tls: str) -> Settings:
    return Settings.load(env={}, nats_url=url, **tls)


def connect(s: Settings):
    return bus.connect(s, "tls-test", connect_timeout=2)


def tls_version(nc) -> str | None:
    """The TLS version of a live connection ('TLSv1.3'), None for plaintext (reads nats-py's transport)."""
    ssl_object = nc._transport._io_writer.get_extra_info("ssl_object")
    return ssl_object.version() if ssl_object else None


async def round_trip(nc) -> bytes:
    async def echo(msg) -> None:
        await msg.respond(b"pong:" + msg.data)

    await nc.subscribe("tls.test.echo", cb=echo)
    return (await nc.request("tls.test.echo", b"ping", timeout=5)).data


# -- one server, TLS required --------------------------------------------------------------------------------
def test_the_ca_verifies_the_server_and_the_bus_serves(tls_server, pki):
    async def main() -> None:
        assert tls_server.url.startswith("tls://127.0.0.1:")
        nc = await connect(settings(tls_server.url, nats_tls_ca=pki.ca))
        try:
            assert tls_version(nc) in ("TLSv1.2", "TLSv1.3")
            assert await round_trip(nc) == b"pong:ping"
            js = await bus.ensure_streams(nc)  # JetStream over the same connection
            assert (await js.stream_info("FAK_VERDICTS")).config.num_replicas == 1
        finally:
            await nc.close()

    asyncio.run(main())
    conf = tls_server.data_dir / "auth" / "nats.conf"
    assert "handshake_first" in conf.read_text() and "verify" not in conf.read_text()
    assert subprocess.run([server_binary(), "-c", str(conf), "-t"], capture_output=True).returncode == 0


@pytest.mark.parametrize("ca", ["system", "another"])
def test_a_client_without_the_ca_is_refused(tls_server, pki, ca):
    options = {} if ca == "system" else {"nats_tls_ca": pki.other_ca}  # "system": the tls:// URL, the system's CAs
    with pytest.raises(ConnectionError, match="CERTIFICATE_VERIFY_FAILED"):
        asyncio.run(connect(settings(tls_server.url, **options)))

    async def plain_nats_py() -> None:  # nats-py on its own, with the other CA: refused the same way
        context = ssl.create_default_context(cafile=pki.other_ca)
        await nats.connect(tls_server.url, tls=context, allow_reconnect=False, connect_timeout=2)

    with pytest.raises(ssl.SSLCertVerificationError):
        asyncio.run(plain_nats_py())


def test_a_plaintext_client_is_refused(tls_server):
    """A client that speaks NATS without TLS: the server says TLS is required and answers nothing else."""
    with socket.create_connection(("127.0.0.1", tls_server.port), timeout=5) as sock:
        info = sock.recv(65536)
        assert info.startswith(b"INFO ") and json.loads(info[5:].split(b"\r\n")[0])["tls_required"] is True
        sock.sendall(b'CONNECT {"verbose":false}\r\nPING\r\n')
        rest = b""
        while chunk := sock.recv(65536):
            rest += chunk
    assert b"PONG" not in rest and b"+OK" not in rest


def test_a_client_with_the_ca_never_falls_back_to_plaintext(pki):
    """A server without TLS (or anyone in between answering in plaintext): the TLS client refuses it, whatever
    the URL says; nats-py's own upgrade would have sent the password in the clear."""
    with EmbeddedNats() as plain:
        for url in (plain.url, plain.url.replace("nats://", "tls://")):
            with pytest.raises(ConnectionError, match="answered the TLS handshake in plaintext"):
                asyncio.run(connect(settings(url, nats_tls_ca=pki.ca)))


# -- client verification -----------------------------------------------------------------------------------
def test_with_client_verification_only_a_certificate_of_the_ca_gets_in(verifying_server, pki):
    for options in ({"nats_tls_ca": pki.ca},  # no certificate
                    {"nats_tls_ca": pki.ca, "nats_tls_cert": pki.stranger.cert, "nats_tls_key": pki.stranger.key}):
        with pytest.raises(ConnectionError):
            asyncio.run(connect(settings(verifying_server.url, **options)))

    async def main() -> None:
        nc = await connect(settings(verifying_server.url, nats_tls_ca=pki.ca, nats_tls_cert=pki.client.cert,
                                    nats_tls_key=pki.client.key))
        try:
            assert tls_version(nc) and await round_trip(nc) == b"pong:ping"
        finally:
            await nc.close()

    asyncio.run(main())
    assert "verify: true" in (verifying_server.data_dir / "auth" / "nats.conf").read_text()


def test_a_file_that_is_no_certificate_is_named_before_anything_starts(pki, tmp_path):
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate\n")
    with pytest.raises(StartupError, match=f"^FAK_NATS_TLS_CA={junk}: not a CA bundle"):
        Topology(Settings.load(env={}, nats_tls_ca=str(junk), data_dir="temp")).start()
    with pytest.raises(StartupError, match="^FAK_NATS_TLS_CERT=.*: not a certificate and its key"):
        Topology(Settings.load(env={}, nats_tls_ca=pki.ca, nats_tls_cert=pki.client.cert,
                               nats_tls_key=pki.stranger.key, data_dir="temp")).start()


# -- fak up ---------------------------------------------------------------------------------------------------
def test_fak_up_runs_the_stack_on_tls_with_client_certificates(pki, tmp_path):
    env = dict(FAK_NATS_TLS_SERVER_CERT=pki.server.cert, FAK_NATS_TLS_SERVER_KEY=pki.server.key,
               FAK_NATS_TLS_CA=pki.ca, FAK_NATS_TLS_CERT=pki.client.cert, FAK_NATS_TLS_KEY=pki.client.key,
               FAK_NATS_PORT=str(free_port()), FAK_DATA_DIR=str(tmp_path / "data"), FAK_CACHE_DIR=str(tmp_path / "cache"))
    with fak_up(tmp_path / "fak-up.log", **env) as up:
        health = get(up.url + "/healthz")
        assert health.get("ok"), health
        assert chat(up).choices[0].message.content is not None
        url = f"tls://127.0.0.1:{env['FAK_NATS_PORT']}"
        assert f"nats {url} embedded" in up.output()
        services = up.services()
        assert len(services) == 4
        for pid in services:
            child = environ(pid)
            assert child["FAK_NATS_URL"] == url and child["FAK_NATS_TLS_CA"] == pki.ca
            assert child["FAK_NATS_TLS_CERT"] == pki.client.cert and child["FAK_NATS_TLS_SERVER_KEY"] == ""
        conf = (tmp_path / "data" / "auth" / "nats.conf").read_text()
        assert "\naccounts: " in conf and "verify: true" in conf  # locked (users in accounts) and TLS, both

        # the admin password alone does not get in: the server wants the certificate too
        admin = BusSecrets.load(tmp_path / "data" / "auth").passwords["admin"]
        with pytest.raises(ConnectionError):
            asyncio.run(connect(settings(url, nats_tls_ca=pki.ca, nats_user="admin", nats_password=admin)))

        async def as_admin() -> None:
            nc = await connect(settings(url, nats_tls_ca=pki.ca, nats_tls_cert=pki.client.cert,
                                        nats_tls_key=pki.client.key, nats_user="admin", nats_password=admin))
            try:
                assert tls_version(nc) and await round_trip(nc) == b"pong:ping"
            finally:
                await nc.close()

        asyncio.run(as_admin())


# -- the shipped configurations, their tls blocks switched on ------------------------------------------------
DEPLOY = Path(__file__).parents[2] / "deploy"
PASSWORDS = {f"FAK_NATS_{u.upper()}_PASSWORD": f"pw{u}" for u in USERS}


def with_tls(conf: str, files: dict[str, str]) -> str:
    """`conf` with its commented `tls` block (and `no_advertise`) uncommented, its paths replaced by `files`."""
    lines = conf.splitlines(keepends=True)
    start = lines.index("# tls {\n")
    end = lines.index("# }\n", start)
    lines[start:end + 1] = [line[2:] for line in lines[start:end + 1]]
    text = "".join(lines).replace("# no_advertise: true", "no_advertise: true")
    for shipped, real in files.items():
        text = text.replace(shipped, real)
    return text


def test_the_shipped_tls_blocks_work(pki, tmp_path):
    """deploy/nats/nats.conf (compose) with its tls block runs and serves fak's TLS clients with a client
    certificate, refusing one without; nats-cluster.conf's block (Kubernetes) is valid."""
    cluster = with_tls((DEPLOY / "nats/nats-cluster.conf").read_text(),
                       {"/etc/nats-tls/tls.crt": pki.server.cert, "/etc/nats-tls/tls.key": pki.server.key,
                        "/etc/nats-tls/ca.crt": pki.ca})
    assert "no_advertise: true" in cluster and "handshake_first: 300ms" in cluster
    (tmp_path / "permissions.conf").write_text((DEPLOY / "nats/permissions.conf").read_text())
    (tmp_path / "cluster.conf").write_text(cluster)
    env = {**os.environ, **PASSWORDS, "POD_NAME": "nats-0"}
    checked = subprocess.run([server_binary(), "-c", str(tmp_path / "cluster.conf"), "-t"], capture_output=True, text=True, env=env)
    assert checked.returncode == 0, checked.stdout + checked.stderr

    compose = with_tls((DEPLOY / "nats/nats.conf").read_text(),
                       {"/etc/nats/tls/server.pem": pki.server.cert, "/etc/nats/tls/server.key": pki.server.key,
                        "/etc/nats/tls/ca.pem": pki.ca, "store_dir: /data": f"store_dir: {tmp_path / 'js'}",
                        "http_port: 8222": "http_port: -1"})
    (tmp_path / "nats.conf").write_text(compose)
    port, log = free_port(), tmp_path / "nats.log"
    proc = subprocess.Popen([server_binary(), "-c", str(tmp_path / "nats.conf"), "-a", "127.0.0.1", "-p", str(port),
                             "-l", str(log)], env=env)
    try:
        deadline = time.monotonic() + 10
        while "Server is ready" not in (log.read_text() if log.exists() else ""):
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text() if log.exists() else "no start"
            time.sleep(0.05)
        url = f"tls://127.0.0.1:{port}"
        admin = dict(nats_user="admin", nats_password="pwadmin", nats_tls_ca=pki.ca)
        with pytest.raises(ConnectionError):
            asyncio.run(connect(settings(url, **admin)))  # no client certificate

        async def main() -> None:
            nc = await connect(settings(url, **admin, nats_tls_cert=pki.client.cert, nats_tls_key=pki.client.key))
            try:
                assert tls_version(nc) and await round_trip(nc) == b"pong:ping"
            finally:
                await nc.close()

        asyncio.run(main())
    finally:
        proc.terminate()
        proc.wait(10)
