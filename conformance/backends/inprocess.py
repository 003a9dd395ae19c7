"""``--backend=inprocess``: localsession's own clients on a private in-process service."""

from __future__ import annotations

import importlib.metadata
import os
import tempfile
from pathlib import Path
from typing import Any

from conformance.adapter import Backend, Limits
from conformance.artifacts import runtime_package_files
from conformance.backends.common import GROUP, REGION, ROLE, S3, xfail_file
from conformance.capabilities import CAPABILITIES

MAX_SESSIONS = 4
#: The sequence-gap timeout ``--backend=http`` runs its server with (the wire set-up).
WIRE_GAP_TIMEOUT = 1.0


def make_inprocess(options: dict[str, Any], *, wire: bool = False) -> Backend:
    """localsession's own clients on a private service. ``wire``: set up as ``--backend=http``
    runs (always strict, ``max_tokens >= 512``, its S3 output path and 1 s gap timeout), so
    in-process answers each test as the wire does (the reference snapshots' recorder)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import localsession
    from localsession import wiring

    home = tempfile.TemporaryDirectory(prefix="conformance-inprocess-")
    # The wire set-up is the server's profile, as ``--backend=http`` runs its server.
    service = (
        wiring.server_service(
            wiring.ServerOptions(
                home=Path(home.name), max_sessions=MAX_SESSIONS, gap_timeout=WIRE_GAP_TIMEOUT
            )
        )
        if wire
        else wiring.inprocess_service(home=Path(home.name), max_sessions=MAX_SESSIONS)
    )
    gap = service.config.gap_timeout

    def client(strict: bool) -> Any:
        return localsession.ServiceClient(
            REGION,
            role_arn=ROLE,
            backend=service,
            strict=strict or wire,
            model_package_group_arn=GROUP,
            s3_output_path=S3 if wire else None,
        )

    def usage(name: str) -> dict[str, int]:
        detail = service.describe_training_session({"TrainingSessionName": name})
        return dict(detail["TrainingSessionDetail"]["BillableTokenUsage"])

    def close() -> None:
        service.close()
        home.cleanup()

    return Backend(
        name="inprocess-wire" if wire else "inprocess",
        version=importlib.metadata.version("localsession"),
        ts=localsession,
        base_model=options.get("base_model") or "localsession/tiny",
        service_client=lambda: client(False),  # relaxed: short generations (docs/semantics.md#4)
        strict_client=lambda: client(True),
        capabilities=options.get("capabilities") or frozenset(CAPABILITIES),
        limits=Limits(
            min_max_tokens=512 if wire else 1, max_sessions=MAX_SESSIONS, gap_timeout_s=gap
        ),
        billable_usage=usage,
        xfail_file=xfail_file("inprocess"),
        close=close,
        package_files=runtime_package_files(service),
        details={
            "model": "localsession/tiny (CPU)",
            "strict": "strict, like the wire" if wire else "relaxed + strict client",
        },
    )
