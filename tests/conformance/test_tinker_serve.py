"""The Tinker suite against a ``localsession serve`` subprocess, as a user runs it (slow tier):
``localsession/tiny`` and SmolLM2 under the installed tinker SDK, and ``localsession/tiny``
under an older SDK when ``LOCALSESSION_OLD_TINKER_PYTHON`` names the python of a venv that
has one (``pip install . tinker==0.28.1 pytest hypothesis``: this package's own dependencies,
botocore and torch among them, without the ``[tinker]`` extra's pin; the test puts this repo
first on PYTHONPATH).

Every test of ``suite_tinker/`` must pass, the dialect's known divergences
(``backends/tinker-localsession.xfail``) as strict xfails; tests the older SDK cannot send
are skipped naming its release."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from _runs import ROOT, TIMEOUT, env

pytest.importorskip("tinker")

from conformance.backends.tinker import LOCAL_CAPABILITIES  # noqa: E402

SUITE = ROOT / "conformance" / "suite_tinker"
KNOWN = ROOT / "conformance" / "backends" / "tinker-localsession.xfail"
SMOLLM2 = "HuggingFaceTB/SmolLM2-135M-Instruct"
#: serve's ``--heartbeat-timeout``, declared to the suite so that its expiry test runs (it
#: waits 1.5 x this + 5 s): well above the SDK's 10 s heartbeat period plus its 10 s request
#: timeout, so that no busy test's session expires while the SDK beats it.
HEARTBEAT_S = 60


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """``localsession serve --port 0`` (64 sessions: a test holds up to three models and a
    hidden sampler, and an SDK before 0.27.2 cannot close its sessions, which then last until
    they expire after HEARTBEAT_S); yields its URL and home. Stopped, and waited for, at
    teardown."""
    home = tmp_path / "home"
    args = [sys.executable, "-m", "localsession.cli", "serve", "--port", "0", "--quiet",
            "--max-sessions", "64", "--heartbeat-timeout", str(HEARTBEAT_S),
            "--home", str(home)]  # fmt: skip
    proc = subprocess.Popen(
        args, cwd=ROOT, env=env(), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    assert proc.stdout is not None
    first = proc.stdout.readline()
    threading.Thread(target=proc.stdout.read, daemon=True).start()  # never block on a pipe
    try:
        assert " serving on " in first, first
        yield first.split(" serving on ", 1)[1].split()[0], home
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=60)


def _run(python: str, url: str, home: Path, model: str, report: Path) -> dict[str, object]:
    args = [python, "-m", "pytest", "-p", "conformance.plugin", "-p", "no:cacheprovider", "-q",
            "--backend=tinker", f"--base-url={url}", f"--base-model={model}",
            "--numeric-stack=shared", f"--capabilities={','.join(sorted(LOCAL_CAPABILITIES))}",
            f"--heartbeat-timeout={HEARTBEAT_S}", f"--xfail-file={KNOWN}",
            f"--conformance-report={report}", str(SUITE)]  # fmt: skip
    child = {**env(), "PYTHONPATH": str(ROOT), "TINKER_API_KEY": "tml-localsession",
             "HF_HUB_CACHE": str(home / "hf-hub")}  # fmt: skip
    done = subprocess.run(
        args, cwd=ROOT, env=child, capture_output=True, text=True, timeout=3 * TIMEOUT,
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, (done.stdout + done.stderr)[-5000:]
    loaded: dict[str, object] = json.loads(report.read_text())
    return loaded


def _outcomes(report: dict[str, object]) -> dict[str, str]:
    tests = report["tests"]
    assert isinstance(tests, list)
    return {t["id"].split("/")[-1]: t["outcome"] for t in tests}


@pytest.mark.slow
@pytest.mark.parametrize("model", ["localsession/tiny", SMOLLM2])
def test_the_suite_passes_against_serve(
    serve: tuple[str, Path], tmp_path: Path, model: str
) -> None:
    url, home = serve
    outcomes = _outcomes(_run(sys.executable, url, home, model, tmp_path / "report.json"))
    assert len(outcomes) >= 80
    assert set(outcomes.values()) <= {"passed", "xfailed"}, outcomes
    assert list(outcomes.values()).count("xfailed") == len(
        [line for line in KNOWN.read_text().splitlines() if line and not line.startswith("#")]
    )


@pytest.mark.slow
def test_the_suite_passes_with_an_older_sdk(serve: tuple[str, Path], tmp_path: Path) -> None:
    python = os.environ.get("LOCALSESSION_OLD_TINKER_PYTHON")
    if not python:
        pytest.skip("set LOCALSESSION_OLD_TINKER_PYTHON to a python with an older tinker SDK")
    url, home = serve
    report = _run(python, url, home, "localsession/tiny", tmp_path / "report.json")
    outcomes = _outcomes(report)
    assert set(outcomes.values()) <= {"passed", "xfailed", "skipped"}, outcomes
    backend = report["backend"]
    assert isinstance(backend, dict) and "tinker 0.38" not in str(backend["version"])
    skipped = [t for t in report["tests"] if t["outcome"] == "skipped"]  # type: ignore[attr-defined]
    assert all("cannot send" in t["reason"] for t in skipped), skipped
    assert all("(added in tinker 0." in t["reason"] for t in skipped), skipped
