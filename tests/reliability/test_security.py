"""The server lets no one in where they don't belong.

- it binds 127.0.0.1 by default and warns loudly on any other address;
- request bodies are capped at 64 MiB, by header and while streaming, with a clear error and
  the server still up;
- malformed JSON and unknown members get ValidationException;
- nothing in the package unpickles;
- ``--auth ACCESS_KEY:SECRET`` checks SigV4 signatures with botocore's signer, refuses
  unsigned and wrongly signed requests with AWS's codes, and the real SDK works with it.
"""

from __future__ import annotations

import ast
import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any
from unittest import mock

import boto3
import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.exceptions import ClientError
from procio import Lines

import localsession
from localsession.runtime.service import ServiceConfig
from localsession.server.auth import MAX_BODY_BYTES, Credential
from localsession.server.endpoints import client_env
from localsession.server.hosting import ServerThread
from localsession.server.serve import ServeOptions
from localsession.server.startup import is_loopback, warn_if_exposed
from localsession.wiring import build_service

from .conftest import HUB_ARN, Served

KEY, SECRET = "AKIDLOCALSESSION", "not-a-real-secret-1234"
GROUP = "arn:aws:sagemaker:us-west-2:123456789012:model-package-group/secure"
ROLE = "arn:aws:iam::123456789012:role/R"


# -- binding ---------------------------------------------------------------------------------


def test_binds_loopback_by_default_and_warns_loudly_otherwise(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert ServeOptions().host == "127.0.0.1"
    for host in ("127.0.0.1", "::1", "[::1]", "localhost", "127.0.0.2"):
        assert is_loopback(host), host
        warn_if_exposed(host, authenticated=False)
    assert capsys.readouterr().err == ""
    for host in ("0.0.0.0", "::", "192.168.1.10", "example.com"):
        assert not is_loopback(host), host
    warn_if_exposed("0.0.0.0", authenticated=False)
    err = capsys.readouterr().err
    assert "WARNING" in err and "NOT a loopback" in err and "--auth" in err


def test_serve_on_all_interfaces_prints_the_warning(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "localsession", "serve", "--host", "0.0.0.0", "--port", "0"]
        + ["--home", str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        out, errors = Lines(proc.stdout, "stdout"), Lines(proc.stderr, "stderr")
        first = out.readline()  # fails after a timeout rather than hanging on a silent server
        assert first.startswith("localsession serving on http://0.0.0.0:"), first
        proc.kill()
        proc.wait(timeout=30)
        err = errors.rest(30)
        assert "WARNING: localsession is binding 0.0.0.0, which is NOT a loopback" in err
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)


def test_server_thread_binds_loopback(served: Served) -> None:
    assert served.url.startswith("http://127.0.0.1:")


# -- body limits -----------------------------------------------------------------------------


def _raw(url: str, head: bytes, body_chunks: Iterable[bytes] = ()) -> bytes:
    """Send raw bytes, then read whatever the server answers until it closes."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=60) as sock:
        sock.sendall(head)
        try:
            for chunk in body_chunks:
                sock.sendall(chunk)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server refused and closed: what we want
        sock.settimeout(30)
        data = b""
        try:
            while chunk := sock.recv(65536):
                data += chunk
        except (ConnectionResetError, TimeoutError):
            pass
    return data


def _session(served: Served) -> str:
    from .conftest import create_session

    return create_session(served.service)


def test_body_limit_by_header_and_while_streaming(served: Served) -> None:
    assert MAX_BODY_BYTES == 64 * 1024 * 1024
    name = _session(served)
    path = f"/v1/training-sessions/{name}/operations"
    # A declared size over the limit is refused before any body is read.
    head = (
        f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {MAX_BODY_BYTES + 1}\r\n\r\n"
    ).encode()
    answer = _raw(served.url, head)
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert b"ValidationException" in answer and b"67108864-byte (64 MiB) limit" in answer
    # A chunked body (no Content-Length) is counted as it streams.
    head = (
        f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        "Transfer-Encoding: chunked\r\n\r\n"
    ).encode()
    piece = b" " * (1024 * 1024)
    chunk = b"%x\r\n" % len(piece) + piece + b"\r\n"
    answer = _raw(served.url, head, iter([chunk] * 70 + [b"0\r\n\r\n"]))
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    # A Content-Length that lies low: only the declared bytes are the body, the rest is
    # garbage on the connection; the server answers what it read and drops the connection.
    head = (
        f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        "Content-Length: 5\r\n\r\n"
    ).encode()
    answer = _raw(served.url, head, iter([b'{"a": 1}' + b"x" * 100_000]))
    assert answer.startswith(b"HTTP/1.1 400"), answer[:200]
    # Exactly at the limit is accepted (and then judged on its content).
    body = b'{"operationConfig": {}}'
    status, headers, parsed = served.request(
        "POST", path, body + b" " * (MAX_BODY_BYTES - len(body))
    )
    assert status == 400 and "sequenceNumber" in parsed["message"], parsed
    head = (
        f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {MAX_BODY_BYTES + 1}\r\n\r\n"
    ).encode()
    answer = _raw(served.url, head, iter([body + b" " * (MAX_BODY_BYTES + 1 - len(body))]))
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    # The server is still up and the session still works.
    status, _, health = served.request("GET", "/_localsession/health")
    assert status == 200 and health["status"] == "ok"
    ok = {
        "sequenceNumber": 1,
        "clientToken": "after-limits",
        "operationConfig": {"saveState": {"description": "still alive"}},
    }
    status, _, parsed = served.request("POST", path, json.dumps(ok).encode())
    assert status == 200 and parsed["operationId"], parsed
    served.service.stop_training_session({"TrainingSessionName": name})


def test_malformed_json_and_unknown_members_are_validation_errors(served: Served) -> None:
    name = _session(served)
    for body in (b"{not json", b"[1, 2]", b'"text"', b"\xff"):
        status, headers, parsed = served.request(
            "POST", f"/v1/training-sessions/{name}/operations", body
        )
        assert (status, headers["x-amzn-errortype"]) == (400, "ValidationException"), parsed
        status, _, parsed = served.control("ListModelPackages", {})
        status, _, parsed = served.request(
            "POST", "/", body, {"X-Amz-Target": "SageMaker.DescribeTrainingSession"}
        )
        assert (status, parsed["__type"]) == (400, "ValidationException"), parsed
    extra = {"sequenceNumber": 1, "clientToken": "x", "operationConfig": {"saveState": {}}}
    status, headers, parsed = served.request(
        "POST",
        f"/v1/training-sessions/{name}/operations",
        json.dumps({**extra, "debug": True}).encode(),
    )
    assert status == 400 and "unknown member 'debug'" in parsed["message"]
    served.service.stop_training_session({"TrainingSessionName": name})


# -- no pickle -------------------------------------------------------------------------------


def test_nothing_in_the_package_unpickles() -> None:
    """No pickle import, no torch.load without weights_only=True, no numpy allow_pickle."""
    root = Path(localsession.__file__).parent
    offenders = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [a.name for a in node.names] + [getattr(node, "module", None) or ""]
                if any(n.split(".")[0] in ("pickle", "cPickle", "dill", "joblib") for n in names):
                    offenders.append(f"{path}:{node.lineno} imports pickle")
            if isinstance(node, ast.Call):
                func = ast.unparse(node.func)
                keywords = {k.arg: ast.unparse(k.value) for k in node.keywords}
                if func.endswith("torch.load") or func == "load" and "weights_only" in keywords:
                    if keywords.get("weights_only") != "True":
                        offenders.append(f"{path}:{node.lineno} {func} without weights_only=True")
                if keywords.get("allow_pickle") == "True":
                    offenders.append(f"{path}:{node.lineno} allow_pickle=True")
                if func.endswith(("pickle.load", "pickle.loads", "Unpickler")):
                    offenders.append(f"{path}:{node.lineno} {func}")
    assert not offenders, offenders


# -- SigV4 -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    home = tmp_path_factory.mktemp("secured-home")
    service = build_service(ServiceConfig(home=home, max_sessions=4, persist_sessions=True))
    with ServerThread(service, long_poll=5.0, credential=Credential(KEY, SECRET)) as url:
        yield Served(service, url, home)
    service.close()


def _clients(url: str, key: str, secret: str, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Any]:
    for name, value in client_env(url, "us-west-2").items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    session = boto3.Session()
    return session.client("sagemaker"), session.client("sagemakertrainingsessionruntime")


def _code(exc: pytest.ExceptionInfo[ClientError]) -> tuple[str, int]:
    response: Any = exc.value.response
    return response["Error"]["Code"], response["ResponseMetadata"]["HTTPStatusCode"]


def test_signed_requests_pass_and_others_are_refused(
    secured: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    cp, rt = _clients(secured.url, KEY, SECRET, monkeypatch)
    assert cp.list_training_sessions()["TrainingSessionSummaries"] == []
    with pytest.raises(ClientError) as missing:  # signed fine; the session does not exist
        rt.get_training_operation_result(trainingSessionName="nope", operationId="x")
    assert _code(missing) == ("ResourceNotFoundException", 404)

    cp_bad, rt_bad = _clients(secured.url, KEY, "wrong-secret", monkeypatch)
    with pytest.raises(ClientError) as wrong:
        cp_bad.list_training_sessions()
    assert _code(wrong) == ("InvalidSignatureException", 403)
    with pytest.raises(ClientError) as wrong_rt:
        rt_bad.get_training_operation_result(trainingSessionName="nope", operationId="x")
    assert _code(wrong_rt) == ("InvalidSignatureException", 403)

    cp_other, _ = _clients(secured.url, "AKIDSOMEONEELSE", SECRET, monkeypatch)
    with pytest.raises(ClientError) as other:
        cp_other.list_training_sessions()
    assert _code(other) == ("UnrecognizedClientException", 403)

    # Unsigned: no Authorization header at all, on every route (admin included) but the
    # health probe, which says nothing else.
    assert secured.request("GET", "/_localsession/health")[::2] == (200, {"status": "ok"})
    for method, path in (
        ("POST", "/"),
        ("POST", "/_localsession/reset"),
        ("POST", "/v1/x"),
    ):
        status, headers, body = secured.request(
            method, path, b"{}", {"X-Amz-Target": "SageMaker.ListTrainingSessions"}
        )
        code = body.get("__type") if path == "/" else headers.get("x-amzn-errortype")
        assert (status, code) == (403, "MissingAuthenticationTokenException"), (path, body)
    status, _, body = secured.request("GET", "/s3/bucket?list-type=2")  # S3 answers in XML
    assert status == 403 and "<Code>AccessDenied</Code>" in body, body
    status, _, body = secured.request("POST", "/", b"{}", {"Authorization": "Bearer x"})
    assert (status, body["__type"]) == (403, "IncompleteSignatureException")


def _signed(url: str, body: bytes, *, when: datetime | None = None) -> AWSRequest:
    """A ListTrainingSessions request signed by botocore (as of ``when``, if given)."""
    request = AWSRequest(
        method="POST",
        url=url + "/",
        data=body,
        headers={
            "X-Amz-Target": "SageMaker.ListTrainingSessions",
            "Content-Type": "application/x-amz-json-1.1",
        },
    )
    signer = SigV4Auth(Credentials(KEY, SECRET), "sagemaker", "us-west-2")
    if when is None:
        signer.add_auth(request)
    else:
        with mock.patch("botocore.auth.get_current_datetime", return_value=when):
            signer.add_auth(request)
    return request


def test_tampered_or_stale_signatures_are_refused(secured: Served) -> None:
    good = _signed(secured.url, b"{}")
    headers = {k: v for k, v in good.headers.items()}
    status, _, body = secured.request("POST", "/", b"{}", headers)
    assert status == 200, body
    status, _, body = secured.request("POST", "/", b'{"MaxResults": 1}', headers)  # body swapped
    assert (status, body["__type"]) == (403, "InvalidSignatureException")
    retargeted = {**headers, "X-Amz-Target": "SageMaker.DeleteTrainingSession"}
    status, _, body = secured.request("POST", "/", b"{}", retargeted)  # a signed header changed
    assert (status, body["__type"]) == (403, "InvalidSignatureException")
    stale = _signed(secured.url, b"{}", when=datetime(2020, 1, 1))
    status, _, body = secured.request("POST", "/", b"{}", dict(stale.headers.items()))
    assert (status, body["__type"]) == (403, "InvalidSignatureException")
    assert "expired" in body["message"]


def test_the_sdk_works_with_the_configured_credentials(
    secured: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sagemaker.train.training_session import AdamParams, Datum, ModelInput, ServiceClient

    _clients(secured.url, KEY, SECRET, monkeypatch)
    client = ServiceClient(role_arn=ROLE, model_package_group_arn=GROUP, s3_output_path="s3://b/o")
    text = [257, *b"signed and sealed"]
    batch = [
        Datum(
            model_input=ModelInput.from_ints(text[:-1]),
            loss_fn_inputs={"target_tokens": text[1:], "weights": [1.0] * (len(text) - 1)},
        )
    ]
    tc = client.create_lora_training_client(base_model="localsession-tiny", rank=4)
    try:
        first = tc.forward_backward(batch, "cross_entropy").result().metrics["loss"]
        tc.optim_step(AdamParams(learning_rate=1e-2)).result()
        arn = tc.save_state("signed").result().model_package_arn
        after = tc.forward(batch, "cross_entropy").result().metrics["loss"]
    finally:
        tc.stop()
    assert after < first
    assert arn and ":model-package/secure/" in arn
    assert time.time() > 0 and HUB_ARN
