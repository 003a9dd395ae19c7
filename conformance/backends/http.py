"""``--backend=http``: ``localsession serve`` on port 0 in a subprocess, driven through the
unmodified SageMaker SDK; ``--backend=http=URL``: anyone's already-running server.

The SDK is pointed at the server through its endpoint-override environment variables
(docs/wire.md#1), set for this process while the backend lives. The server runs
in its own process so that an SDK client left to the garbage collector can never stop a
session from inside the server's event loop.
"""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
import tempfile
import threading
from typing import Any

from conformance.adapter import Backend, BackendUnavailable, Limits
from conformance.backends import processes
from conformance.backends.common import GROUP, REGION, ROLE, S3, xfail_file
from conformance.capabilities import CAPABILITIES
from localsession.server.endpoints import client_env

MAX_SESSIONS = 4
GAP_TIMEOUT = 1.0
#: Seconds ``serve`` may take to print its URL: imports and a model load on a loaded machine.
START_TIMEOUT = 300.0


def sdk_env(url: str, region: str) -> dict[str, str]:
    """What the unmodified SDK (and boto3) need to talk to ``url`` (docs/wire.md#1),
    with credentials from ``CONFORMANCE_ACCESS_KEY_ID``/``_SECRET_ACCESS_KEY`` when set."""
    env = client_env(url, region)
    env["AWS_ACCESS_KEY_ID"] = os.environ.get("CONFORMANCE_ACCESS_KEY_ID", "conformance")
    env["AWS_SECRET_ACCESS_KEY"] = os.environ.get("CONFORMANCE_SECRET_ACCESS_KEY", "conformance")
    return env


def start_server(home: str) -> tuple[subprocess.Popen[str], str]:
    """``localsession serve --port 0``; returns the process and its URL (first stdout line)."""
    command = [
        sys.executable,
        "-m",
        "localsession.cli",
        "serve",
        "--port",
        "0",
        "--home",
        home,
        "--max-sessions",
        str(MAX_SESSIONS),
        "--gap-timeout",
        str(GAP_TIMEOUT),
    ]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}  # serve flushes its banner itself
    # In this process's group (processes.py): a harness that stops the run's group stops the
    # server too, even when this process was killed before it could stop the server itself.
    proc = processes.start(
        command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env
    )
    assert proc.stdout is not None
    first: list[str] = []
    reader = threading.Thread(
        target=lambda: first.append(proc.stdout.readline()),  # type: ignore[union-attr]
        daemon=True,
    )
    reader.start()
    reader.join(START_TIMEOUT)
    line = first[0] if first else ""
    if " serving on " not in line:
        processes.stop(proc)
        raise BackendUnavailable(
            f"`localsession serve` did not start within {START_TIMEOUT:g} s: {line!r}"
        )
    # Keep draining stdout so the server never blocks on a full pipe.
    threading.Thread(target=proc.stdout.read, daemon=True).start()
    return proc, line.split(" serving on ", 1)[1].split()[0]


def make_http(options: dict[str, Any], url: str | None) -> Backend:
    import sagemaker.train.training_session as ts

    proc: subprocess.Popen[str] | None = None
    home: tempfile.TemporaryDirectory[str] | None = None
    if url is None:
        home = tempfile.TemporaryDirectory(prefix="conformance-http-")
        proc, url = start_server(home.name)
    region = options.get("region") or REGION
    saved = {key: os.environ.get(key) for key in sdk_env(url, region)}
    os.environ.update(sdk_env(url, region))

    def client() -> Any:
        return ts.ServiceClient(
            role_arn=options.get("role") or ROLE,
            model_package_group_arn=options.get("group") or GROUP,
            s3_output_path=options.get("s3") or S3,
        )

    def usage(name: str) -> dict[str, int]:
        import boto3

        detail = boto3.client("sagemaker", region_name=region).describe_training_session(
            TrainingSessionName=name
        )["TrainingSessionDetail"]
        return {k: int(v) for k, v in detail.get("BillableTokenUsage", {}).items()}

    def close() -> None:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        if proc is not None:
            processes.stop(proc)
        if home is not None:
            home.cleanup()

    own = proc is not None
    declared = options.get("capabilities")
    capabilities = frozenset(CAPABILITIES) if own and declared is None else declared or frozenset()
    return Backend(
        name="http" if own else f"http={url}",
        version=(
            f"localsession {importlib.metadata.version('localsession')} via sagemaker-train "
            f"{importlib.metadata.version('sagemaker-train')}"
        )
        if own
        else f"server at {url} via sagemaker-train {importlib.metadata.version('sagemaker-train')}",
        ts=ts,
        base_model=options.get("base_model") or "localsession-tiny",
        service_client=client,
        strict_client=client if "limits.strict" in capabilities else None,
        capabilities=capabilities,
        limits=Limits(
            min_max_tokens=512,  # botocore refuses less before sending (docs/wire.md#5)
            max_sessions=MAX_SESSIONS if own else None,
            gap_timeout_s=GAP_TIMEOUT if own else 60.0,
        ),
        billable_usage=usage,
        xfail_file=options.get("xfail_file") or xfail_file("http" if own else "http-url"),
        close=close,
        details={"url": url, "server": "localsession serve (strict)" if own else "external"},
    )
