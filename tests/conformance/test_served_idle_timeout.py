"""``localsession serve --idle-timeout`` end to end: a real server started with it passes the
conformance suite's idle-expiry test when the same timeout is declared, and fails it when a
longer one is declared (a session given an op every 2.5 s, inside the declared 10 s, has
expired at the server's 2 s)."""

from __future__ import annotations

from pathlib import Path

import pytest
from _runs import SUITE, run, suite_command
from cli.cli_runner import Serving

pytestmark = pytest.mark.slow

IDLE = "test_a_session_idle_past_the_timeout_expires"


def test_a_served_idle_timeout_expires_idle_sessions(tmp_path: Path) -> None:
    server = Serving(tmp_path / "home", "--idle-timeout", "2", "--quiet")
    try:
        paths = [SUITE / "test_sessions.py"]
        backend = f"http={server.url}"
        done = run(suite_command(backend, "-k", IDLE, "--idle-timeout=2", paths=paths))
        assert done.returncode == 0 and "1 passed" in done.stdout, done.stdout + done.stderr
        done = run(suite_command(backend, "-k", IDLE, "--idle-timeout=10", paths=paths))
        assert done.returncode == 1 and "1 failed" in done.stdout, done.stdout + done.stderr
    finally:
        banner, _ = server.stop()
    assert "no operation for 2 s becomes Expired" in banner
