"""The policy's `screening:` section: parsing with errors that name the file and field, the allowlist, and
what makes a section change verdicts."""

from __future__ import annotations

import pytest

from fakcore.policy import PolicyError, PolicyStore, Screening, key_id, load, load_set, parse

BLOCK = "b" + "0123456789abcdef" * 2

GOOD = f"""
default: allow
screening:
  inline_threshold: 0.6
  model_threshold: 0.9
  mode: flag
  quarantine: spans
  allow:
    tools: [get_weather, "docs_*"]
    sources: [fs]
    blocks: [{BLOCK}]
"""


def test_a_full_section_parses(tmp_path):
    f = tmp_path / "p.yaml"
    f.write_text(GOOD)
    sc = load(f).screening
    assert sc == Screening(inline_threshold=0.6, model_threshold=0.9, mode="flag", replace="spans",
                           allow_tools=("get_weather", "docs_*"), allow_sources=("fs",), allow_blocks=frozenset({BLOCK}))
    assert sc.changes_verdicts


def test_without_a_section_the_settings_decide():
    sc = parse({"default": "deny"}).screening
    assert sc == Screening() and not sc.changes_verdicts and sc.mode == "quarantine" and sc.replace == "whole"
    assert not parse({"screening": {"quarantine": "spans"}}).screening.changes_verdicts  # how, not whether


@pytest.mark.parametrize(("section", "message"), [
    ({"inline_threshold": 1.5}, "screening.inline_threshold: 1.5 is not a number in (0, 1]"),
    ({"model_threshold": "high"}, "screening.model_threshold: 'high' is not a number in (0, 1]"),
    ({"inline_threshold": True}, "screening.inline_threshold: True is not a number"),
    ({"mode": "warn"}, "screening.mode: 'warn' is not one of quarantine, flag"),
    ({"quarantine": "partial"}, "screening.quarantine: 'partial' is not one of whole, spans"),
    ({"allow": {"tools": "get_weather"}}, "screening.allow.tools: expected a list of tool names or globs"),
    ({"allow": {"tools": [""]}}, "screening.allow.tools: expected a list of tool names or globs"),
    ({"allow": {"sources": ["fs__read"]}}, "screening.allow.sources: 'fs__read': a source is an MCP server's name"),
    ({"allow": {"blocks": ["not-a-block"]}}, "screening.allow.blocks: 'not-a-block' is not a block id"),
    ({"allow": {"hosts": ["x"]}}, "screening.allow: unknown field 'hosts'"),
    ({"allow": ["x"]}, "screening.allow: expected a mapping"),
    ({"threshold": 0.5}, "screening: unknown field 'threshold'"),
])
def test_each_bad_field_is_an_error_naming_the_file_and_the_field(tmp_path, section, message):
    import yaml

    f = tmp_path / "tenant.yaml"
    f.write_text(yaml.safe_dump({"default": "allow", "screening": section}))
    with pytest.raises(PolicyError) as e:
        load(f)
    assert str(e.value).startswith(f"{f}: ") and message in str(e.value)


def test_allowlist_by_tool_glob_source_and_block():
    sc = parse({"screening": {"allow": {"tools": ["get_weather", "docs_*"], "sources": ["fs"], "blocks": [BLOCK]}}}).screening
    assert sc.allowed("get_weather", "b1") == "screening.allow.tools.get_weather"
    assert sc.allowed("docs_search", "b1") == "screening.allow.tools.docs_*"
    assert sc.allowed("fs__read_file", "b1") == "screening.allow.sources.fs"
    assert sc.allowed("fsx__read_file", "b1") == "" and sc.allowed("fs", "b1") == "" and sc.allowed("web_fetch", "b1") == ""
    assert sc.allowed("anything", BLOCK) == "screening.allow.blocks"
    # a tool's description (MCP tool poisoning) is exempt by its block only
    assert sc.allowed("get_weather", "b1", "tool_description") == ""
    assert sc.allowed("get_weather", BLOCK, "tool_description") == "screening.allow.blocks"


def test_the_fingerprint_names_what_decides_verdicts():
    a = parse({"screening": {"inline_threshold": 0.5, "quarantine": "spans"}}).screening
    b = parse({"screening": {"inline_threshold": 0.5}}).screening
    c = parse({"screening": {"inline_threshold": 0.6}}).screening
    assert a.fingerprint == b.fingerprint != c.fingerprint


def test_per_key_sections_from_a_folder_and_hot_reload(tmp_path):
    (tmp_path / "default.yaml").write_text("default: allow\n")
    tenant = tmp_path / f"{key_id('sk-t')}.yaml"
    tenant.write_text("screening: {quarantine: spans}\n")
    policies = load_set(tmp_path)
    assert policies.for_key(key_id("sk-t")).screening.replace == "spans"
    assert policies.for_key(key_id("sk-other")).screening == Screening()
    store = PolicyStore(tmp_path)
    tenant.write_text("screening: {mode: flag, inline_threshold: 0.7}\n")
    assert store.check() is True
    assert store.current.for_key(key_id("sk-t")).screening.mode == "flag"
    tenant.write_text("screening: {mode: shout}\n")
    assert store.check() is False and f"{tenant}: screening.mode" in store.error
    assert store.current.for_key(key_id("sk-t")).screening.inline_threshold == 0.7  # the last good one stays
