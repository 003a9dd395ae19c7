"""The console's HTTP side (server/console/): its page and vendored assets, its JSON API, the
trace downloads (``localsession trace``, Tinker's ``export-trace``), package archives, the
key it asks for under ``--auth``, and its being off on a non-loopback host.

The loops here run on the fakes' instant engine or a stub; what the page draws from them is
the browser tier's (tests/browser/).
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from testkit import forward_backward, stub_service

from localsession.cli import main
from localsession.runtime.service import Service
from localsession.server.auth import Credential
from localsession.server.console import access
from localsession.server.hosting import ServerThread

pytestmark = pytest.mark.integration

SECRET = "s3cret"


def get(url: str, key: str | None = None) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url)
    if key is not None:
        request.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


@pytest.fixture
def stubbed(tmp_path: Path) -> Iterator[tuple[Service, str]]:
    """A stub-engine service with session ``s1`` that ran three ops, served on loopback."""
    service, _ = stub_service(tmp_path)
    try:
        for seq in (1, 2, 3):
            op = service.execute_training_operation("s1", forward_backward(seq, seq))
            assert service.wait_operation("s1", op["operationId"], 60)
        with ServerThread(service) as url:
            yield service, url
    finally:
        service.close()


def test_the_page_and_its_assets_are_served_from_the_package(stubbed: Any) -> None:
    _, url = stubbed
    status, headers, body = get(f"{url}/console/")
    assert status == 200 and b"<title>localsession console</title>" in body
    assert "default-src 'self'" in headers["content-security-policy"]
    # every script and stylesheet the page names is served here, none from elsewhere
    page = body.decode()
    assets = [part.split('"')[0] for part in page.split('src="')[1:]]
    assets += [part.split('"')[0] for part in page.split('href="')[1:]]
    local = [a for a in assets if not a.startswith(("#", "data:"))]
    assert local and all(a.startswith("static/") for a in local)
    for asset in local:
        status, _, content = get(f"{url}/console/{asset}")
        assert status == 200 and content, asset
    status, _, js = get(f"{url}/console/static/vendor/uplot/uPlot.iife.min.js")
    assert js.startswith(b"/*! https://github.com/leeoniya/uPlot (v1.6.32) */")
    status, _, _ = get(f"{url}/console")
    assert status == 200  # redirected to /console/


def test_the_api_lists_sessions_and_pages_their_events(stubbed: Any) -> None:
    service, url = stubbed
    status, _, body = get(f"{url}/console/api/sessions")
    rows = json.loads(body)["sessions"]
    assert status == 200 and [r["name"] for r in rows] == ["s1"]
    (row,) = rows
    assert row["status"] == "Running" and row["last_received"] == 3 and row["queue_depth"] == 0
    assert row["dialect"] == "sagemaker" and row["rank"] == 4
    detail = json.loads(get(f"{url}/console/api/sessions/s1")[2])
    phases = [(e["seq"], e["phase"]) for e in detail["events"]]
    assert phases == [(n, p) for n in (1, 2, 3) for p in ("submitted", "started", "finished")]
    finished = [e for e in detail["events"] if e["phase"] == "finished"]
    assert [e["metrics"]["loss"] for e in finished] == [1.0, 1.0, 1.0]  # the stub's loss
    later = json.loads(get(f"{url}/console/api/sessions/s1?since={detail['cursor']}")[2])
    assert later["events"] == [] and later["cursor"] == detail["cursor"]
    status, _, body = get(f"{url}/console/api/sessions/nope")
    assert status == 404 and "nope" in json.loads(body)["error"]
    assert get(f"{url}/console/api/sessions/s1?since=x")[0] == 400


def test_localsession_trace_writes_the_sessions_trace(stubbed: Any, tmp_path: Path) -> None:
    _, url = stubbed
    out = tmp_path / "s1.json"
    assert main(["trace", "s1", "-o", str(out), "--url", url]) == 0
    spans = [e for e in json.loads(out.read_text())["traceEvents"] if e["ph"] == "X"]
    assert [e["args"]["seq"] for e in sorted(spans, key=lambda e: e["ts"])] == [1, 2, 3]
    assert main(["trace", "missing", "-o", str(out), "--url", url]) == 2
    assert main(["trace", "all", "-o", str(tmp_path / "all.json"), "--url", url]) == 0


@pytest.fixture
def guarded(tmp_path: Path) -> Iterator[tuple[Service, str]]:
    service, _ = stub_service(tmp_path)
    try:
        with ServerThread(service, credential=Credential("AKID", SECRET)) as url:
            yield service, url
    finally:
        service.close()


def test_under_auth_the_api_wants_the_tinker_key(guarded: Any) -> None:
    _, url = guarded
    assert get(f"{url}/console/")[0] == 200  # the page itself holds no data
    assert get(f"{url}/console/static/console.js")[0] == 200
    api = f"{url}/console/api/sessions"
    assert get(api)[0] == 403
    assert get(api, "wrong")[0] == 403
    assert get(api, SECRET)[0] == 200
    assert get(api, f"tml-{SECRET}")[0] == 200


def test_localsession_trace_sends_the_key(
    guarded: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    service, url = guarded
    op = service.execute_training_operation("s1", forward_backward(1, 1))["operationId"]
    assert service.wait_operation("s1", op, 60)
    out = tmp_path / "s1.json"
    assert main(["trace", "s1", "-o", str(out), "--url", url]) == 2
    assert "--api-key" in capsys.readouterr().err and not out.exists()
    assert main(["trace", "s1", "-o", str(out), "--url", url, "--api-key", f"tml-{SECRET}"]) == 0
    spans = [e for e in json.loads(out.read_text())["traceEvents"] if e["ph"] == "X"]
    assert [e["args"]["op"] for e in spans] == [op]


def test_a_signed_link_opens_one_path_until_it_expires(guarded: Any) -> None:
    _, url = guarded
    path = "/console/api/sessions/s1/trace.json"
    query = access.signed_query(SECRET, path)
    assert get(f"{url}{path}?{query}")[0] == 200
    other = "/console/api/sessions"
    assert get(f"{url}{other}?{query}")[0] == 403  # signed for another path
    assert get(f"{url}{path}?{query.replace('signature=', 'signature=0')}")[0] == 403
    stale = access.signed_query(SECRET, path, now=time.time() - 2 * access.SIGNED_FOR_S)
    assert get(f"{url}{path}?{stale}")[0] == 403


def test_the_console_is_off_when_serve_says_why(tmp_path: Path) -> None:
    from localsession.server.app import create_app
    from localsession.server.hosting import AppThread
    from localsession.server.serve import ServeOptions, console_off

    assert console_off(ServeOptions(host="127.0.0.1")) is None
    assert console_off(ServeOptions(host="0.0.0.0", console=True)) is None
    reason = console_off(ServeOptions(host="0.0.0.0"))
    assert reason is not None and "--console" in reason
    service, _ = stub_service(tmp_path)
    try:
        with AppThread(create_app(service, console=reason)) as url:
            status, _, body = get(f"{url}/console/")
            assert status == 404 and b"--console" in body
            assert get(f"{url}/console/api/sessions")[0] == 404
    finally:
        service.close()


@pytest.fixture(scope="module")
def tinker_server() -> Iterator[Any]:
    pytest.importorskip("tinker", reason="the tinker SDK is not installed (make sdk)")
    from localsession.mocking.tinker_server import TinkerServer

    server = TinkerServer(engine="fake")
    yield server
    server.close()


def tinker_run(server: Any) -> tuple[str, str]:
    """A short Tinker loop with a checkpoint; (its Tinker session id, its runtime session)."""
    import tinker

    from localsession.mocking.hooks import scoped_environ

    with scoped_environ(server.environment()):
        sc = tinker.ServiceClient()
        tc = sc.create_lora_training_client(base_model="localsession/tiny", rank=4).result()
        datum = tinker.types.Datum(
            model_input=tinker.types.ModelInput.from_ints([1, 2, 3]),
            loss_fn_inputs={"target_tokens": [2, 3, 4], "weights": [1.0, 1.0, 1.0]},
        )
        for _ in range(2):
            tc.forward_backward([datum], "cross_entropy").result()
            tc.optim_step(tinker.types.AdamParams(learning_rate=1e-3)).result()
        tc.save_state("console").result()
        model_id = tc.model_id
    sessions = json.loads(get(f"{server.url}/console/api/sessions")[2])
    (owner,) = [
        t["session_id"]
        for t in sessions["tinker_sessions"]
        if any(r["model_id"] == model_id for r in t["training_runs"])
    ]
    (run,) = [r["session"] for t in sessions["tinker_sessions"] for r in t["training_runs"]
              if r["model_id"] == model_id]  # fmt: skip
    return owner, run


def test_tinker_export_trace_works_against_serve(tinker_server: Any, tmp_path: Path) -> None:
    owner, run = tinker_run(tinker_server)
    out = tmp_path / "t.pftrace"
    env = {**os.environ, **tinker_server.environment()}
    cli = Path(sys.executable).with_name("tinker")
    if not cli.exists():
        pytest.skip(f"no tinker CLI beside {sys.executable}")
    done = subprocess.run(
        [str(cli), "session", "export-trace", owner, "-o", str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    trace = json.loads(out.read_text())
    spans = [e for e in trace["traceEvents"] if e["ph"] == "X" and e["tid"] == 1]
    kinds = [e["args"]["kind"] for e in sorted(spans, key=lambda e: e["ts"])]
    assert kinds == ["forwardBackward", "optimizerStep"] * 2 + ["saveState"]
    names = [e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "process_name"]
    assert names == [f"{run} (training run {owner}:train:0)"]


def test_a_package_downloads_as_a_tar(tinker_server: Any) -> None:
    _, run = tinker_run(tinker_server)
    detail = json.loads(get(f"{tinker_server.url}/console/api/sessions/{run}")[2])
    (package,) = detail["packages"]
    assert package["description"].startswith("Tinker checkpoint tinker://")
    assert package["kind"] == "checkpoint"
    status, _, body = get(f"{tinker_server.url}/console/api/{package['download']}")
    assert status == 200
    with tarfile.open(fileobj=io.BytesIO(body)) as tar:
        names = tar.getnames()
    top = f"{package['group']}-{package['version']}"
    assert top in names and any(n.startswith(top + "/") and n.endswith(".json") for n in names)
    missing = get(f"{tinker_server.url}/console/api/packages/nope/9/archive.tar")
    assert missing[0] == 404
    # its version in other digits (Arabic-Indic, which int() reads as ASCII's) is no version:
    # a 404, where the package it found made a header that is no latin-1 (a 500)
    assert 0 <= package["version"] <= 9
    digit = urllib.parse.quote(chr(0x0660 + package["version"]))
    version = f"{tinker_server.url}/console/api/packages/{package['group']}/{digit}/archive.tar"
    assert get(version)[0] == 404


def test_a_base_model_sampler_is_labelled_and_in_its_sessions_trace(tinker_server: Any) -> None:
    import tinker

    from localsession.mocking.hooks import scoped_environ

    with scoped_environ(tinker_server.environment()):
        sc = tinker.ServiceClient()
        sampler = sc.create_sampling_client(base_model="localsession/tiny").result()
        params = tinker.types.SamplingParams(max_tokens=4, seed=1)
        prompt = tinker.types.ModelInput.from_ints([1, 2, 3])
        futures = [sampler.sample(prompt, 1, params) for _ in range(2)]
        assert all(len(f.result().sequences) == 1 for f in futures)
    listed = json.loads(get(f"{tinker_server.url}/console/api/sessions")[2])
    (row,) = [r for r in listed["sessions"] if r["label"] == "sampler on localsession/tiny"]
    assert row["dialect"] == "tinker"
    (owner,) = [
        t["session_id"]
        for t in listed["tinker_sessions"]
        if [s["base_model"] for s in t["samplers"]] == ["localsession/tiny"] and t["live"]
    ]
    status, _, body = get(f"{tinker_server.url}/console/api/tinker/{owner}/trace.json")
    events = json.loads(body)["traceEvents"]
    names = [e["args"]["name"] for e in events if e["name"] == "process_name"]
    assert names == [f"{row['name']} (sampler on localsession/tiny)"]
    batched = [op for e in events if e["ph"] == "X" and e["tid"] == 2 for op in e["args"]["ops"]]
    ended = [e["id"] for e in events if e["ph"] == "e" and e["cat"] == "sampling"]
    assert len(ended) == 2 and sorted(batched) == sorted(ended)


def test_the_json_api_reads_whatever_a_session_recorded() -> None:
    """A NaN or an infinity (a relaxed session's metric) is null and a lone surrogate (a
    relaxed client's text) an ASCII escape: JSON the page parses, not a 500 for good."""
    from localsession.server.console.console_routes import _json

    answer = _json({"loss": float("nan"), "text": "ok \ud800", "rows": [float("inf"), 1.5]})
    assert answer.status_code == 200 and answer.media_type == "application/json"
    assert json.loads(answer.body) == {"loss": None, "text": "ok \ud800", "rows": [None, 1.5]}
