"""``localsession conformance --backend=tinker --base-url URL`` against a loopback
``localsession serve`` (default session cap): the Tinker-surface tests pass, and every test
of the SageMaker surface is skipped as SageMaker-only, each listed in the run's output with
its reason."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("tinker")

from conformance.backends.tinker import LOCAL_CAPABILITIES  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 1800  # 99 Tinker tests: ~6 min idle, ~18 min at load 30 on 2 cores


@pytest.fixture
def serve_url(tmp_path: Path) -> Iterator[str]:
    """``localsession serve --port 0`` in a subprocess; yields its URL."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    command = [sys.executable, "-m", "localsession.cli", "serve", "--port", "0"]
    proc = subprocess.Popen(
        [*command, "--home", str(tmp_path / "home")],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdout is not None
    first = proc.stdout.readline()
    threading.Thread(target=proc.stdout.read, daemon=True).start()  # never block on a pipe
    try:
        assert " serving on " in first, first
        yield first.split(" serving on ", 1)[1].split()[0]
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.mark.slow  # the whole Tinker suite; the default tier has tests/conformance/*tinker*
def test_tinker_backend_passes_against_serve_with_skips_listed(
    serve_url: str, tmp_path: Path
) -> None:
    report_path = tmp_path / "tinker.json"
    command = [
        sys.executable, "-m", "localsession.cli", "conformance", "--backend=tinker",
        "--base-url", serve_url, "--base-model", "localsession/tiny",
        f"--capabilities={','.join(sorted(LOCAL_CAPABILITIES))}",
        f"--xfail-file={ROOT / 'conformance' / 'backends' / 'tinker-localsession.xfail'}",
        f"--report={report_path}", "-q", "-p", "no:cacheprovider",
    ]  # fmt: skip
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TINKER_API_KEY": "tml-localsession"}
    done = subprocess.run(
        command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=TIMEOUT, check=False
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-5000:]
    report = json.loads(report_path.read_text())
    assert report["backend"]["name"] == "tinker"
    assert report["backend"]["details"]["base_url"] == serve_url
    tests = report["tests"]
    tinker_tests = [t for t in tests if "/suite_tinker/" in t["id"]]
    sagemaker_tests = [t for t in tests if "/suite/" in t["id"]]
    assert len(tinker_tests) >= 15 and len(sagemaker_tests) >= 100
    assert len(tinker_tests) + len(sagemaker_tests) == len(tests)
    assert {t["outcome"] for t in tinker_tests} <= {"passed", "xfailed"}, tinker_tests
    assert {t["outcome"] for t in sagemaker_tests} == {"skipped"}
    summary = report["summary"]
    assert summary["passed"] + summary["xfailed"] == len(tinker_tests)
    assert summary["skipped"] == len(sagemaker_tests)
    assert summary["failed"] == summary["error"] == 0
    assert f"conformance: {len(sagemaker_tests)} skipped, with reasons" in output
    lines = set(output.splitlines())
    for test in sagemaker_tests:
        assert "'surface.sagemaker'" in test["reason"] and "SageMaker-only" in test["reason"]
        listed = f"SKIP {test['id'].split('/')[-1]}: "
        assert any(line.startswith(listed) and "surface.sagemaker" in line for line in lines), (
            f"{listed!r} missing from the run's output"
        )
