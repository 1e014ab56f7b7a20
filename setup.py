"""Package list for the mapped layout: libs/fakcore and each services/<name> folder are import packages.

pyproject.toml maps each top-level import name to its folder; this walks those folders so that a new
sub-package is never forgotten by a non-editable install (the container images use one).
"""

from pathlib import Path

from setuptools import setup

ROOTS = {
    "fakcore": "libs/fakcore",
    "fak_gateway": "services/gateway",
    "fak_adjudicator": "services/adjudicator",
    "fak_engine_cpu": "services/engine-cpu",
    "fak_engine_cuda": "services/engine-cuda",
    "fak_kvmmu": "services/kvmmu",
}


def packages() -> list[str]:
    found = []
    for name, folder in ROOTS.items():
        for init in sorted(Path(folder).rglob("__init__.py")):
            rel = init.parent.relative_to(folder)
            found.append(".".join((name, *rel.parts)))
    return found


# fak_gateway/console/ is the operator console's page (HTML, JS, CSS): data, not a package.
setup(packages=packages(), package_data={"fakcore": ["data/*", "data/**/*"], "fak_gateway": ["console/*"]})
