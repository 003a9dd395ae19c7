"""``localsession conformance --selfcheck``: the mutation score of the suite.

Every planted defect of both dialects (``selfcheck.py``: the SageMaker surface on the fakes;
``selfcheck_tinker.py`` and ``selfcheck_tinker_spec.py``: localsession's Tinker dialect) is
run against the tests its ``EXPECTED`` names, in the plain third-party configuration: no
capability declared but the spec points (``capabilities.SPEC``) and, for the few defects that
break a local decision, the one they break (``selfcheck.DECLARES``). A defect is caught when
a named test fails on it; on the Tinker side each named test must also pass unbroken first
(a test that always fails catches nothing). Prints one line per defect and the score
``caught/planted``; the exit status is 0 only when every defect is caught.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

SUITE = Path(__file__).parent / "suite"
#: What a failed op says when the engine itself raised: a crash, not a caught defect.
CRASH = "Internal error while running"


@dataclass
class Verdict:
    surface: str
    defect: str
    caught_by: str | None  # the first named test that failed on the defect
    message: str  # its failure's first line, or why nothing caught the defect
    seconds: float


def _sagemaker(defect: str, expected: set[str]) -> Verdict:
    """One pytest run of the named tests against the broken fakes backend."""
    start = time.monotonic()
    files = sorted({str(SUITE / test_id.split("::")[0]) for test_id in expected})
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        args = [sys.executable, "-m", "pytest", "-p", "conformance.plugin", "-p",
                "no:cacheprovider", "-q", f"--backend=import:conformance.selfcheck:{defect}",
                f"--conformance-report={report}", *files]  # fmt: skip
        done = subprocess.run(args, capture_output=True, text=True, check=False)
        if not report.exists():
            return Verdict("sagemaker", defect, None, done.stdout[-300:], 0.0)
        tests = json.loads(report.read_text())["tests"]
    outcome = {t["id"].split("suite/", 1)[1]: t for t in tests}
    for test_id in sorted(expected):
        entry = outcome.get(test_id, {})
        reason = str(entry.get("reason") or "")
        if entry.get("outcome") == "failed" and CRASH in reason:  # the planted code broke
            crash = f"{test_id} failed on the planted code's own crash: {reason[:160]}"
            return Verdict("sagemaker", defect, None, crash, time.monotonic() - start)
        if entry.get("outcome") == "failed":
            message = reason.strip().splitlines()
            took = time.monotonic() - start
            return Verdict("sagemaker", defect, test_id, (message or [""])[0][:160], took)
    seen = {t: outcome.get(t, {}).get("outcome", "not run") for t in sorted(expected)}
    return Verdict("sagemaker", defect, None, f"named tests: {seen}", time.monotonic() - start)


def _tinker(defects: Sequence[str]) -> list[Verdict]:
    """Each defect planted around its named tests on one loopback dialect (in process)."""
    from conformance.backends.tinker import LOCAL_MODEL, make_tinker
    from conformance.capabilities import SPEC
    from conformance.selfcheck_tinker import (
        EXPECTED,
        SHORT_EXPIRY,
        run_test,
        short_expiry_backend,
    )
    from localsession.mocking.hooks import scoped_environ
    from localsession.mocking.tinker_server import shared

    server = shared("torch")
    verdicts = []
    with scoped_environ(server.environment()):
        plain = {"base_url": server.url, "base_model": LOCAL_MODEL, "capabilities": SPEC}
        backend = make_tinker(plain)
        client = backend.service_client()
        expiring = None
        passed_unbroken: dict[str, str | None] = {}
        for defect in defects:
            start = time.monotonic()
            if defect in SHORT_EXPIRY:
                if expiring is None:
                    expiring = short_expiry_backend({"base_model": LOCAL_MODEL})
                target, target_client = expiring, None
            else:
                target, target_client = backend, client
            verdict = Verdict("tinker", defect, None, "every named test passed", 0.0)
            for test_id in sorted(EXPECTED[defect]):
                call = partial(run_test, test_id, target, target_client)
                if test_id not in passed_unbroken:
                    passed_unbroken[test_id] = _failure(call, None)
                if passed_unbroken[test_id] is not None:
                    verdict.message = f"{test_id} fails unbroken: {passed_unbroken[test_id]}"
                    continue
                failure = _failure(call, defect)
                if failure is not None:
                    verdict.caught_by, verdict.message = test_id, failure
                    break
            verdict.seconds = time.monotonic() - start
            verdicts.append(verdict)
        client.close("success").result()
        if expiring is not None:
            expiring.close()
        backend.close()
    return verdicts


def _failure(call: Callable[[], None], defect: str | None) -> str | None:
    """The first line of what ``call`` raised (with ``defect`` planted), or None."""
    from conformance.selfcheck_tinker import planted

    try:
        if defect is None:
            call()
        else:
            with planted(defect):
                call()
    except BaseException as exc:  # noqa: BLE001 - pytest.fail raises outside Exception
        if isinstance(exc, KeyboardInterrupt):
            raise
        lines = str(exc).strip().splitlines()
        return f"{type(exc).__name__}: {(lines or [''])[0][:160]}"
    return None


def run_selfcheck(only: Sequence[str] = (), write: Callable[[str], Any] = print) -> int:
    """Plant every defect (or those named in ``only``), print each verdict and the score;
    0 when all are caught."""
    from conformance.selfcheck import EXPECTED as SAGEMAKER
    from conformance.selfcheck_tinker import EXPECTED as TINKER

    unknown = set(only) - set(SAGEMAKER) - set(TINKER)
    if unknown:
        known = ", ".join(sorted(set(SAGEMAKER) | set(TINKER)))
        write(f"selfcheck: no planted defect {', '.join(sorted(unknown))}; known: {known}")
        return 2
    wanted = set(only) or set(SAGEMAKER) | set(TINKER)
    verdicts = []
    for defect in sorted(set(SAGEMAKER) & wanted):
        verdicts.append(_sagemaker(defect, SAGEMAKER[defect]))
        write(_line(verdicts[-1]))
    tinker = sorted(set(TINKER) & wanted)
    if tinker:
        for verdict in _tinker(tinker):
            verdicts.append(verdict)
            write(_line(verdict))
    caught = sum(v.caught_by is not None for v in verdicts)
    write(f"selfcheck: {caught}/{len(verdicts)} planted defects caught (no --capabilities)")
    return 0 if caught == len(verdicts) else 1


def spec_of(surface: str, test_id: str) -> str:
    """The spec point a suite test checks: its docstring's first sentence (each docstring
    opens with the SDK line or rule it checks), else its file's."""
    import importlib

    path, _, name = test_id.partition("::")
    folder = "suite" if surface == "sagemaker" else "suite_tinker"
    module = importlib.import_module(f"conformance.{folder}.{path.removesuffix('.py')}")
    doc = getattr(module, name.partition("[")[0]).__doc__ or module.__doc__ or ""
    return " ".join(doc.split()).split(". ")[0][:200]  # else the file's spec section


def _line(v: Verdict) -> str:
    if v.caught_by is None:
        return f"MISSED {v.surface:9} {v.defect:24} ({v.seconds:.0f} s) {v.message}"
    return (
        f"caught {v.surface:9} {v.defect:24} by {v.caught_by} ({v.seconds:.0f} s)\n"
        f"       spec: {spec_of(v.surface, v.caught_by)}\n       said: {v.message}"
    )
