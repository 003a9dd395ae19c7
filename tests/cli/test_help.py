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


@pytest.mark.parametrize(
    ("argv", "hint"),
    [
        (["serv"], "did you mean serve?"),
        (["serve", "--prot", "1"], "did you mean --port?"),
        (["packages", "lst"], "did you mean list?"),
        (["demo", "--stesp", "3"], "did you mean --steps?"),
    ],
)
def test_a_typo_gets_a_suggestion(argv: list[str], hint: str) -> None:
    done = run_cli(*argv, timeout=120)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines()[-1].endswith(hint), done.stderr


def test_example_help_is_whole_with_real_defaults() -> None:
    """Every example's ``--help``: its docstring's whole first paragraph, defaults shown only
    where they are real (never ``None``), and a typo'd option suggested."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "examples"
    for script in ("grpo_math.py", "sft_chat.py", "code_rl.py", "preference.py", "distillation.py"):
        done = subprocess.run(
            [sys.executable, str(root / script), "--help"],
            capture_output=True,
            text=True,
            env=cli_env(),
            timeout=300,
        )
        assert done.returncode == 0, done.stderr
        text = done.stdout
        assert "None" not in text, (script, text)
        description = text.split("\n\n")[1]
        assert description.rstrip().endswith("."), (script, description)
        assert "(default: 0)" in text.split("\n  --seed SEED", 1)[1].split("--base-model")[0]
        assert "with --smoke" in text
        typo = subprocess.run(
            [sys.executable, str(root / script), "--stpes", "2"],
            capture_output=True,
            text=True,
            env=cli_env(),
            timeout=300,
        )
        assert typo.returncode == 2 and "did you mean --steps?" in typo.stderr, typo.stderr
