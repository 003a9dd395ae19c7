"""One server per home (issue 21, item 3): a second ``serve`` on a home that a running server
holds is refused, naming the holder's PID, and the first server's sessions are untouched."""

from __future__ import annotations

import json
from pathlib import Path

from .cli_runner import Serving, one_error_line, run_cli, running_session, session_status


def test_a_second_server_on_a_home_is_refused_and_sessions_survive(tmp_path: Path) -> None:
    with Serving(tmp_path, "--quiet") as first:
        running_session(first.url, "keep-me")
        done = run_cli("serve", "--port", "0", "--home", str(tmp_path))
        line = one_error_line(done, "serve")
        assert f"home {tmp_path} is in use by another localsession server" in line, line
        assert f"(pid {first.proc.pid})" in line and "--home" in line
        # Also through LOCALSESSION_HOME, and with the default port: the lock is checked first.
        assert "in use by another" in one_error_line(run_cli("serve", home=tmp_path), "serve")
        # The refused server neither failed nor rewrote the first one's session.
        assert session_status(first.url, "keep-me") == "Running"
        record = json.loads((tmp_path / "sessions" / "keep-me.json").read_text())
        assert record["status"] == "Running"
        out, err = first.stop()
    assert first.proc.returncode == 0, err
    assert "Traceback" not in out + err
    # Once the first server has stopped, the home is free again.
    with Serving(tmp_path, "--quiet") as second:
        assert session_status(second.url, "keep-me") == "Stopped"
