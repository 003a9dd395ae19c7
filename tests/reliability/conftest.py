"""Shared setup for the reliability tests: fuzz profiles and an input counter, the shared running
server (``testkit.running_server``) on the built-in tiny model, and small wire helpers.

Two fuzz profiles: ``default`` keeps every fuzz test to a few seconds in CI; ``slow`` (the
``slow``-marked twins, run by ``make test-slow``) tries at least 10,000 inputs in all. The
number of inputs each profile actually tried is printed in the terminal summary.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from testkit import Served, create_request, running_server

from localsession.runtime.service import Service

__all__ = ["Served"]

#: Inputs tried, by profile (printed at the end of the run).
FUZZED: Counter[str] = Counter()

PROFILES = {
    "default": settings(
        max_examples=50,
        deadline=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        database=None,
    ),
    "slow": settings(
        max_examples=1200,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        database=None,
    ),
}
#: ``@pytest.mark.parametrize("profile", FUZZ_PROFILES)`` runs a fuzz test in both profiles.
FUZZ_PROFILES = [
    pytest.param("default", id="default"),
    pytest.param("slow", id="slow", marks=pytest.mark.slow),
]

MODEL = "localsession/tiny"
HUB_ARN = (
    "arn:aws:sagemaker:us-west-2:aws:hub-content/SageMakerPublicHub/Model/localsession-tiny/1.0.0"
)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if FUZZED:
        counts = ", ".join(f"{profile}: {n}" for profile, n in sorted(FUZZED.items()))
        terminalreporter.write_line(f"reliability fuzz inputs tried ({counts})")


def create_session(service: Service, name: str | None = None, rank: int = 4) -> str:
    """A Running session on the tiny model; its name."""
    name = name or f"rel-{uuid.uuid4().hex[:8]}"
    service.create_training_session(create_request(name, model=MODEL, rank=rank))
    assert service.wait_for_session(name, 120) == "Running"
    return name


def run_op(service: Service, name: str, seq: int, config: dict[str, Any]) -> dict[str, Any]:
    """Submit one training op and wait for its result body."""
    op = service.execute_training_operation(
        name, {"sequenceNumber": seq, "clientToken": f"t-{seq}", "operationConfig": config}
    )["operationId"]
    assert service.wait_operation(name, op, 120)
    return service.get_training_operation_result(name, op)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """A strict service (every limit on) on the tiny model, as ``localsession serve`` runs it."""
    home = tmp_path_factory.mktemp("reliability-home")
    with running_server(
        home, max_sessions=16, gap_timeout=60.0, persist_sessions=True, local_model_paths=False
    ) as served:
        yield served
