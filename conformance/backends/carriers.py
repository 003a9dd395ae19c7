"""Two more ways to drive localsession, for the shipped reference snapshots
(conformance/reference/): the third carrier, and in-process clients set up like the wire.

- ``--backend=import:conformance.backends.carriers:make_mock``: the unmodified SDK inside
  ``localsession.mock()`` (no socket), with ``serve``'s strict limits, four sessions and a
  1 s sequence-gap timeout, as ``--backend=http`` runs its server;
- ``--backend=import:conformance.backends.carriers:make_inprocess_wire``: localsession's own
  clients in-process, strict (``max_tokens >= 512``, as botocore enforces over the wire),
  with the same S3 output path, session cap and gap timeout as ``--backend=http``. The
  three carriers then answer each test alike, which is what the reference set checks.
"""

from __future__ import annotations

import importlib.metadata
import os
from typing import Any

from conformance.adapter import Backend, Limits
from conformance.backends.common import GROUP, REGION, ROLE, S3, xfail_file
from conformance.backends.inprocess import MAX_SESSIONS, make_inprocess
from conformance.backends.inprocess import WIRE_GAP_TIMEOUT as GAP_TIMEOUT
from conformance.capabilities import CAPABILITIES


def make_inprocess_wire(options: dict[str, Any]) -> Backend:
    return make_inprocess(options, wire=True)


def make_mock(options: dict[str, Any]) -> Backend:
    import sagemaker.train.training_session as ts

    import localsession

    saved = {
        k: os.environ.get(k) for k in ("LOCALSESSION_MAX_SESSIONS", "LOCALSESSION_GAP_TIMEOUT")
    }
    os.environ["LOCALSESSION_MAX_SESSIONS"] = str(MAX_SESSIONS)
    os.environ["LOCALSESSION_GAP_TIMEOUT"] = str(GAP_TIMEOUT)
    try:
        mock = localsession.mock(strict=True, region=REGION).start()
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value

    def client() -> Any:
        return ts.ServiceClient(role_arn=ROLE, model_package_group_arn=GROUP, s3_output_path=S3)

    def usage(name: str) -> dict[str, int]:
        import boto3

        detail = boto3.client("sagemaker", region_name=REGION).describe_training_session(
            TrainingSessionName=name
        )["TrainingSessionDetail"]
        return {k: int(v) for k, v in detail.get("BillableTokenUsage", {}).items()}

    return Backend(
        name="mock",
        version=f"localsession {importlib.metadata.version('localsession')} mock() via "
        f"sagemaker-train {importlib.metadata.version('sagemaker-train')}",
        ts=ts,
        base_model=options.get("base_model") or "localsession-tiny",
        service_client=client,
        strict_client=client,
        capabilities=options.get("capabilities") or frozenset(CAPABILITIES),
        limits=Limits(min_max_tokens=512, max_sessions=MAX_SESSIONS, gap_timeout_s=GAP_TIMEOUT),
        billable_usage=usage,
        xfail_file=xfail_file("http"),
        close=mock.stop,
        details={"carrier": "localsession.mock() (in-process botocore hook)"},
    )
