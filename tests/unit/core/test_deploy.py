"""compose.yaml, the Dockerfile and the Prometheus config are checked here, since no Docker engine runs on
the development and CI machines: schema, lint, and agreement with the code (services, settings)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import jsonschema
import yaml

from fakcore.cli import SERVICES
from fakcore.settings import ENV_PREFIX, describe

ROOT = Path(__file__).parents[3]


def compose() -> dict:
    return yaml.safe_load((ROOT / "compose.yaml").read_text())


def test_compose_matches_the_compose_specification():
    schema = json.loads((ROOT / "tests/data/compose-spec.json").read_text())
    jsonschema.Draft7Validator(schema).validate(compose())


def test_compose_runs_every_service_and_nats_with_jetstream():
    services = compose()["services"]
    commands = {name: s.get("command") for name, s in services.items()}
    served = {c[1] for c in commands.values() if c and c[0] == "serve"}
    assert served == set(SERVICES) - {"engine-cuda"}  # engine-cuda joins with its own issue (per-GPU)
    assert "-js" in services["nats"]["command"]
    assert "prometheus" in services


def test_compose_sets_only_real_settings():
    known = {env for _flag, env, _d, _doc in describe()}
    for name, service in compose()["services"].items():
        for key in service.get("environment") or {}:
            if key.startswith(ENV_PREFIX):
                assert key in known, f"compose service {name} sets {key}, which no setting reads"


def test_prometheus_scrapes_every_service():
    config = yaml.safe_load((ROOT / "deploy/prometheus/prometheus.yml").read_text())
    text = json.dumps(config)
    for target in ("gateway:8080", "adjudicator", "kvmmu", "engine-cpu"):
        assert target in text


def test_dockerfile_lints_clean():
    hadolint = shutil.which("hadolint") or str(Path(__import__("sys").executable).parent / "hadolint")
    result = subprocess.run([hadolint, "--failure-threshold", "warning", str(ROOT / "Dockerfile")], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_dockerfile_copies_what_exists_and_runs_unprivileged():
    lines = [ln.split() for ln in (ROOT / "Dockerfile").read_text().splitlines() if ln and not ln.startswith("#")]
    for words in lines:
        if words[0] == "COPY":
            for src in words[1:-1]:
                assert (ROOT / src).exists(), f"Dockerfile copies missing {src}"
    users = [w[1] for w in lines if w[0] == "USER"]
    assert users and users[-1] not in ("root", "0")
