"""No conformance run leaves a process behind: not when a test fails (the run stops its
``localsession serve`` itself), and not when the run is killed mid-test, as a harness's
timeout kills it (procio.spawn stops the run's process group, which the server joined).

The check is independent of both mechanisms: every process started under a run carries
the run's tag in its environment (procio.tagged reads /proc), so a survivor is found
whoever its parent became."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from _runs import ROOT, TIMEOUT, env, suite_command
from procio import spawn, tag_of, tagged

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="needs Linux /proc"),
]
HERE = Path(__file__).parent
ON_PURPOSE = HERE / "fails_on_purpose.py"


def _command(test: str) -> list[str]:
    return suite_command("http", "-k", test, paths=[ON_PURPOSE])


def test_a_failing_http_run_leaves_no_server_behind() -> None:
    with spawn(
        _command("test_fails_after_using_the_server"), cwd=ROOT, env=env(),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    ) as run:  # fmt: skip
        out, _ = run.communicate(timeout=TIMEOUT)
        assert run.returncode == 1 and "failing on purpose" in out, out[-3000:]
        # Checked before leaving the block (which would stop the group): the run itself
        # stopped the server it started.
        assert tagged(tag_of(run)) == []


@pytest.mark.slow  # default-tier time (docs/development.md)
def test_a_run_killed_mid_test_leaves_no_server_behind(tmp_path: Path) -> None:
    marker = tmp_path / "holding"
    with spawn(
        _command("test_hangs_until_stopped"), cwd=ROOT, env={**env(), "ORPHAN_CHECK_MARKER":
        str(marker)}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    ) as run:  # fmt: skip
        deadline = time.monotonic() + TIMEOUT
        while not marker.exists():  # the test is holding, its server up
            assert run.poll() is None, "the run ended before its test held"
            assert time.monotonic() < deadline, "the test never held"
            time.sleep(0.2)
        servers = [cmd for _, cmd in tagged(tag_of(run)) if " serve " in f" {cmd} "]
        assert len(servers) == 1, tagged(tag_of(run))
        os.kill(run.pid, signal.SIGKILL)  # the run alone, as a plain subprocess timeout does
        run.wait(timeout=60)
        # Its server outlived it (so a kill of the run alone would leave it behind) ...
        assert [cmd for _, cmd in tagged(tag_of(run)) if " serve " in f" {cmd} "] == servers
    # ... and leaving the block stopped the run's process group, the server with it.
    assert tagged(tag_of(run)) == []
