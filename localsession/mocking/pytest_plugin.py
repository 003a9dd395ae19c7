"""The ``localsession_mock`` pytest fixture, registered through the ``pytest11`` entry point
(installing localsession makes it available; without the install: ``-p
localsession.mocking.pytest_plugin``).

``localsession_mock`` runs the test inside a fresh :func:`localsession.mock` and yields the
:class:`~localsession.mocking.Mock`. Options come from the marker, e.g.
``@pytest.mark.localsession_mock(engine="fake", model_map={"openai/gpt-oss-20b":
"localsession/tiny"})``. Loading this plugin imports nothing heavy: the mock starts only in
tests that ask for the fixture.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "localsession_mock(**options): options for the localsession_mock fixture "
        "(engine, model_map, home, strict, region, manual)",
    )


@pytest.fixture
def localsession_mock(request: pytest.FixtureRequest) -> Iterator[Any]:
    """The unmodified SDK, in-process against localsession, for this test."""
    from localsession.mocking import mock

    marker = request.node.get_closest_marker("localsession_mock")
    options: dict[str, Any] = dict(marker.kwargs) if marker is not None else {}
    with mock(**options) as active:
        yield active
