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


def test_the_sdks_expected_group_conflict_is_logged_as_expected(tmp_path: Path) -> None:
    """Each session creation without a group makes the SDK try CreateModelPackageGroup on its
    default group; the second one gets ResourceInUse (400), which the log calls expected.
    Nothing is logged above INFO."""
    body = {"ModelPackageGroupName": "sagemaker-training-sessions-default"}
    with Serving(tmp_path / "home") as server:
        control_plane(server.url, "CreateModelPackageGroup", body)
        with pytest.raises(urllib.error.HTTPError) as refused:
            control_plane(server.url, "CreateModelPackageGroup", body)
        assert refused.value.code == 400
        _, err = server.stop()
    lines = [line for line in err.splitlines() if "CreateModelPackageGroup" in line]
    assert len(lines) == 2, err
    assert " 200 " in lines[0] and "expected" not in lines[0]
    assert " 400 (the group exists, as expected: the SDK then describes it) " in lines[1]
    assert not re.search(r"\b(ERROR|WARNING|Traceback)\b", err), err
