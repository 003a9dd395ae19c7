"""The command line of parity: ``serve --replay`` answers from a cassette in its own
process (and refuses, in one line, a cassette that is not there, or an option it cannot
honour); it honours ``--auth``, ``--home``, ``--model-map``, ``--host`` and ``--quiet`` and
logs every request. ``record`` prints what ``serve`` prints, and refuses an upstream it
cannot use."""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from procio import Lines, spawn

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


def _post(
    url: str, body: bytes, sign: tuple[str, str] | None = None
) -> tuple[int, dict[str, object]]:
    """One ListTrainingSessions call, SigV4-signed with ``sign`` (key, secret) if given."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    host = "127.0.0.1" if host == "0.0.0.0" else host
    conn = http.client.HTTPConnection(host, int(port), timeout=120)
    headers = {"Content-Type": "application/x-amz-json-1.1", "X-Amz-Target": TARGET}
    if sign is not None:
        from botocore.auth import SigV4Auth
        from botocore.awsrequest import AWSRequest
        from botocore.credentials import Credentials

        request = AWSRequest(method="POST", url=f"{url}/", data=body, headers=headers)
        SigV4Auth(Credentials(*sign), "sagemaker", "us-west-2").add_auth(request)
        headers = {k: str(v) for k, v in request.headers.items()}
    try:
        conn.request("POST", "/", body=body, headers=headers)
        reply = conn.getresponse()
        return reply.status, json.loads(reply.read())
    finally:
        conn.close()


def _exported(cache: Path, name: str) -> list[Path]:
    """The tokenizer exported into the HF cache ``cache`` under ``name``, once it is there
    (the export runs on a background thread: waited for, up to a loaded machine's minutes)."""
    pattern = f"models--{name.replace('/', '--')}/snapshots/*/tokenizer_config.json"
    for _ in range(1200):
        found = list(cache.glob(pattern))
        if found:
            return found
        time.sleep(0.1)
    return []


def _replay(folder: Path, *options: str) -> Any:
    """``serve --replay folder`` in a process group of its own (procio.spawn)."""
    command = [sys.executable, "-m", "localsession.cli", "serve", "--replay", str(folder)]
    return spawn(
        [*command, "--port", "0", *options],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def _banner(out: Lines[str]) -> tuple[str, dict[str, str]]:
    """(URL, exports) from the replay's banner, read up to its last export."""
    first = out.readline()
    assert "replaying" in first and "(1 exchanges)" in first, first
    url = first.split(" on ", 1)[1].split(";")[0]
    env: dict[str, str] = {}
    while "TINKER_API_KEY" not in env:
        line = out.readline()
        assert line, "the banner ended before its exports"
        if line.startswith("export "):
            key, _, value = line.removeprefix("export ").strip().partition("=")
            env[key] = value.strip("'")
    return url, env


@pytest.mark.integration
def test_serve_replay_answers_and_names_the_closest_on_a_miss(tmp_path: Path) -> None:
    _cassette(tmp_path)
    home = tmp_path / "home"
    options = ["--auth", "KEY1:secret1", "--home", str(home)]
    with _replay(tmp_path, *options, "--model-map", "openai/gpt-oss-20b=localsession/tiny") as p:
        out, err = Lines(p.stdout, "replay's stdout"), Lines(p.stderr, "replay's stderr")
        url, env = _banner(out)
        assert env["HF_HUB_CACHE"] == str((home / "hf-hub").resolve())
        assert env["HF_HUB_OFFLINE"] == "1" and env["TINKER_BASE_URL"] == url
        assert env["AWS_ACCESS_KEY_ID"] == "KEY1"
        status, body = _post(url, b'{"MaxResults": 5}')  # unsigned: refused by --auth
        assert status == 403 and body["__type"] == "MissingAuthenticationTokenException"
        status, body = _post(url, b'{"MaxResults": 5}', sign=("KEY1", "secret1"))
        assert status == 200
        assert body == {
            "TrainingSessionSummaries": [{"CreationTime": 946684800.0, "Status": "Running"}]
        }
        status, body = _post(url, b'{"MaxResults": 7}', sign=("KEY1", "secret1"))
        assert status == 400 and body["__type"] == "ReplayMismatchException"
        message = str(body["message"])
        assert f"Closest recorded request: #1 POST / ({TARGET})" in message
        assert "$.body.json.MaxResults: 7, recorded 5" in message
        # --model-map: the mapped name's tokenizer is exported for get_tokenizer()
        assert _exported(Path(env["HF_HUB_CACHE"]), "openai/gpt-oss-20b")
        p.send_signal(signal.SIGINT)
        assert p.wait(timeout=120) == 1  # a request went unmatched
        logged = err.rest()
    assert "replay stopped: 1 exchanges replayed, 0 not, 1 requests unmatched" in out.rest()
    lines = [line for line in logged.splitlines() if f"POST / ({TARGET}) ->" in line]
    assert [line.split(" ", 1)[1][:75] for line in lines] == [
        f"POST / ({TARGET}) -> 403",
        f"POST / ({TARGET}) -> 200, recorded #1",
        f"MISMATCH POST / ({TARGET}) -> 400: replay: no recorded request"[:75],
    ], logged


@pytest.mark.integration
def test_serve_replay_quiet_still_says_mismatches_and_warns_off_loopback(tmp_path: Path) -> None:
    _cassette(tmp_path)
    with _replay(tmp_path, "--quiet", "--host", "0.0.0.0", "--home", str(tmp_path / "h")) as p:
        out, err = Lines(p.stdout, "replay's stdout"), Lines(p.stderr, "replay's stderr")
        url, env = _banner(out)
        assert env["AWS_ACCESS_KEY_ID"] == "localsession"  # no --auth: serve's own
        assert _post(url, b'{"MaxResults": 5}')[0] == 200
        assert _post(url, b'{"MaxResults": 6}')[0] == 400
        p.send_signal(signal.SIGINT)
        assert p.wait(timeout=120) == 1
        logged = err.rest()
    assert "WARNING: localsession is binding 0.0.0.0, which is NOT a loopback" in logged
    assert "No authentication is on" in logged
    assert "-> 200" not in logged  # --quiet: no line per request ...
    assert f"MISMATCH POST / ({TARGET}) -> 400" in logged  # ... but every mismatch


@pytest.mark.parametrize(
    ("option", "why"),
    [
        (["--relaxed"], "the recorded service's answers decide"),
        (["--max-sessions", "2"], "how many sessions exist"),
        (["--gap-timeout", "3"], "no operations to order"),
        (["--lenient-sequence"], "no operations to order"),
        (["--submit-hold", "0"], "every submit at once"),
    ],
)
def test_serve_replay_refuses_live_service_options_by_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], option: list[str], why: str
) -> None:
    _cassette(tmp_path)
    assert main(["serve", "--replay", str(tmp_path), "--port", "0", *option]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"localsession serve: error: {option[0]} has no effect with --replay")
    assert why in err and len(err.splitlines()) == 1


def test_serve_replay_refuses_a_bad_auth_or_model_map(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _cassette(tmp_path)
    assert main(["serve", "--replay", str(tmp_path), "--port", "0", "--auth", "nocolon"]) == 2
    assert "--auth takes ACCESS_KEY:SECRET" in capsys.readouterr().err
    args = ["serve", "--replay", str(tmp_path), "--port", "0", "--model-map", "x"]
    assert main(args) == 2
    assert "--model-map 'x': expected NAME=TARGET" in capsys.readouterr().err


@pytest.mark.integration
def test_record_prints_every_export_serve_prints(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from localsession.server.serve import serve_exports

    home = tmp_path / "home"
    command = [sys.executable, "-m", "localsession.cli", "record", "--upstream"]
    args = [*command, "http://127.0.0.1:9", "--out", str(tmp_path / "c"), "--no-sign"]
    args += ["--port", "0", "--home", str(home), "--model-map", "my/model=localsession/tiny"]
    with spawn(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
        out = Lines(proc.stdout, "record's output")
        first = out.readline()
        assert first.startswith("localsession recording on "), first
        url = first.split()[3]
        printed: dict[str, str] = {}
        while "TINKER_API_KEY" not in printed:
            line = out.readline()
            assert line, "record's output ended before its exports"
            if line.startswith("export "):
                key, _, value = line.removeprefix("export ").strip().partition("=")
                printed[key] = value.strip("'")
        assert _exported(Path(printed["HF_HUB_CACHE"]), "my/model")
        host, port = url.removeprefix("http://").rsplit(":", 1)
        conn = http.client.HTTPConnection(host, int(port), timeout=120)
        conn.request("GET", "/_localsession/health")  # serving: any answer (the upstream is
        assert conn.getresponse().status == 503  # unreachable, and the proxy says so)
        conn.close()
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=120) == 0
    fake = SimpleNamespace(config=SimpleNamespace(region="us-west-2"), hub_cache=home / "hf-hub")
    expected = serve_exports(url, fake)  # type: ignore[arg-type]
    # serve's own two credential lines are left out: the caller's stay in effect, and the
    # proxy signs with the user's.
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        expected.pop(key)
    assert {k: printed[k] for k in expected} == expected
    assert set(printed) - set(expected) == {"TINKER_BASE_URL", "TINKER_API_KEY"}
    assert printed["TINKER_BASE_URL"] == url and printed["HF_HUB_OFFLINE"] == "1"


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
