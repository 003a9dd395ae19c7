"""``serve`` logs one INFO line per request (method, operation, status, milliseconds) on
stderr; ``--quiet`` silences them (issue 21, item 4)."""

from __future__ import annotations

import re
import urllib.error
from pathlib import Path

import pytest

from .cli_runner import Serving, control_plane


def test_serve_logs_control_plane_operations_and_quiet_silences_them(tmp_path: Path) -> None:
    with Serving(tmp_path / "loud") as loud:
        control_plane(loud.url, "ListTrainingSessions", {})
        with pytest.raises(urllib.error.HTTPError):
            control_plane(loud.url, "DescribeTrainingSession", {"TrainingSessionName": "nope"})
        _, err = loud.stop()
    assert re.search(r" POST SageMaker\.ListTrainingSessions 200 \d+\.\d ms$", err, re.M), err
    assert re.search(r" POST SageMaker\.DescribeTrainingSession 400 \d+\.\d ms$", err, re.M), err
    with Serving(tmp_path / "quiet", "--quiet") as quiet:
        control_plane(quiet.url, "ListTrainingSessions", {})
        _, err = quiet.stop()
    assert "ListTrainingSessions" not in err and quiet.proc.returncode == 0, err
