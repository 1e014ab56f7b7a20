"""bench/RESULTS.md keeps one section per benchmark: writing one leaves the others as they are."""

from __future__ import annotations

from bench.results import write_section


def test_writing_a_section_replaces_it_and_keeps_the_others(tmp_path):
    path = tmp_path / "RESULTS.md"
    write_section("# Engine", "old engine", path)
    write_section("# Upstream", "upstream numbers", path)
    write_section("# Sessions", "sessions numbers", path)
    write_section("# Engine", "new engine", path)
    text = path.read_text()
    assert "old engine" not in text and text.startswith("# Engine\n\nnew engine\n")
    assert "# Upstream\n\nupstream numbers\n" in text and text.endswith("# Sessions\n\nsessions numbers\n")
    write_section("# Upstream", "again", path)
    assert text.replace("upstream numbers", "again") == path.read_text()
