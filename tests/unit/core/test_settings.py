"""Settings: one typed place; env and flags; the README's table lists every setting."""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Literal, get_args, get_origin

import pytest

from fakcore import settings as settings_mod
from fakcore.settings import Settings, SettingsError, parse_bytes


def test_defaults():
    s = Settings.load(env={})
    assert (s.host, s.port, s.model, s.backend) == ("127.0.0.1", 8080, "synthetic", "numba")
    assert s.activations == "auto"  # the CPU's fastest path: int8 where it runs one
    assert s.routed_models == ("synthetic",)


def test_env_then_flags_then_overrides():
    env = {"FAK_PORT": "9001", "FAK_MODELS": "a, b", "FAK_MAX_SESSIONS": "3", "FAK_IDLE_TIMEOUT_S": "1.5"}
    s = Settings.load(env=env)
    assert s.port == 9001 and s.models == ("a", "b") and s.max_sessions == 3 and s.idle_timeout_s == 1.5
    parser = argparse.ArgumentParser()
    settings_mod.add_arguments(parser)
    args = parser.parse_args(["--port", "9002", "--model", "smollm2-135m"])
    s = Settings.load(env=env, args=args, max_sessions=1)
    assert s.port == 9002 and s.model == "smollm2-135m" and s.max_sessions == 1 and s.models == ("a", "b")


def test_bad_value_is_a_clear_error():
    with pytest.raises(SettingsError, match="^FAK_PORT=eighty: expected a whole number$"):
        Settings.load(env={"FAK_PORT": "eighty"})


def test_to_env_round_trips():
    s = Settings.load(env={}, models=("x", "y"), port=1234, log_level="DEBUG")
    assert Settings.load(env=s.to_env()) == s


def test_parse_bytes():
    assert parse_bytes("512MiB") == 512 * 2**20 and parse_bytes("2G") == 2 * 10**9 and parse_bytes("0") == 0
    with pytest.raises(SettingsError):
        parse_bytes("lots")


def test_readme_config_table_lists_every_setting():
    readme = (Path(__file__).parents[3] / "README.md").read_text()
    for flag, env, default, doc in settings_mod.describe():
        assert f"`{env}`" in readme and f"`{flag}`" in readme, f"README's configuration table lacks {env}"
        assert f"| `{flag}` | `{env}` | `{default}` | {doc} |" in readme, f"README's row for {env} is not the generated one"


# -- strict values -------------------------------------------------------------------------------------
LITERALS = {  # every enum-like setting: a wrong value, and the choice it is closest to
    "verdict_barrier": ("gatway", "gateway"),
    "backend": ("numab", "numba"),
    "activations": ("int4", "int8"),
    "screen_model": ("Sync", "sync"),
    "screen_judge": ("asnyc", "async"),
    "screen_judge_method": ("prob", "probe"),
    "kv_evict_mode": ("exakt", "exact"),
    "log_level": ("debug", "DEBUG"),
    "upstream_wire": ("antropic", "anthropic"),
}


def test_every_enum_like_setting_is_a_literal_and_listed_here():
    literal = {f.name for f in settings_mod.setting_fields()
               if get_origin(get_args(f.type)[0]) is Literal}
    assert literal == set(LITERALS)


@pytest.mark.parametrize("name", sorted(LITERALS))
def test_a_wrong_choice_is_one_line_with_the_choices_and_a_suggestion(name):
    wrong, closest = LITERALS[name]
    field = next(f for f in settings_mod.setting_fields() if f.name == name)
    choices = ", ".join(get_args(get_args(field.type)[0]))
    env = f"FAK_{name.upper()}"
    with pytest.raises(SettingsError) as exc:
        Settings.load(env={env: wrong})
    assert str(exc.value) == f"{env}={wrong}: expected one of {choices} (did you mean {closest}?)"
    parser = argparse.ArgumentParser()
    settings_mod.add_arguments(parser)
    flag = "--" + name.replace("_", "-")
    with pytest.raises(SettingsError, match=f"^{flag}={wrong}: expected one of "):  # a flag is named as a flag
        Settings.load(env={}, args=parser.parse_args([flag, wrong]))
    with pytest.raises(SettingsError, match=f"^{name}={wrong}: expected one of "):
        Settings.load(env={}, **{name: wrong})
    assert getattr(Settings.load(env={env: closest}), name) == closest


def test_the_issue_examples():
    with pytest.raises(SettingsError, match=r"^FAK_VERDICT_BARRIER=gatway: expected one of engine, gateway \(did you mean gateway\?\)$"):
        Settings.load(env={"FAK_VERDICT_BARRIER": "gatway"})
    with pytest.raises(SettingsError, match=r"^FAK_ADJUDICATE=ture: .*\(did you mean true\?\)$"):
        Settings.load(env={"FAK_ADJUDICATE": "ture"})  # used to read as False: screening off
    with pytest.raises(SettingsError, match=r"^FAK_SCREEN_MODEL=Sync: .*\(did you mean sync\?\)$"):
        Settings.load(env={"FAK_SCREEN_MODEL": "Sync"})


@pytest.mark.parametrize("text, value", [("true", True), ("TRUE", True), ("1", True), ("yes", True), ("On", True),
                                         ("false", False), ("False", False), ("0", False), ("no", False), ("OFF", False),
                                         (" on ", True)])
def test_booleans_read_only_the_usual_words(text, value):
    assert Settings.load(env={"FAK_ADJUDICATE": text}).adjudicate is value
    assert Settings.load(env={"FAK_KV_VERIFY": text}).kv_verify is value


@pytest.mark.parametrize("text", ["ture", "", "2", "enabled", "y", "nope"])
def test_any_other_boolean_is_an_error(text):
    with pytest.raises(SettingsError, match="^FAK_ADJUDICATE=.*: expected one of true, false, 1, 0, yes, no, on, off"):
        Settings.load(env={"FAK_ADJUDICATE": text})


@pytest.mark.parametrize("env, line", [
    ({"FAK_MAX_SESSIONS": "4.5"}, "FAK_MAX_SESSIONS=4.5: expected a whole number"),
    ({"FAK_IDLE_TIMEOUT_S": "soon"}, "FAK_IDLE_TIMEOUT_S=soon: expected a number"),
    ({"FAK_IDLE_TIMEOUT_S": "nan"}, "FAK_IDLE_TIMEOUT_S=nan: expected a number"),
    ({"FAK_KV_BUDGET": "lots"}, "FAK_KV_BUDGET=lots: expected a size (examples: 0, 4096, 512MiB, 2GiB)"),
    ({"FAK_KV_BUDGET": "-1GiB"}, "FAK_KV_BUDGET=-1GiB: expected a size (examples: 0, 4096, 512MiB, 2GiB)"),
])
def test_numbers_and_sizes_must_parse_at_load(env, line):
    with pytest.raises(SettingsError) as exc:
        Settings.load(env=env)
    assert str(exc.value) == line


def test_unknown_fak_variables_are_errors_naming_the_closest_setting():
    with pytest.raises(SettingsError) as exc:
        Settings.load(env={"FAK_ADJUDICAT": "0"})
    assert str(exc.value) == "FAK_ADJUDICAT: no such setting (did you mean FAK_ADJUDICATE?)"
    with pytest.raises(SettingsError, match="^FAK_API_KEY: no such setting \\(did you mean FAK_API_KEYS\\?\\)$"):
        Settings.load(env={"FAK_API_KEY": "sk-secret"})  # the value, perhaps a key, is not repeated
    with pytest.raises(SettingsError, match="^FAK_WHATEVER: no such setting"):
        Settings.load(env={"FAK_WHATEVER": "1"})
    with pytest.raises(SettingsError, match="^max_sesions: no such setting \\(did you mean max_sessions\\?\\)$"):
        Settings.load(env={}, max_sesions=3)
    # fak's variables that are not settings, and anything without the prefix, pass
    ok = {"FAK_TEST_SUPERVISION_TAG": "x", "FAK_TEST_KEY": "k", "FAK_BENCH_DIR": "/tmp", "FAK_LLAMA_BENCH": "/b",
          "FAK_GATEWAY_PORT": "8080", "FAK_PROMETHEUS_PORT": "9090", "PATH": "/bin", "fak_port": "x"}
    assert Settings.load(env=ok) == Settings.load(env={})


def test_every_fak_variable_compose_uses_is_a_setting_or_allowed():
    import re

    text = (Path(__file__).parents[3] / "compose.yaml").read_text()
    known = {env for _flag, env, _default, _doc in settings_mod.describe()} | settings_mod.NOT_SETTINGS
    names = re.findall(r"FAK_[A-Z0-9_]*[A-Z0-9](?![A-Z0-9_*])", text)  # not globs in comments (FAK_NATS_*_PASSWORD)
    unknown = {name for name in names if name not in known}
    assert not unknown, f"compose.yaml uses {sorted(unknown)}: add them to settings.NOT_SETTINGS or make them settings"


# -- secrets -------------------------------------------------------------------------------------------
def test_keys_files_merge_with_inline_keys(tmp_path):
    api = tmp_path / "api-keys"
    api.write_text("# the agents' keys\nsk-file-1\n\n   sk-file-2  \n# sk-commented-out\nsk-inline\n")
    admin = tmp_path / "admin-keys"
    admin.write_text("adm-file\n")
    s = Settings.load(env={"FAK_API_KEYS": "sk-inline,sk-env", "FAK_API_KEYS_FILE": str(api),
                           "FAK_ADMIN_KEYS_FILE": str(admin)})
    assert s.api_keys == ("sk-file-1", "sk-file-2", "sk-inline", "sk-env")
    assert s.admin_keys == ("adm-file",)
    # a child gets the files' paths and only the inline keys; reading them again gives the same settings
    env = s.to_env()
    assert env["FAK_API_KEYS_FILE"] == str(api) and env["FAK_ADMIN_KEYS_FILE"] == str(admin)
    assert env["FAK_API_KEYS"] == "sk-env" and env["FAK_ADMIN_KEYS"] == ""
    assert not any("sk-file" in v or "adm-file" in v for v in env.values())
    assert Settings.load(env=env) == s
    parser = argparse.ArgumentParser()
    settings_mod.add_arguments(parser)
    flagged = Settings.load(env={}, args=parser.parse_args(["--admin-keys-file", str(admin), "--admin-keys", "adm-2"]))
    assert flagged.admin_keys == ("adm-file", "adm-2")


def test_a_missing_or_empty_keys_file_is_an_error_naming_it(tmp_path):
    missing = tmp_path / "nope"
    with pytest.raises(SettingsError, match=f"^FAK_API_KEYS_FILE={missing}: cannot read the keys file"):
        Settings.load(env={"FAK_API_KEYS_FILE": str(missing)})
    parser = argparse.ArgumentParser()
    settings_mod.add_arguments(parser)
    with pytest.raises(SettingsError, match=f"^--admin-keys-file={missing}: cannot read the keys file"):
        Settings.load(env={}, args=parser.parse_args(["--admin-keys-file", str(missing)]))
    with pytest.raises(SettingsError, match="cannot read the keys file"):
        Settings.load(env={"FAK_API_KEYS_FILE": str(tmp_path)})  # a directory
    empty = tmp_path / "empty"
    empty.write_text("# nobody yet\n\n")
    with pytest.raises(SettingsError, match=f"^FAK_API_KEYS_FILE={empty}: the keys file holds no key$"):
        Settings.load(env={"FAK_API_KEYS_FILE": str(empty)})  # not "no key is required"


def test_keys_never_show_in_a_repr(tmp_path):
    keys = tmp_path / "keys"
    keys.write_text("sk-from-file\n")
    s = Settings.load(env={"FAK_API_KEYS": "sk-inline", "FAK_API_KEYS_FILE": str(keys), "FAK_ADMIN_KEYS": "adm-secret",
                           "FAK_NATS_PASSWORD": "hunter2"})
    for text in (repr(s), str(s), f"{s}"):
        assert not any(secret in text for secret in ("sk-inline", "sk-from-file", "adm-secret", "hunter2")), text
        assert "api_keys=***" in text and str(keys) in text


def test_tenants_map_keys_strictly_and_never_name_a_key(tmp_path):
    from fakcore.policy import key_id

    keys = tmp_path / "keys"
    keys.write_text("sk-file\n")
    env = {"FAK_API_KEYS": "sk-1,sk-2,sk-3", "FAK_API_KEYS_FILE": str(keys)}
    s = Settings.load(env={**env, "FAK_TENANTS": "acme=sk-1, acme=sk-file,globex=sk-2"})
    assert s.tenant_of() == {key_id("sk-1"): "acme", key_id("sk-file"): "acme", key_id("sk-2"): "globex"}
    assert Settings.load(env=s.to_env()).tenant_of() == s.tenant_of()  # what a child process reads
    assert "tenants=***" in repr(s) and "sk-1" not in repr(s)
    assert Settings.load(env=env).tenant_of() == {}
    for value, line in (("acme", "FAK_TENANTS: entry 1 is not tenant=key"),
                        ("acme=sk-1,=sk-2", "FAK_TENANTS: entry 2 is not tenant=key"),
                        ("a b=sk-1", "FAK_TENANTS: entry 1 is not tenant=key"),
                        ("acme=sk-secret-typo", "FAK_TENANTS: entry 1 (tenant acme): the key is none of the api_keys"),
                        ("acme=sk-1,globex=sk-1", "FAK_TENANTS: entry 2: the key is in tenants acme and globex")):
        with pytest.raises(SettingsError) as err:
            Settings.load(env={**env, "FAK_TENANTS": value})
        assert str(err.value).startswith(line) and "sk-" not in str(err.value), (value, str(err.value))
    with pytest.raises(SettingsError, match="^tenants: entry 1 .*none of the api_keys$"):
        Settings.load(env={}, tenants=("acme=sk-1",))  # no API keys at all


def test_tenants_come_from_a_file_too_and_a_child_gets_only_its_path(tmp_path):
    from fakcore.policy import key_id

    entries = tmp_path / "tenants"
    entries.write_text("# who shares a cache\nacme=sk-1\n\nacme = sk-2\n")
    env = {"FAK_API_KEYS": "sk-1,sk-2,sk-3", "FAK_TENANTS_FILE": str(entries), "FAK_TENANTS": "globex=sk-3"}
    s = Settings.load(env=env)
    assert s.tenant_of() == {key_id("sk-1"): "acme", key_id("sk-2"): "acme", key_id("sk-3"): "globex"}
    child = s.to_env()
    assert child["FAK_TENANTS"] == "globex=sk-3" and child["FAK_TENANTS_FILE"] == str(entries)
    assert Settings.load(env=child).tenant_of() == s.tenant_of()
    entries.write_text("acme=sk-typo\n")
    with pytest.raises(SettingsError, match=f"^FAK_TENANTS_FILE={entries}: entry 1 .tenant acme.: the key is none"):
        Settings.load(env=env)
    entries.write_text("# nothing\n")
    with pytest.raises(SettingsError, match=f"^FAK_TENANTS_FILE={entries}: the keys file holds no entry$"):
        Settings.load(env=env)


def test_the_launcher_puts_no_setting_on_a_command_line(tmp_path, monkeypatch):
    from fakcore import launcher

    keys = tmp_path / "keys"
    keys.write_text("sk-from-file\n")
    seen = {}

    class FakePopen:
        def __init__(self, argv, env, **kwargs):
            seen.update(argv=argv, env=env)

    monkeypatch.setattr(launcher.subprocess, "Popen", FakePopen)
    s = Settings.load(env={"FAK_API_KEYS": "sk-inline", "FAK_API_KEYS_FILE": str(keys), "FAK_ADMIN_KEYS": "adm"})
    launcher.Topology(s).spawn("gateway")
    assert seen["argv"][1:] == ["-m", "fak_gateway"]
    assert seen["env"]["FAK_API_KEYS"] == "sk-inline" and seen["env"]["FAK_API_KEYS_FILE"] == str(keys)
    assert "sk-from-file" not in " ".join(seen["env"].values())


# -- the fak command -----------------------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.parametrize("bad, line", [
    ({"FAK_VERDICT_BARRIER": "gatway"}, "FAK_VERDICT_BARRIER=gatway: expected one of engine, gateway (did you mean gateway?)"),
    ({"FAK_ADJUDICAT": "0"}, "FAK_ADJUDICAT: no such setting (did you mean FAK_ADJUDICATE?)"),
])
def test_fak_up_with_a_bad_setting_exits_2_and_starts_nothing(tmp_path, bad, line):
    port = _free_port()
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("FAK_")}, "FAK_PORT": str(port),
           "FAK_DATA_DIR": str(tmp_path / "data"), "FAK_CACHE_DIR": str(tmp_path / "cache"), **bad}
    t0 = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "fakcore.cli", "up"], env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 2, done.stderr
    assert time.monotonic() - t0 < 10
    assert done.stderr.strip() == f"fak: {line}" and done.stdout == ""
    assert not (tmp_path / "data").exists()  # no nats-server was started
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))  # and no gateway


def test_fak_serve_with_a_bad_flag_exits_2(monkeypatch, capsys):
    from fakcore import cli

    for key in [k for k in os.environ if k.startswith("FAK_")]:
        monkeypatch.delenv(key)
    assert cli.main(["serve", "gateway", "--screen-model", "Sync"]) == 2
    assert capsys.readouterr().err == "fak: --screen-model=Sync: expected one of sync, async, off (did you mean sync?)\n"


# -- TLS files and stream replicas ---------------------------------------------------------------------
def test_a_tls_file_that_cannot_be_read_is_an_error_naming_the_setting(tmp_path):
    missing = tmp_path / "nope.pem"
    for name in ("ca", "cert", "key", "server_cert", "server_key"):
        env = f"FAK_NATS_TLS_{name.upper()}"
        with pytest.raises(SettingsError, match=f"^{env}={missing}: cannot read the file \\(No such file or directory\\)$"):
            Settings.load(env={env: str(missing)})
    parser = argparse.ArgumentParser()
    settings_mod.add_arguments(parser)
    with pytest.raises(SettingsError, match=f"^--nats-tls-ca={tmp_path}: cannot read the file"):  # a directory
        Settings.load(env={}, args=parser.parse_args(["--nats-tls-ca", str(tmp_path)]))


def test_a_certificate_needs_its_key_and_tls_turns_on_with_any_of_its_settings(tmp_path):
    pem = tmp_path / "x.pem"
    pem.write_text("-----BEGIN CERTIFICATE-----\n")  # read, not parsed, here (bus.tls_context parses)
    with pytest.raises(SettingsError, match=f"^FAK_NATS_TLS_CERT={pem}: FAK_NATS_TLS_KEY is not set"):
        Settings.load(env={"FAK_NATS_TLS_CERT": str(pem)})
    with pytest.raises(SettingsError, match=f"^FAK_NATS_TLS_SERVER_KEY={pem}: FAK_NATS_TLS_SERVER_CERT is not set"):
        Settings.load(env={"FAK_NATS_TLS_SERVER_KEY": str(pem)})
    assert not Settings.load(env={"FAK_NATS_URL": "nats://h:4222"}).nats_tls
    assert Settings.load(env={"FAK_NATS_URL": "nats://a:4222, tls://b:4222"}).nats_tls
    assert Settings.load(env={"FAK_NATS_TLS_CA": str(pem)}).nats_tls
    s = Settings.load(env={"FAK_NATS_TLS_CERT": str(pem), "FAK_NATS_TLS_KEY": str(pem)})
    assert s.nats_tls and Settings.load(env=s.to_env()) == s


@pytest.mark.parametrize("text, line", [
    ("0", "FAK_STREAM_REPLICAS=0: expected a whole number from 1 to 5"),
    ("6", "FAK_STREAM_REPLICAS=6: expected a whole number from 1 to 5"),
    ("three", "FAK_STREAM_REPLICAS=three: expected a whole number"),
])
def test_stream_replicas_are_1_to_5(text, line):
    assert Settings.load(env={}).stream_replicas == 1
    assert Settings.load(env={"FAK_STREAM_REPLICAS": "3"}).stream_replicas == 3
    with pytest.raises(SettingsError) as exc:
        Settings.load(env={"FAK_STREAM_REPLICAS": text})
    assert str(exc.value) == line
    with pytest.raises(SettingsError, match="^stream_replicas=0: expected a whole number from 1 to 5$"):
        Settings.load(env={}, stream_replicas=0)


def test_fak_up_refuses_what_its_embedded_server_cannot_do(tmp_path):
    from fakcore.launcher import StartupError, Topology, embedded_tls
    from fakcore.natsd import ServerTLS

    pem = tmp_path / "x.pem"
    pem.write_text("x\n")
    server = {"nats_tls_server_cert": str(pem), "nats_tls_server_key": str(pem)}
    client = {"nats_tls_cert": str(pem), "nats_tls_key": str(pem)}
    cases = [({"stream_replicas": 3}, "^FAK_STREAM_REPLICAS=3: the embedded nats-server is one node"),
             ({"nats_url": "nats://h:4222", **server}, "^FAK_NATS_TLS_SERVER_CERT is the certificate of the embedded"),
             ({**server, **client}, "^FAK_NATS_TLS_CERT with FAK_NATS_TLS_SERVER_CERT: .* FAK_NATS_TLS_CA, which is not set")]
    for overrides, line in cases:
        with pytest.raises(StartupError, match=line):
            Topology(Settings.load(env={}, data_dir="temp", **overrides)).start()  # before anything starts
    assert embedded_tls(Settings.load(env={}, stream_replicas=3, nats_url="nats://h:4222")) is None  # a cluster's
    assert embedded_tls(Settings.load(env={}, **server)) == ServerTLS(str(pem), str(pem))


def test_the_state_checkpoint_spacing_is_a_positive_whole_number():
    assert Settings.load(env={}).state_checkpoint_every == 256
    assert Settings.load(env={"FAK_STATE_CHECKPOINT_EVERY": "64"}).state_checkpoint_every == 64
    for text in ("0", "-4"):
        with pytest.raises(SettingsError, match=f"^FAK_STATE_CHECKPOINT_EVERY={text}: expected a whole number from 1 to"):
            Settings.load(env={"FAK_STATE_CHECKPOINT_EVERY": text})
