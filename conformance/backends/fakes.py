"""``--backend=fakes``: ``fakes.FakeServiceClient`` (the real runtime, the numeric fake engine)."""

from __future__ import annotations

import dataclasses
import importlib.metadata
from typing import Any

from conformance.adapter import Backend, Limits
from conformance.artifacts import runtime_package_files
from conformance.backends.common import GROUP, xfail_file
from conformance.capabilities import CAPABILITIES

MAX_SESSIONS = 4


def fakes_backend(name: str, service: Any, *, xfail: str | None = None) -> Backend:
    """A backend over a ``fakes.FakeService`` (also used by the self-check's broken fakes)."""
    import localsession
    from fakes import FakeServiceClient

    def client(strict: bool) -> Any:
        return FakeServiceClient(service=service, strict=strict, model_package_group_arn=GROUP)

    def usage(session: str) -> dict[str, int]:
        detail = service.describe_training_session({"TrainingSessionName": session})
        return dict(detail["TrainingSessionDetail"]["BillableTokenUsage"])

    return Backend(
        name=name,
        version=importlib.metadata.version("localsession"),
        ts=localsession,
        base_model="localsession/tiny",  # any name: the fake model is the same for all
        service_client=lambda: client(False),
        strict_client=lambda: client(True),
        capabilities=frozenset(CAPABILITIES),
        limits=Limits(min_max_tokens=1, max_sessions=MAX_SESSIONS, gap_timeout_s=0.0),
        billable_usage=usage,
        xfail_file=xfail_file(xfail or name),
        close=service.close,
        package_files=runtime_package_files(service),
        details={"model": "fakes bigram engine"},
    )


def expire_idle_after(service: Any, seconds: float) -> None:
    """Make a ``fakes.FakeService`` expire a session idle for ``seconds``, as
    ``LOCALSESSION_IDLE_TIMEOUT`` does a server's (docs/semantics.md#4, *Inactivity*)."""
    runtime = service.runtime
    runtime.config = dataclasses.replace(runtime.config, idle_timeout=seconds)
    runtime.table.config = runtime.config  # the table expires sessions (sessions/table.py)


def make_fakes(options: dict[str, Any]) -> Backend:
    """The fakes; with ``--idle-timeout`` (``options["idle_timeout"]``) their service expires
    idle sessions after it."""
    from fakes import FakeService

    service = FakeService(strict=False, max_sessions=MAX_SESSIONS, numerics=True)
    backend = fakes_backend("fakes", service)
    idle = options.get("idle_timeout")
    if idle:
        expire_idle_after(service, float(idle))
        backend.limits = dataclasses.replace(backend.limits, idle_timeout_s=float(idle))
    return backend
