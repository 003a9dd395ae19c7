"""The ``localsession`` command line.

Each command imports what it needs only when it runs: ``localsession --help`` loads neither
torch nor the conformance suite. A configuration mistake (an unusable home, a bad model map, a
port in use) prints one line, ``localsession <command>: error: ...``, and exits 2.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from localsession._version import __version__
from localsession.cli_parser import SuggestingParser
from localsession.cli_serve import add_serve
from localsession.runtime.home import ConfigError

DESCRIPTION = """\
An emulator of Amazon SageMaker's training-session API on this machine.

State (model packages, session records, models.json) lives in $LOCALSESSION_HOME,
default ~/.localsession. Run `localsession COMMAND --help` for a command's options."""

CONFORMANCE_EPILOG = """\
Any other option is passed to pytest, for example:
  -k EXPR, -x, -q, -v          select tests, stop at the first failure, verbosity
  --capabilities A,B|all|none  declare these capabilities instead of the backend's own
  --drop-capability NAME       treat the backend as not declaring NAME (repeatable)
  --xfail-file FILE            known divergences, instead of the backend's own file
  --base-model NAME            the base model sessions are created on
  --base-url URL               --backend=tinker: a Tinker server (else a loopback serve)
  --learning-rate LR, --rank R, --lora-alpha A
                               what the suite trains with (default: the backend's)
  --numeric-stack shared|split --backend=tinker: one engine, or a sampler beside a trainer
  --remote-region R, --remote-role ARN, --remote-base-model NAME, --remote-group ARN,
  --remote-s3 URI              settings of --backend=remote (or CONFORMANCE_* variables)
  --max-sessions N, --gap-timeout S, --op-timeout S, --min-max-tokens N,
  --heartbeat-timeout S, --idle-timeout S
                               the server's limits, for a backend that cannot know them
                               (http=URL, a Tinker --base-url); a test needing an
                               undeclared one skips
A backend that cannot be started (for example remote without AWS credentials) fails the run.
See conformance/README.md."""


def _wrap(text: str) -> str:
    """A description for the raw formatters (which keep the epilog's examples as written)."""
    import textwrap

    return textwrap.fill(text, 88)


def _parser() -> argparse.ArgumentParser:
    parser = SuggestingParser(prog="localsession", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"localsession {__version__}")
    commands = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", help="one of:"
    )
    demo = commands.add_parser(
        "demo",
        help="a short SFT loop on a built-in model (`make demo` is GRPO on a real model)",
        description="A short SFT loop on a built-in model: held-out loss per token before and "
        "after. `make demo` runs the GRPO example on SmolLM2-135M-Instruct instead.",
    )
    demo.add_argument(
        "--model", default="localsession/tiny", help="base model (default: %(default)s)"
    )
    demo.add_argument("--steps", type=int, help="SFT steps (default 60)")
    demo.add_argument("--learning-rate", type=float, help="the Adam learning rate")
    demo.add_argument("--sft", action="store_true", help="the SFT demo (the default; accepted)")
    plot = commands.add_parser(
        "plot",
        help="draw a run directory's metrics.jsonl as a PNG",
        description="Draw the curves in RUN_DIR/metrics.jsonl as a PNG (needs matplotlib: "
        "pip install -e '.[plot]').",
    )
    plot.add_argument("run_dir", help="a run directory holding metrics.jsonl")
    plot.add_argument("--out", help="PNG path (default RUN_DIR/metrics.png)")
    add_serve(commands)
    commands.add_parser(
        "models",
        help="list the base models a session can start on",
        description="List the base models: the built-ins, the model map "
        "($LOCALSESSION_MODEL_MAP and $LOCALSESSION_HOME/models.json), then models in the "
        "local Hugging Face cache. Reads only; creates nothing.",
    )
    _add_packages(commands)
    _add_conformance(commands)
    from localsession.parity.record_command import add_record

    add_record(commands)
    from localsession.server.console.trace_command import add_trace

    add_trace(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args, extra = parser.parse_known_args(argv)
    if extra and args.command != "conformance":
        # The subcommand's own parser, so the suggestion comes from its options.
        commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        commands.choices[args.command].error(f"unrecognized arguments: {' '.join(extra)}")
    try:
        return _dispatch(args, extra)
    except ConfigError as exc:
        print(f"localsession {args.command}: error: {exc}", file=sys.stderr)
        return 2


def _missing_conformance_packages() -> str:
    """The first package of the ``conformance`` extra that cannot be imported, or ``""``."""
    import importlib.util

    for name in ("pytest", "hypothesis"):
        try:
            found = importlib.util.find_spec(name)
        except (ImportError, ValueError):  # a module of that name that is not a package
            found = None
        if found is None:
            return name
    return ""


def snapshot_args(update: Path | None, check: Path | None) -> list[str]:
    """The plugin options ``--snapshot-update``/``--snapshot-check`` stand for."""
    return [f"--snapshot-update={update}"] if update else [f"--snapshot-check={check}"]


def _dispatch(args: argparse.Namespace, extra: list[str]) -> int:
    if args.command == "conformance" and args.selfcheck is not None:
        from conformance.mutation import run_selfcheck

        return run_selfcheck(args.selfcheck)
    if args.command == "conformance":
        missing = _missing_conformance_packages()
        if missing:
            print(
                f"localsession conformance: error: the conformance suite needs {missing}, "
                "which is not installed: pip install 'localsession[conformance]'",
                file=sys.stderr,
            )
            return 2
        from conformance.run import run_suite

        if args.snapshot_update or args.snapshot_check:
            extra = [*extra, *snapshot_args(args.snapshot_update, args.snapshot_check)]
        if args.snapshot_report is not None:
            if args.snapshot_check is None:
                run_parser = "localsession conformance: error:"
                print(f"{run_parser} --snapshot-report needs --snapshot-check DIR", file=sys.stderr)
                return 2
            extra = [*extra, f"--snapshot-report={args.snapshot_report}"]
        return run_suite(args.backend, args.report, args.slow, extra)
    if args.command == "conformance-table":
        from conformance.run import render

        return render(args.reports, args.output)
    if args.command == "packages":
        from localsession.packages_cli import run_packages

        return run_packages(args)
    if args.command == "record":
        from localsession.parity.record_command import run_record

        return run_record(args)
    if args.command == "trace":
        from localsession.server.console.trace_command import run_trace

        return run_trace(args)
    if args.command == "serve":
        from localsession.server.serve import ServeOptions, serve

        options = ServeOptions(**{k: v for k, v in vars(args).items() if k != "command"})
        if options.replay is not None:  # answers from a cassette, checking its own options
            from localsession.parity.running import serve_replay

            return serve_replay(options)
        return serve(options)
    if args.command == "demo":
        from localsession.demo import cli

        return cli(args)
    if args.command == "plot":
        from localsession.plot import cli as plot_cli

        return plot_cli(args.run_dir, args.out)
    from localsession.runtime.models.catalog import LocalCatalog

    try:
        names = LocalCatalog().names()
    except ValueError as exc:  # a malformed model map: one line naming it
        print(f"localsession models: error: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 2
    for name in names:
        print(name)
    return 0


def _add_packages(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    packages = commands.add_parser(
        "packages",
        help="list, show, delete and prune saved model packages",
        description="Manage the model packages that save_state() and save_weights_for_sampler() "
        "wrote under $LOCALSESSION_HOME/packages.",
    )
    verbs = packages.add_subparsers(dest="verb", required=True, metavar="VERB", help="one of:")
    listing = verbs.add_parser(
        "list",
        help="packages, newest first",
        description="One package per line, newest first: "
        "ARN, kind, base model, creation time, description. Reads only; creates nothing.",
    )
    listing.add_argument("--group", help="only this model package group (name or ARN)")
    listing.add_argument("--kind", choices=["checkpoint", "model"], help="only this kind")
    show = verbs.add_parser("show", help="one package as JSON", description="Describe one package.")
    show.add_argument("arn", help="the model package ARN")
    delete = verbs.add_parser(
        "delete",
        help="delete a package",
        description="Delete one package. Without "
        "--delete-artifacts its files move to $LOCALSESSION_HOME/retained/.",
    )
    delete.add_argument("arn", help="the model package ARN")
    delete.add_argument(
        "--delete-artifacts", action="store_true", help="also delete its files (else kept)"
    )
    prune = verbs.add_parser(
        "prune",
        help="delete old packages and their files (a dry run unless --yes)",
        description=_wrap(
            "Delete the packages outside what you keep, files included: the newest N of each "
            "group stay (--keep-latest), and/or only packages older than AGE may go "
            "(--older-than). A dry run that lists what would go, unless --yes."
        ),
        epilog="Examples:\n  localsession packages prune --keep-latest 2\n"
        "  localsession packages prune --group my-run --older-than 7d --yes",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    prune.add_argument("--group", action="append", help="only this group (repeatable)")
    prune.add_argument("--kind", choices=["checkpoint", "model"], help="only this kind")
    prune.add_argument(
        "--keep-latest", type=int, metavar="N", help="keep the newest N packages of each group"
    )
    prune.add_argument(
        "--older-than", metavar="AGE", help="only packages older than AGE: 90s, 30m, 12h, 7d"
    )
    prune.add_argument("--yes", action="store_true", help="delete; without it, only list")


def _add_conformance(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    run = commands.add_parser(
        "conformance",
        help="run the conformance suite against a backend (other options go to pytest)",
        description=_wrap(
            "Run the conformance suite (a pytest suite of the public API) against a backend "
            "and exit with pytest's status."
        ),
        epilog=CONFORMANCE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    run.add_argument(
        "--backend",
        default="inprocess",
        help="inprocess (default) | http | http=URL | fakes | remote | tinker | "
        "import:module:factory",
    )
    run.add_argument("--report", type=Path, help="write the JSON report here")
    run.add_argument("--slow", action="store_true", help="also run the slow tests")
    run.add_argument(
        "--selfcheck",
        nargs="*",
        metavar="DEFECT",
        help="instead of a backend, plant each known defect (or the DEFECTs named) in both "
        "dialects, run the tests named to catch it with no --capabilities, and print the "
        "score caught/planted (conformance/mutation.py)",
    )
    snapshots = run.add_mutually_exclusive_group()
    snapshots.add_argument(
        "--snapshot-update",
        type=Path,
        metavar="DIR",
        help="record each test's normalised responses into DIR, with validation.json",
    )
    snapshots.add_argument(
        "--snapshot-check",
        type=Path,
        metavar="DIR",
        help="compare each test's responses with DIR's snapshots; print a parity report",
    )
    run.add_argument(
        "--snapshot-report",
        type=Path,
        metavar="OUT.json",
        help="with --snapshot-check: also write the parity report (every recorded test: "
        "agree, differ, not run and why) as JSON",
    )
    table = commands.add_parser(
        "conformance-table",
        help="render conformance reports as a markdown table",
        description="Render JSON reports from `conformance --report` as one markdown table.",
    )
    table.add_argument("reports", nargs="+", type=Path, help="JSON report files")
    table.add_argument("-o", "--output", type=Path, help="write here instead of stdout")


if __name__ == "__main__":
    sys.exit(main())
