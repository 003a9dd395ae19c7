"""Runs of the conformance suite in subprocesses, shared by this folder's tests.

The three backends CI checks (inprocess, http, fakes) start together when the first test
needs them, since the http run mostly waits on round trips; each writes a JSON report. The
http run also checks the shipped reference snapshots (test_snapshots.py reads its report).
"""

from __future__ import annotations

import contextlib
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
from procio import spawn


@pytest.fixture(scope="package")
def suite_runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Finished]]:
    out = tmp_path_factory.mktemp("conformance-reports")
    finished = {}
    with contextlib.ExitStack() as stack:  # each run a process group, stopped on the way out
        procs = {}
        for backend in BACKENDS:
            report = out / f"{backend}.json"
            args = suite_command(backend, f"--conformance-report={report}")
            if backend == SNAPSHOT_BACKEND:
                args += [
                    f"--snapshot-check={REFERENCE}",
                    f"--snapshot-report={out / 'snapshots.json'}",
                ]
            log = stack.enter_context((out / f"{backend}.log").open("w+"))  # never a full pipe
            proc = stack.enter_context(
                spawn(args, cwd=ROOT, env=env(), stdout=log, stderr=subprocess.STDOUT, text=True)
            )
            procs[backend] = (proc, report, log)
        for backend, (proc, report, log) in procs.items():
            proc.wait(timeout=TIMEOUT)
            log.seek(0)
            snapshots = out / "snapshots.json" if backend == SNAPSHOT_BACKEND else None
            finished[backend] = Finished(backend, proc.returncode, log.read(), report, snapshots)
    yield finished
