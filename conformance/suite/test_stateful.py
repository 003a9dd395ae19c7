"""The stateful model check (the machine lives in ``_stateful.py``, imported inside each
test so that collecting the suite never imports hypothesis: on a backend that skips these
tests, a Tinker one, hypothesis need not be installed)."""

from __future__ import annotations

from typing import Any

import pytest

from conformance.adapter import Backend

NEEDS = ("failure.isolated", "sampling.snapshot_weights", "loss.outputs", "optim.empty_step_noop")


@pytest.mark.requires(*NEEDS)
def test_stateful_small(backend: Backend, service_client: Any) -> None:
    from conformance.suite._stateful import run

    run(backend, service_client, "small")


@pytest.mark.slow
@pytest.mark.requires(*NEEDS)
def test_stateful_large(backend: Backend, service_client: Any) -> None:
    from conformance.suite._stateful import run

    run(backend, service_client, "large")
