"""Routes: model ids, globs and aliases to the in-kernel engine or named upstreams; mistakes fail at start-up."""

from __future__ import annotations

import pytest

from fakcore.launcher import services_for
from fakcore.routes import DEFAULT_UPSTREAM, RoutesError, RouteTable
from fakcore.settings import Settings, SettingsError

ROUTES = """
upstreams:
  local: {url: "http://127.0.0.1:9/v1", wire: openai}
  claude: {url: "http://127.0.0.1:9", wire: anthropic, auth: key, api_key_env: FAK_TEST_KEY}
routes:
  - {model: ["claude-*", "sonnet"], upstream: local, rewrite: qwen-local}
  - {model: smollm2-135m, engine: smollm2-135m}
  - {model: tiny, engine: synthetic}
  - {model: "gpt-*", upstream: claude}
"""


def table(tmp_path, text: str = ROUTES) -> RouteTable:
    f = tmp_path / "routes.yaml"
    f.write_text(text)
    return RouteTable.from_settings(Settings.load(env={}, routes=str(f)))


def test_first_match_wins_with_rewrites_and_aliases(tmp_path):
    t = table(tmp_path)
    r = t.resolve("claude-sonnet-4-5")
    assert (r.upstream, r.target, r.model) == ("local", "qwen-local", "claude-sonnet-4-5")
    assert t.resolve("tiny").inkernel and t.resolve("tiny").target == "synthetic"
    assert t.resolve("gpt-5").upstream == "claude" and t.resolve("gpt-5").target == "gpt-5"
    assert t.resolve("unrouted").inkernel and t.resolve("unrouted").target == "unrouted"
    assert t.listed() == ["sonnet", "smollm2-135m", "tiny"]
    assert t.needs_engine and services_for(t)[-2:] == ("engine-cpu", "gateway")


def test_base_url_sends_everything_upstream_and_needs_no_engine():
    t = RouteTable.from_settings(Settings.load(env={}, base_url="http://127.0.0.1:9/v1"))
    r = t.resolve("anything")
    assert r.upstream == DEFAULT_UPSTREAM and t.upstreams[DEFAULT_UPSTREAM].wire == "openai"
    assert not t.needs_engine and "engine-cpu" not in services_for(t)
    t2 = RouteTable.from_settings(Settings.load(env={}, base_url="http://h", upstream_wire="anthropic", models=("synthetic",)))
    assert t2.resolve("synthetic").inkernel and t2.resolve("claude").upstream == DEFAULT_UPSTREAM and t2.needs_engine


def test_no_routes_is_all_in_kernel():
    t = RouteTable.from_settings(Settings.load(env={}))
    assert t.resolve("synthetic").inkernel and t.needs_engine and not t.upstreams


@pytest.mark.parametrize("text,match", [
    ("routes:\n  - {model: x, upstream: nowhere}\n", "not defined"),
    ("routes:\n  - {model: x}\n", "exactly one"),
    ("upstreams:\n  u: {url: 'http://h', wrie: openai}\n", "wrie"),
    ("upstreams:\n  u: {url: 'ftp://h'}\n", "http"),
    ("upstreams:\n  u: {url: 'http://h', wire: grpc}\n", "wire"),
    ("upstreams:\n  u: {url: 'http://h', auth: key}\n", "api_key_env"),
    ("routes: [\n", "cannot read"),
])
def test_mistakes_are_errors_naming_what_is_wrong(tmp_path, text, match):
    with pytest.raises(RoutesError, match=match):
        table(tmp_path, text)


def test_base_url_and_routes_together_are_refused(tmp_path):
    with pytest.raises(RoutesError, match="not both"):
        RouteTable.from_settings(Settings.load(env={}, routes=str(tmp_path / "r.yaml"), base_url="http://h"))
    with pytest.raises(SettingsError, match="^upstream_wire=grpc: expected one of openai, anthropic"):
        Settings.load(env={}, base_url="http://h", upstream_wire="grpc")  # a Literal: refused at load
    with pytest.raises(RoutesError, match="upstream-wire"):
        RouteTable.load(base_url="http://h", upstream_wire="grpc")


def test_the_readmes_routes_files_are_valid():
    """Every routes file the README shows (a yaml block with `routes:`) loads as it is written."""
    import re
    from pathlib import Path

    import msgspec
    import yaml

    from fakcore.routes import RoutesFile

    readme = (Path(__file__).parents[3] / "README.md").read_text()
    blocks = [b for b in re.findall(r"```yaml\n(.*?)```", readme, re.S) if "routes:" in b]
    assert len(blocks) >= 2
    for block in blocks:
        RouteTable(msgspec.convert(yaml.safe_load(block), RoutesFile))
