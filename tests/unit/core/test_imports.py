"""The import direction (docs/architecture.md §1): shared code imports no service, and models never import
the engine (the engine runs models, not the other way round). Read from the source, so a lazy import inside a
function counts too."""

from __future__ import annotations

import ast
from pathlib import Path

from fakcore.cli import SERVICES
from fakcore.service import PACKAGES

ROOT = Path(__file__).resolve().parents[3]
FAKCORE = ROOT / "libs" / "fakcore"


def imported(path: Path) -> set[str]:
    """Every module a file imports, at its top or inside a function (absolute names)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
    return names


def test_shared_code_imports_no_service():
    services = set(PACKAGES.values())
    offenders = {str(p.relative_to(ROOT)): sorted(m for m in imported(p) if m.split(".")[0] in services)
                 for p in FAKCORE.rglob("*.py")}
    assert not {p: m for p, m in offenders.items() if m}


def test_models_never_import_the_engine():
    offenders = {str(p.relative_to(ROOT)): sorted(m for m in imported(p) if m.startswith("fakcore.engine"))
                 for p in (FAKCORE / "models").rglob("*.py")}
    assert not {p: m for p, m in offenders.items() if m}


def test_every_service_runs_as_its_package():
    assert tuple(PACKAGES) == SERVICES
    for name, package in PACKAGES.items():
        main = ROOT / "services" / name / "__main__.py"
        assert main.exists() and f'foreground("{name}", main)' in main.read_text(), name
        assert f"from {package}.main import main" in main.read_text(), name
