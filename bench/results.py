"""bench/RESULTS.md: one section per benchmark, each under its own top-level heading. A benchmark's --write
replaces its own section (to the next top-level heading) or appends it; the others stay as they are."""

from __future__ import annotations

from pathlib import Path

PATH = Path(__file__).with_name("RESULTS.md")


def write_section(heading: str, body: str, path: Path = PATH) -> Path:
    old = path.read_text() if path.exists() else ""
    section = f"{heading}\n\n{body.strip()}\n"
    start = old.find(heading + "\n")
    if start < 0:
        new = old.rstrip("\n") + ("\n\n\n" if old else "") + section
    else:
        nxt = old.find("\n# ", start + len(heading))
        new = old[:start] + section + ("\n\n" + old[nxt + 1:] if nxt >= 0 else "")
    path.write_text(new)
    return path
