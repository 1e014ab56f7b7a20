"""Bring the shipped NATS configuration in line with the code, after libs/fakcore/permissions.py changed:

    python deploy/nats/sync.py

writes deploy/nats/permissions.conf (the permission table, rendered) and copies it and nats-cluster.conf
into the nats-config ConfigMap of deploy/k8s/nats.yaml. tests/unit/core/test_deploy.py fails until then.
"""

from __future__ import annotations

from pathlib import Path

from fakcore.permissions import render

DEPLOY = Path(__file__).resolve().parents[1]


def block(text: str, indent: str = "    ") -> str:
    """`text` as the body of a YAML literal block (`key: |`)."""
    return "".join(indent + line if line.strip() else "\n" for line in text.rstrip("\n").splitlines(keepends=True)) + "\n"


def main() -> None:
    (DEPLOY / "nats/permissions.conf").write_text(render())
    manifest = DEPLOY / "k8s/nats.yaml"
    text = manifest.read_text()
    start = text.index("  nats.conf: |\n")
    end = text.index("---\n", start)  # the ConfigMap is the first document
    data = ("  nats.conf: |\n" + block((DEPLOY / "nats/nats-cluster.conf").read_text())
            + "  permissions.conf: |\n" + block((DEPLOY / "nats/permissions.conf").read_text()))
    manifest.write_text(text[:start] + data + text[end:])


if __name__ == "__main__":
    main()
