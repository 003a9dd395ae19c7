"""Command-line options that declare the server's limits, for a backend that cannot know them
(``--backend=http=URL``, ``remote``, an ``import:`` factory, a Tinker ``--base-url``):
``--max-sessions``, ``--gap-timeout``, ``--heartbeat-timeout``, ``--idle-timeout``,
``--op-timeout`` and ``--min-max-tokens``. Each overrides the backend's own
:class:`~conformance.adapter.Limits` field; a test that needs a limit nobody declared skips,
naming the option that declares it (:func:`undeclared`)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from conformance.adapter import Limits

_DEFAULTS = Limits()
#: option -> (Limits field, type, help); the defaults said are Limits' own

OPTIONS: dict[str, tuple[str, type, str]] = {
    "--max-sessions": (
        "max_sessions",
        int,
        "the server's concurrent-session cap (test_session_quota checks it; unset: it skips)",
    ),
    "--gap-timeout": (
        "gap_timeout_s",
        float,
        f"seconds a missing sequence number blocks later ops on the server (default "
        f"{_DEFAULTS.gap_timeout_s:g})",
    ),
    "--heartbeat-timeout": (
        "heartbeat_timeout_s",
        float,
        "tinker backend: seconds without a heartbeat after which the server expires a session "
        "(serve --heartbeat-timeout; unset: the expiry test skips). Without --base-url the "
        "loopback server is started with it: keep it above the SDK's 10 s heartbeat period",
    ),
    "--idle-timeout": (
        "idle_timeout_s",
        float,
        "sagemaker backends: seconds of inactivity after which the server expires a session "
        "(LOCALSESSION_IDLE_TIMEOUT; unset: the idle-expiry test skips). The fakes backend is "
        "built with it: keep it above the longest pause between one session's ops",
    ),
    "--op-timeout": (
        "op_timeout_s",
        float,
        f"seconds one result() may take before a test fails (default {_DEFAULTS.op_timeout_s:g}, "
        "a hang detector; lower it for a peer that may never answer)",
    ),
    "--min-max-tokens": (
        "min_max_tokens",
        int,
        "the smallest max_tokens the client accepts (512 through botocore)",
    ),
}


def add_options(group: Any) -> None:
    """Add the limit options to the plugin's option group."""
    for option, (_, kind, text) in OPTIONS.items():
        group.addoption(option, type=kind, metavar="N" if kind is int else "S", help=text)


def declared(config: pytest.Config, limits: Limits) -> Limits:
    """``limits`` with every limit option given on the command line applied."""
    changes: dict[str, Any] = {}
    for option, (field, _, _) in OPTIONS.items():
        given = config.getoption(option)
        if given is None:
            continue
        if given <= 0:
            raise pytest.UsageError(f"{option} {given}: give a positive number")
        changes[field] = given
    return dataclasses.replace(limits, **changes) if changes else limits


def undeclared(backend_name: str, field: str) -> str:
    """The skip reason of a test that needs the limit ``field`` which nobody declared."""
    option = next(o for o, (f, _, _) in OPTIONS.items() if f == field)
    return (
        f"backend {backend_name} declares no {field.removesuffix('_s').replace('_', ' ')}: "
        f"pass {option} (the server's own value) to check it"
    )
