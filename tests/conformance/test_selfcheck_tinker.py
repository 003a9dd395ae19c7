"""The Tinker suite's meta-test: each defect planted in localsession's own dialect
(conformance/selfcheck_tinker.py) makes the tests it names fail, and the same tests pass on
the unbroken dialect.

The default tier plants each defect around one named test on the shared loopback server
(one server, a dozen test calls); the slow tier runs every named test through the real
``--backend=import:conformance.selfcheck_tinker:<defect>`` plugin path, one subprocess per
defect, and reads the failures from its report.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from _runs import ROOT, run, suite_command

pytest.importorskip("tinker")

from conformance.backends.tinker import LOCAL_MODEL, make_tinker  # noqa: E402
from conformance.capabilities import SPEC  # noqa: E402
from conformance.selfcheck_tinker import (  # noqa: E402
    EXPECTED,
    SHORT_EXPIRY,
    SHORT_EXPIRY_S,
    planted,
    run_test,
    short_expiry_backend,
)
from conformance.selfcheck_tinker_spec import SLOW  # noqa: E402

SUITE = ROOT / "conformance" / "suite_tinker"


@pytest.fixture(scope="module")
def dialect() -> Iterator[tuple[Any, Any]]:
    """The shared loopback server as a Tinker backend declaring nothing but the spec points
    (a third party's configuration), and one client for every call."""
    from localsession.mocking.hooks import scoped_environ
    from localsession.mocking.tinker_server import shared

    server = shared("torch")
    with scoped_environ(server.environment()):
        options = {"base_url": server.url, "base_model": LOCAL_MODEL}
        backend = make_tinker({**options, "capabilities": SPEC})  # the plain configuration
        client = backend.service_client()
        yield backend, client
        client.close("success").result()


@pytest.fixture(scope="module")
def short_expiry() -> Iterator[tuple[Any, None]]:
    """A backend whose expiry test meets a server that expires sessions after
    SHORT_EXPIRY_S seconds without a heartbeat (that test needs no client)."""
    with mock.patch.dict(os.environ):  # the backend points HF_* at its server's cache
        backend = short_expiry_backend({"base_model": LOCAL_MODEL})
        try:
            assert backend.limits.heartbeat_timeout_s == SHORT_EXPIRY_S
            yield backend, None
        finally:
            backend.close()


@pytest.mark.parametrize(
    "defect",
    [
        # an expiry defect waits out the short expiry: ~17 s, left to the slow tier
        pytest.param(d, marks=[pytest.mark.slow] if d in SLOW | SHORT_EXPIRY else [])
        for d in EXPECTED
    ],
)
def test_each_defect_fails_a_named_test_that_passes_unbroken(
    defect: str, request: pytest.FixtureRequest
) -> None:
    backend, client = request.getfixturevalue(
        "short_expiry" if defect in SHORT_EXPIRY else "dialect"
    )
    test_id = sorted(EXPECTED[defect])[0]
    run_test(test_id, backend, client)  # unbroken: passes
    # broken, the same test fails: an assertion, pytest.raises finding nothing, or the SDK
    # raising the broken server's refusal (a flattened (N, K) target is N*K values too many);
    # never the planted code crashing (a 5xx the SDK retries for minutes, then raises)
    with planted(defect), pytest.raises((Exception, pytest.fail.Exception)) as caught:
        run_test(test_id, backend, client)
    status = getattr(caught.value, "status_code", None)
    assert status is None or status < 500, f"the planted {defect} crashed: {caught.value!r}"


def test_planting_an_unknown_defect_is_refused() -> None:
    with pytest.raises(KeyError, match="known: "), planted("no_such_defect"):
        pass


@pytest.mark.slow
@pytest.mark.parametrize("defect", sorted(EXPECTED))
def test_the_suite_catches_the_planted_defect_through_the_plugin(
    defect: str, tmp_path: Path
) -> None:
    expected = EXPECTED[defect]
    report = tmp_path / f"{defect}.json"
    done = run(
        suite_command(
            f"import:conformance.selfcheck_tinker:{defect}",
            f"--conformance-report={report}",
            paths=[SUITE / test_id for test_id in sorted(expected)],
        )
    )
    assert done.returncode == 1, done.stdout[-3000:]
    tests = json.loads(report.read_text())["tests"]
    failed = {t["id"].split("suite_tinker/", 1)[1] for t in tests if t["outcome"] == "failed"}
    assert expected <= failed, (expected - failed, done.stdout[-3000:])
