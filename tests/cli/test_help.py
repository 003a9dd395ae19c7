"""The command line explains itself: a version, complete help texts without rST markup, the
conformance pass-through options, and no conformance import to print them (issue 21, item 5;
issue 20, item 6)."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from localsession._version import __version__
from localsession.cli import _parser

from .cli_runner import cli_env, run_cli


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    found: dict[str, argparse.ArgumentParser] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found[name] = sub
                found.update({f"{name} {k}": v for k, v in _subparsers(sub).items()})
    return found


def test_version() -> None:
    done = run_cli("--version")
    assert done.returncode == 0 and done.stdout.strip() == f"localsession {__version__}"


def test_every_command_and_option_is_described_without_rst() -> None:
    parser = _parser()
    commands = _subparsers(parser)
    assert {"demo", "serve", "models", "packages prune", "conformance", "plot"} <= set(commands)
    for name, sub in {"": parser, **commands}.items():
        text = sub.format_help()
        assert "``" not in text and ":func:" not in text, name
        assert sub.description, f"`localsession {name}` has no description"
        for action in sub._actions:
            assert action.help, f"`localsession {name}` option {action.option_strings} has no help"


def test_conformance_help_lists_pass_through_options() -> None:
    text = _subparsers(_parser())["conformance"].format_help()
    for option in ("-k EXPR", "--capabilities", "--drop-capability", "--xfail-file", "--remote-s3"):
        assert option in text


def test_the_cli_does_not_import_conformance_until_it_runs_it() -> None:
    code = (
        "import sys\nfrom localsession.cli import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "assert 'conformance' not in sys.modules, sorted(sys.modules)\n"
        "assert 'torch' not in sys.modules, sorted(sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=cli_env(),
        timeout=600,
    )
    assert done.returncode == 0, done.stderr


@pytest.mark.slow
def test_conformance_on_an_unreachable_backend_fails_loudly(tmp_path: object) -> None:
    done = run_cli(
        "conformance",
        "--backend=remote",
        "-q",
        "-p",
        "no:cacheprovider",
        timeout=300,
        AWS_ACCESS_KEY_ID="",
        AWS_SECRET_ACCESS_KEY="",
    )
    assert done.returncode == 1, done.stdout
    assert "FAILED: backend unavailable: remote backend" in done.stdout
