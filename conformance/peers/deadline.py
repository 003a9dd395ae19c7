"""A per-test deadline for runs against third-party servers (``-p conformance.peers.deadline
--test-timeout S``): a test that has no verdict after S seconds is stopped and reported as
*failed*, with a reason saying where it waited, and the run goes on to the next test.

A peer that never answers (a result it cannot serialize, a route it lacks that the SDK
retries) otherwise holds a test, and every test after it, for as long as the SDK retries.
The deadline covers a test's setup and call together; its teardown (closing the clients it
made, which may wait on the same peer) gets what is left, and at least ``GRACE_S``.

How it stops a test: ``SIGALRM`` in the main thread raises :class:`TestTimeout` (a
``BaseException``, so the SDK's ``except Exception`` retry loops do not swallow it) at the
frame the test waits in; lock, condition and socket waits are interrupted by it. If the
alarm is swallowed anyway it fires again every ``GRACE_S``. As a last resort, a watchdog
thread that sees a test still running ``HARD_S`` seconds past its deadline writes the
conformance report (the hung test failed, the tests after it not run) and ends the process
with :data:`HUNG_EXIT`; ``run_peers.py`` then starts the suite again without the tests the
report holds, and merges the reports. A test interrupted by SIGINT (``run_peers.py`` stops
the suite so when the peer's server exits) is left out of the report: it has no verdict.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Iterator
from types import FrameType
from typing import Any

import pytest

#: Seconds a teardown gets at least, and between two alarms of one test.
GRACE_S = 30.0
#: Seconds past a test's deadline after which the watchdog ends the process.
HARD_S = 120.0
#: The exit status of a process the watchdog ended (``run_peers.py`` resumes after it).
HUNG_EXIT = 75


class TestTimeout(BaseException):
    """A test had no verdict within ``--test-timeout`` seconds."""

    __test__ = False  # not a test class, whatever pytest's naming rules say


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.getgroup("conformance").addoption(
        "--test-timeout",
        type=float,
        metavar="S",
        help="seconds a test (setup and call) may take before it is stopped and reported "
        "failed, naming where it waited; the run goes on (peer runs, docs/peers.md)",
    )


def pytest_configure(config: pytest.Config) -> None:
    seconds = config.getoption("--test-timeout")
    if seconds is None:
        return
    if seconds <= 0:
        raise pytest.UsageError(f"--test-timeout {seconds}: give a positive number of seconds")
    config.pluginmanager.register(Deadline(config, seconds), "conformance-deadline")


def where(frame: FrameType | None) -> str:
    """Where the main thread waits: the innermost line of a test file and the innermost
    frame of all, e.g. ``test_tinker_x.py:40 in test_y; waiting in _base.py:456 in result``."""
    frames = traceback.extract_stack(frame)
    if not frames:
        return "an unknown frame"
    inner = frames[-1]
    tests = [f for f in frames if os.path.basename(f.filename).startswith("test_")]
    said = f"{os.path.basename(inner.filename)}:{inner.lineno} in {inner.name}"
    if tests and tests[-1] is not inner:
        test = tests[-1]
        return f"{os.path.basename(test.filename)}:{test.lineno} in {test.name}; waiting in {said}"
    return said


class Deadline:
    """The plugin object: arms ``SIGALRM`` around each phase of each test."""

    def __init__(self, config: pytest.Config, seconds: float) -> None:
        self.config = config
        self.seconds = seconds
        self.item: pytest.Item | None = None
        self.deadline = 0.0  # monotonic time the current test's setup and call must end by
        self.phase = ""
        self.interrupted: str | None = None
        self.lock = threading.Lock()
        signal.signal(signal.SIGALRM, self._fire)
        threading.Thread(target=self._watch, name="conformance-deadline", daemon=True).start()

    def _fire(self, signum: int, frame: FrameType | None) -> None:
        signal.setitimer(signal.ITIMER_REAL, GRACE_S)  # again, should this one be swallowed
        raise TestTimeout(
            f"test timeout: no verdict within {self.seconds:g} s (--test-timeout); the test "
            f"was stopped in its {self.phase} at {where(frame)}"
        )

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Iterator[None]:
        with self.lock:
            self.item = item
            self.deadline = time.monotonic() + self.seconds
        outcome = yield
        with self.lock:
            self.item = None
        excinfo = getattr(outcome, "excinfo", None)
        if excinfo is not None and issubclass(excinfo[0], KeyboardInterrupt):
            self.interrupted = item.nodeid  # no verdict: not reported (sessionfinish)

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """A test interrupted (SIGINT: run_peers stops the suite when the server exits)
        has no verdict: it leaves the report, so that a resumed run runs it again."""
        if self.interrupted is not None:
            from conformance import plugin

            self.config.stash[plugin._RECORDER].tests.pop(self.interrupted, None)

    def _phase(self, name: str, budget: float) -> Iterator[None]:
        self.phase = name
        signal.setitimer(signal.ITIMER_REAL, max(budget, 0.001))
        try:
            yield
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> Iterator[None]:
        yield from self._phase("setup", self.deadline - time.monotonic())

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Iterator[None]:
        yield from self._phase("call", self.deadline - time.monotonic())

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_teardown(self, item: pytest.Item) -> Iterator[None]:
        yield from self._phase("teardown", max(self.deadline - time.monotonic(), GRACE_S))

    def _watch(self) -> None:
        while True:
            time.sleep(5)
            with self.lock:
                item = self.item
                late = item is not None and time.monotonic() > self.deadline + GRACE_S + HARD_S
            if item is not None and late:
                main = threading.main_thread().ident
                self._abandon(item, sys._current_frames().get(main) if main else None)

    def _abandon(self, item: pytest.Item, frame: FrameType | None) -> None:
        """Write the report with ``item`` failed and end the process (:data:`HUNG_EXIT`)."""
        from conformance import plugin

        recorder = self.config.stash[plugin._RECORDER]
        recorder.tests[item.nodeid] = {
            "id": item.nodeid,
            "outcome": "failed",
            "duration_s": round(self.seconds + GRACE_S + HARD_S, 3),
            "reason": f"test timeout: no verdict within {self.seconds:g} s (--test-timeout), "
            f"and the test could not be stopped: the process was ended {HARD_S:g} s later, "
            f"waiting in its {self.phase} at {where(frame)}",
        }
        out = self.config.getoption("--conformance-report")
        if out is not None:
            backend: Any = self.config.stash.get(plugin._BACKEND, None)
            recorder.write(out, backend, spec=self.config.getoption("--backend"), unavailable=None)
        print(f"\n{recorder.tests[item.nodeid]['reason']}", file=sys.stderr, flush=True)
        os._exit(HUNG_EXIT)
