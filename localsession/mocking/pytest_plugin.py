"""The ``localsession_mock`` pytest fixture, registered through the ``pytest11`` entry point
(installing localsession makes it available; without the install: ``-p
localsession.mocking.pytest_plugin``).

``localsession_mock`` runs the test inside a fresh :func:`localsession.mock` and yields the
:class:`~localsession.mocking.Mock`. Options come from the marker, e.g.
``@pytest.mark.localsession_mock(engine="fake", model_map={"openai/gpt-oss-20b":
"localsession/tiny"})``. Loading this plugin imports nothing heavy: the mock starts only in
tests that ask for the fixture. Its ops' trace (Chrome trace JSON, docs/console.md) is written
on exit to the marker's ``trace="FILE"``, or, with ``pytest --localsession-trace=DIR``, to
``DIR/<test id>.trace.json`` for every test that uses the fixture (CI artifacts).

``localsession_tinker`` does the same for code written against the ``tinker`` SDK: it points
``TINKER_BASE_URL`` at a loopback localsession server (mocking/tinker_server.py).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--localsession-trace",
        metavar="DIR",
        default=None,
        help="write each localsession_mock test's ops as DIR/<test id>.trace.json",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "localsession_mock(**options): options for the localsession_mock fixture "
        "(engine, model_map, home, strict, region, manual, trace)",
    )
    config.addinivalue_line(
        "markers",
        "localsession_tinker(engine='torch'|'fake', model_map={}): the engine and model map "
        "of the localsession_tinker fixture's server",
    )


@pytest.fixture
def localsession_mock(request: pytest.FixtureRequest) -> Iterator[Any]:
    """The unmodified SDK, in-process against localsession, for this test."""
    from localsession.mocking import mock

    marker = request.node.get_closest_marker("localsession_mock")
    options: dict[str, Any] = dict(marker.kwargs) if marker is not None else {}
    folder = request.config.getoption("--localsession-trace", None)
    if folder and "trace" not in options:
        name = re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.nodeid).strip("_")
        options["trace"] = Path(folder) / f"{name}.trace.json"
    with mock(**options) as active:
        yield active


@pytest.fixture
def localsession_tinker(request: pytest.FixtureRequest) -> Iterator[Any]:
    """A working ``TINKER_BASE_URL`` for this test: one loopback localsession server per test
    session, engine and model map (``@pytest.mark.localsession_tinker(engine="fake")`` for
    the instant engine; ``model_map={"Qwen/Qwen3-4B-Instruct-2507": "localsession/tiny"}``
    lists more names, as ``serve --model-map`` does), with ``TINKER_API_KEY`` and the offline
    tokenizer cache (the built-ins' and mapped names' tokenizers) set. Yields the
    :class:`~localsession.mocking.tinker_server.TinkerServer`."""
    from localsession.mocking.hooks import scoped_environ
    from localsession.mocking.tinker_server import shared

    marker = request.node.get_closest_marker("localsession_tinker")
    options: dict[str, Any] = dict(marker.kwargs) if marker is not None else {}
    server = shared(options.get("engine", "torch"), options.get("model_map"))
    with scoped_environ(server.environment()):  # huggingface_hub's import-time cache too
        yield server
