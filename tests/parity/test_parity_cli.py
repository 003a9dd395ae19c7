"""The command line of parity: ``serve --replay`` answers from a cassette in its own
process (and refuses, in one line, a cassette that is not there); ``record`` refuses an
upstream it cannot use."""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from localsession.cli import main
from localsession.parity.cassette import CassetteWriter, request_record, response_record
from localsession.parity.normalise import Normaliser

TARGET = "SageMaker.ListTrainingSessions"


def _cassette(folder: Path) -> Path:
    """One recorded ListTrainingSessions exchange."""
    norm = Normaliser()
    headers = {"Content-Type": "application/x-amz-json-1.1", "X-Amz-Target": TARGET}
    request = request_record(norm, "POST", "/", "", headers, b'{"MaxResults": 5}')
    body = {"TrainingSessionSummaries": [{"CreationTime": 1796095947.6, "Status": "Running"}]}
    response = response_record(
        norm, 200, {"Content-Type": "application/x-amz-json-1.1"}, json.dumps(body).encode()
    )
    writer = CassetteWriter(folder, {"region": "us-west-2"})
    writer.exchange(request, response, lambda: dict(norm.examples))
    writer.close()
    return writer.path


def _post(url: str, body: bytes) -> tuple[int, dict[str, object]]:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    headers = {"Content-Type": "application/x-amz-json-1.1", "X-Amz-Target": TARGET}
    try:
        conn.request("POST", "/", body=body, headers=headers)
        reply = conn.getresponse()
        return reply.status, json.loads(reply.read())
    finally:
        conn.close()


@pytest.mark.integration
def test_serve_replay_answers_and_names_the_closest_on_a_miss(tmp_path: Path) -> None:
    _cassette(tmp_path)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    command = [sys.executable, "-m", "localsession.cli", "serve", "--replay", str(tmp_path)]
    proc = subprocess.Popen(
        [*command, "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env=env,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert "replaying" in first and "(1 exchanges)" in first, first
        url = first.split(" on ", 1)[1].split(";")[0]
        threading.Thread(target=proc.stdout.read, daemon=True).start()
        status, body = _post(url, b'{"MaxResults": 5}')
        assert status == 200
        assert body == {
            "TrainingSessionSummaries": [{"CreationTime": 946684800.0, "Status": "Running"}]
        }
        status, body = _post(url, b'{"MaxResults": 7}')
        assert status == 400 and body["__type"] == "ReplayMismatchException"
        message = str(body["message"])
        assert f"Closest recorded request: #1 POST / ({TARGET})" in message
        assert "$.body.json.MaxResults: 7, recorded 5" in message
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def test_serve_replay_without_a_cassette_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["serve", "--replay", str(tmp_path / "none"), "--port", "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("localsession serve: error:") and "localsession record" in err
    assert main(["serve", "--replay", str(tmp_path), "--port", "0"]) == 2
    assert "holds no cassette" in capsys.readouterr().err


def test_record_refuses_an_upstream_it_cannot_use(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["record", "--upstream", "ftp://host", "--out", str(tmp_path), "--port", "0"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "--upstream 'ftp://host'" in err and "`aws`" in err
    assert not list(tmp_path.iterdir())  # no cassette started
