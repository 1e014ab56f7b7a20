"""Settings: one typed place; env and flags; the README's table lists every setting."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from fakcore import settings as settings_mod
from fakcore.settings import Settings, SettingsError, parse_bytes


def test_defaults():
    s = Settings.load(env={})
    assert (s.host, s.port, s.model, s.backend) == ("127.0.0.1", 8080, "synthetic", "reference")
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
    with pytest.raises(SettingsError, match="port"):
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
    for flag, env, _default, _doc in settings_mod.describe():
        assert f"`{env}`" in readme and f"`{flag}`" in readme, f"README's configuration table lacks {env}"
