"""The ``localsession`` command line: ``demo``, ``plot``, ``serve``, ``models``, ``packages``,
``conformance`` and ``conformance-table``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="localsession", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser(
        "demo", help="a short SFT loop on a built-in model (`make demo`: GRPO on a real model)"
    )
    demo.add_argument("--model", default="localsession/tiny")
    demo.add_argument("--steps", type=int, help="SFT steps (60)")
    demo.add_argument("--learning-rate", type=float)
    demo.add_argument("--sft", action="store_true", help="the SFT demo (the default; accepted)")
    plot = commands.add_parser("plot", help="draw a run directory's metrics.jsonl as a PNG")
    plot.add_argument("run_dir", help="a run directory holding metrics.jsonl")
    plot.add_argument("--out", help="PNG path (default RUN_DIR/metrics.png)")
    _add_serve(commands)
    commands.add_parser("models", help="list the base models a session can start on")
    packages = commands.add_parser("packages", help="list, inspect and delete model packages")
    verbs = packages.add_subparsers(dest="verb", required=True)
    listing = verbs.add_parser("list", help="packages, newest first")
    listing.add_argument("--group", help="only this model package group (name or ARN)")
    listing.add_argument("--kind", choices=["checkpoint", "model"])
    verbs.add_parser("show", help="one package as JSON").add_argument("arn")
    delete = verbs.add_parser("delete", help="delete a package")
    delete.add_argument("arn")
    delete.add_argument(
        "--delete-artifacts", action="store_true", help="also delete its files (else kept)"
    )
    from conformance.run import add_commands

    add_commands(commands)
    args, extra = parser.parse_known_args(argv)
    if extra and args.command != "conformance":
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if args.command == "conformance":
        from conformance.run import run_suite

        return run_suite(args.backend, args.report, args.slow, extra)
    if args.command == "conformance-table":
        from conformance.run import render

        return render(args.reports, args.output)
    if args.command == "packages":
        return _packages(args)
    if args.command == "serve":
        from localsession.server.serve import ServeOptions, serve

        return serve(ServeOptions(**{k: v for k, v in vars(args).items() if k != "command"}))

    if args.command == "demo":
        from localsession.demo import cli

        return cli(args)
    if args.command == "plot":
        from localsession.plot import cli as plot_cli

        return plot_cli(args.run_dir, args.out)
    from localsession.runtime.models import list_base_models

    for name in list_base_models():
        print(name)
    return 0


def _add_serve(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    from pathlib import Path

    serve = commands.add_parser(
        "serve", help="serve the SageMaker training-session API over HTTP for the real SDK"
    )
    serve.add_argument("--host", default="127.0.0.1", help="bind address (default: loopback)")
    serve.add_argument("--port", type=int, default=8080, help="0 picks a free port")
    serve.add_argument("--home", type=Path, help="state directory (default $LOCALSESSION_HOME)")
    serve.add_argument("--relaxed", action="store_true", help="lift the service limits")
    serve.add_argument(
        "--model-map",
        action="append",
        default=[],
        metavar="NAME=TARGET",
        help="serve base model NAME (or Hub content name) with local model TARGET",
    )
    serve.add_argument("--max-sessions", type=int, help="concurrent session cap (default 4)")
    serve.add_argument(
        "--gap-timeout", type=float, help="seconds a sequence gap blocks (default 60)"
    )
    serve.add_argument(
        "--lenient-sequence",
        action="store_true",
        help="count a refused op's sequence number as used instead of waiting on it",
    )
    serve.add_argument(
        "--long-poll", type=float, default=15.0, help="seconds a result poll may be held"
    )
    serve.add_argument(
        "--max-queued-ops",
        type=int,
        help="training ops a session may hold queued before submits are throttled (default 1024)",
    )
    serve.add_argument(
        "--auth",
        metavar="ACCESS_KEY:SECRET",
        help="require AWS SigV4 requests signed with these credentials",
    )


def _packages(args: argparse.Namespace) -> int:
    """``packages list|show|delete``, through the same registry operations as the clients."""
    import json

    from localsession.runtime.errors import ServiceError
    from localsession.runtime.service import Service

    service = Service()
    try:
        if args.verb == "list":
            groups = [args.group] if args.group else service.registry.groups()
            for group in groups:
                for p in service.registry.list(group):
                    if args.kind is None or p.kind == args.kind:
                        print(
                            f"{p.arn}\t{p.kind}\t{p.base_model}\t{p.creation_time}\t{p.description}"
                        )
        elif args.verb == "show":
            print(
                json.dumps(
                    service.describe_model_package({"ModelPackageName": args.arn}),
                    indent=2,
                    default=str,
                )
            )
        else:
            result = service.delete_model_package(
                {"ModelPackageName": args.arn}, delete_artifacts=args.delete_artifacts
            )
            kept = result["RetainedAt"]
            print(
                f"deleted {args.arn}"
                + (
                    f"; files kept at {kept}"
                    if kept
                    else f"; {result['ObjectsDeleted']} files deleted"
                )
            )
    except ServiceError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        return 2
    finally:
        service.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
