"""Runs of the conformance suite in subprocesses, shared by this folder's tests.

The three backends CI checks (inprocess, http, fakes) start together when the first test
needs them, since the http run mostly waits on round trips; each writes a JSON report. The
http run also checks the shipped reference snapshots (test_snapshots.py reads its report).
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest
from _runs import (
    BACKENDS,
    REFERENCE,
    ROOT,
    SNAPSHOT_BACKEND,
    TIMEOUT,
    Finished,
    env,
    suite_command,
)


@pytest.fixture(scope="package")
def suite_runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Finished]]:
    out = tmp_path_factory.mktemp("conformance-reports")
    procs = {}
    for backend in BACKENDS:
        report = out / f"{backend}.json"
        args = suite_command(backend, f"--conformance-report={report}")
        if backend == SNAPSHOT_BACKEND:
            args += [f"--snapshot-check={REFERENCE}", f"--snapshot-report={out / 'snapshots.json'}"]
        procs[backend] = (
            subprocess.Popen(
                args, cwd=ROOT, env=env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                text=True,
            ),
            report,
        )  # fmt: skip
    finished = {}
    try:
        for backend, (proc, report) in procs.items():
            output, _ = proc.communicate(timeout=TIMEOUT)
            snapshots = out / "snapshots.json" if backend == SNAPSHOT_BACKEND else None
            finished[backend] = Finished(backend, proc.returncode, output, report, snapshots)
    finally:
        for proc, _ in procs.values():
            if proc.poll() is None:
                proc.kill()
    yield finished
