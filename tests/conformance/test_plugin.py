"""The plugin's rules: capability skips name the capability, misspellings stop the run, the
xfail file is checked, an unavailable backend skips everything and fails the run, the CLI
wrapper runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _runs import ROOT, SUITE, run, suite_command

from conformance.report import render_table

USAGE_ERROR = 4  # pytest.ExitCode.USAGE_ERROR


def test_missing_capability_skips_with_its_name(tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    done = run(
        suite_command(
            "fakes",
            "--drop-capability=sampling.seed_streams",
            f"--conformance-report={report}",
            paths=[SUITE / "test_sampling.py"],
        )
    )
    assert done.returncode == 0, done.stdout
    tests = {t["id"].rsplit("::", 1)[1]: t for t in json.loads(report.read_text())["tests"]}
    skipped = tests["test_sample_i_uses_seed_plus_i"]
    assert skipped["outcome"] == "skipped" and "'sampling.seed_streams'" in skipped["reason"]
    assert tests["test_sample_shapes"]["outcome"] == "passed"


@pytest.mark.parametrize("flag", ["--drop-capability=sampling.seeed", "--capabilities=loss.sum"])
def test_misspelled_capability_stops_the_run(flag: str) -> None:
    done = run(suite_command("fakes", flag, paths=[SUITE / "test_surface.py"]))
    assert done.returncode == USAGE_ERROR, done.stdout + done.stderr


def test_misspelled_marker_stops_the_run(tmp_path: Path) -> None:
    test = tmp_path / "test_typo.py"
    test.write_text(
        "import pytest\n\n"
        "@pytest.mark.requires('sampling.reproducable_seeds')\n"
        "def test_x(backend):\n    pass\n"
    )
    done = run(suite_command("fakes", f"--rootdir={tmp_path}", paths=[test]))
    assert done.returncode == USAGE_ERROR, done.stdout + done.stderr


def test_xfail_entry_naming_no_test_stops_the_run(tmp_path: Path) -> None:
    xfails = tmp_path / "bad.xfail"
    xfails.write_text("test_surface.py::test_that_does_not_exist  # stale\n")
    done = run(suite_command("fakes", f"--xfail-file={xfails}", paths=[SUITE / "test_surface.py"]))
    assert done.returncode == USAGE_ERROR, done.stdout + done.stderr


def test_xfail_file_marks_strict_xfails(tmp_path: Path) -> None:
    xfails = tmp_path / "x.xfail"
    xfails.write_text("test_surface.py::test_constants  # pretend divergence\n")
    done = run(suite_command("fakes", f"--xfail-file={xfails}", paths=[SUITE / "test_surface.py"]))
    assert done.returncode == 1  # strict: the test passes, so the XPASS fails the run
    assert "XPASS(strict)" in done.stdout


def test_remote_without_configuration_fails_the_run(tmp_path: Path) -> None:
    report = tmp_path / "remote.json"
    args = suite_command(
        "remote", f"--conformance-report={report}", paths=[SUITE / "test_surface.py"]
    )
    done = run(args)
    assert done.returncode == 1, done.stdout  # unreachable is not green
    assert "FAILED: backend unavailable: remote backend" in done.stdout
    body = json.loads(report.read_text())
    assert body["backend"]["unavailable"]
    assert {t["outcome"] for t in body["tests"]} == {"skipped"}
    assert all("backend unavailable" in t["reason"] for t in body["tests"])


def test_cli_wrapper_runs_the_suite(tmp_path: Path) -> None:
    report = tmp_path / "cli.json"
    done = run(
        [
            str(Path(ROOT / ".venv/bin/python")),
            "-m",
            "localsession.cli",
            "conformance",
            "--backend=fakes",
            f"--report={report}",
            "-k",
            "surface",
            "-q",
            "-p",
            "no:cacheprovider",
        ]
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(report.read_text())["summary"]["passed"] >= 10


def test_render_table_marks_each_outcome() -> None:
    def report(name: str, outcome: str) -> dict[str, object]:
        summary = {k: 0 for k in ("passed", "failed", "error", "skipped", "xfailed", "xpassed")}
        summary[outcome] = 1
        test = {"id": "conformance/suite/test_a.py::test_b", "outcome": outcome, "reason": "why"}
        return {
            "backend": {"name": name, "version": "1", "capabilities": []},
            "summary": summary,
            "tests": [test],
        }

    table = render_table([report("one", "passed"), report("two", "failed")])
    assert "| `test_a.py::test_b` | pass | **FAIL** |" in table
    assert "- two: `test_a.py::test_b` failed: why" in table
