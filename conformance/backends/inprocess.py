"""``--backend=inprocess``: localsession's own clients on a private in-process service."""

from __future__ import annotations

import importlib.metadata
import os
import tempfile
from pathlib import Path
from typing import Any

from conformance.adapter import Backend, Limits
from conformance.backends import GROUP, ROLE, xfail_file
from conformance.capabilities import CAPABILITIES

MAX_SESSIONS = 4


def make_inprocess(options: dict[str, Any]) -> Backend:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import localsession
    from localsession.runtime.service import ServiceConfig
    from localsession.wiring import build_service

    home = tempfile.TemporaryDirectory(prefix="conformance-inprocess-")
    # gap_timeout 0: the in-process default, a number refused client-side is lost at once.
    service = build_service(
        ServiceConfig(home=Path(home.name), max_sessions=MAX_SESSIONS, gap_timeout=0.0)
    )

    def client(strict: bool) -> Any:
        return localsession.ServiceClient(
            "us-west-2",
            role_arn=ROLE,
            backend=service,
            strict=strict,
            model_package_group_arn=GROUP,
        )

    def usage(name: str) -> dict[str, int]:
        detail = service.describe_training_session({"TrainingSessionName": name})
        return dict(detail["TrainingSessionDetail"]["BillableTokenUsage"])

    def close() -> None:
        service.close()
        home.cleanup()

    return Backend(
        name="inprocess",
        version=importlib.metadata.version("localsession"),
        ts=localsession,
        base_model="localsession/tiny",
        service_client=lambda: client(False),  # relaxed: short generations (docs/semantics.md#4)
        strict_client=lambda: client(True),
        capabilities=frozenset(CAPABILITIES),
        limits=Limits(min_max_tokens=1, max_sessions=MAX_SESSIONS, gap_timeout_s=0.0),
        billable_usage=usage,
        xfail_file=xfail_file("inprocess"),
        close=close,
        details={"model": "localsession/tiny (CPU)", "strict": "relaxed + strict client"},
    )
