"""``localsession serve`` ended by SIGTERM (``kill``, a supervisor's stop) as by Ctrl-C, and
its start-up refusals of a port or a submit hold it cannot use: one line, exit status 2."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from localsession.runtime.home import HomeLock

from .cli_runner import Serving, one_error_line, run_cli, running_session


@pytest.mark.parametrize("port", ["99999", "-1", "65536"])
def test_a_port_out_of_range_is_one_line_and_exit_2(tmp_path: Path, port: str) -> None:
    line = one_error_line(run_cli("serve", "--port", port, "--home", str(tmp_path)), "serve")
    assert f"--port {port} is not a port: use 1-65535, or 0 for a free one" in line, line


def test_a_submit_hold_past_the_sdks_stop_wait_is_one_line_and_exit_2(tmp_path: Path) -> None:
    done = run_cli("serve", "--submit-hold", "20", "--port", "0", "--home", str(tmp_path))
    line = one_error_line(done, "serve")
    assert "submit hold 20 s is outside 0-3 s" in line and "--submit-hold" in line, line


@pytest.mark.integration
def test_sigterm_stops_sessions_releases_the_home_and_exits_0(tmp_path: Path) -> None:
    with Serving(tmp_path, "--quiet") as served:
        running_session(served.url, "term")
        served.proc.send_signal(signal.SIGTERM)
        served.proc.wait(timeout=120)
        out, err = served.out.rest(30), served.err.rest(30)
    assert served.proc.returncode == 0, (out, err)
    assert "localsession server stopped" in out and "Traceback" not in out + err
    record = json.loads((tmp_path / "sessions" / "term.json").read_text())
    assert record["status"] == "Stopped", record
    with HomeLock(tmp_path):  # released: a new server may take the home
        pass
