"""Service-wide settings: :class:`ServiceConfig`, its defaults and its ``LOCALSESSION_*`` variables.

Every setting of the in-process service lives here (docs/semantics.md#4). A config is frozen:
it is built once, by one of the composition root's named profiles (:mod:`localsession.wiring`:
``server_service``, ``inprocess_service``, ``fake_service``), and never changed after. The
engine factory is not the runtime's to choose: the wiring fills in the torch engine's, which
imports torch only when a session starts.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from localsession import vocab
from localsession.engine_options import EngineOptions, non_negative, whole_number
from localsession.port import Engine, EngineSpec
from localsession.runtime.models.catalog import localsession_home

DEFAULT_ACCOUNT = "000000000000"
DEFAULT_REGION = "us-west-2"


def _env_seconds(name: str, default: float | None) -> float | None:
    raw = os.environ.get(name, "")
    return non_negative(name, raw, "seconds >= 0") if raw.strip() else default


def _env_count(name: str, default: int) -> int:
    raw = os.environ.get(name, "")
    return whole_number(name, raw, "a whole number >= 1", least=1) if raw.strip() else default


@dataclass(frozen=True)
class ServiceConfig:
    """Service-wide settings (docs/semantics.md#4); every one is configurable, none changes
    once the config is built (``dataclasses.replace`` makes a changed copy)."""

    region: str = DEFAULT_REGION
    account: str = DEFAULT_ACCOUNT
    max_sessions: int = 4
    #: Service limits on (the default) or lifted (``--relaxed`` / ``strict=False``).
    strict: bool = True
    #: Seconds a missing sequence number blocks later ops before it is recorded lost.
    gap_timeout: float = 60.0
    #: Count a sequence number whose submit was refused (4xx) as used (``--lenient-sequence``).
    lenient_sequence: bool = False
    #: Seconds of inactivity before a session becomes Expired; None = never.
    idle_timeout: float | None = None
    #: Seconds without a heartbeat before a Tinker session is expired, its models' sessions
    #: and unused hidden samplers stopped (``vocab.TINKER_HEARTBEAT_TIMEOUT_S``); 0 = never
    #: (``--heartbeat-timeout``).
    heartbeat_timeout: float = vocab.TINKER_HEARTBEAT_TIMEOUT_S
    #: State directory: the model-package registry lives under it (docs/semantics.md#5).
    home: Path = field(default_factory=localsession_home)
    #: Makes a session's engine. ``None``: the service was built without one, and a session
    #: fails to start saying so; the wiring's profiles (and ``build_service``) fill in the
    #: torch engine's.
    engine_factory: Callable[[EngineSpec], Engine] | None = None
    #: Training ops one session may hold queued; past it submits get ThrottlingException
    #: (which the SDK retries). ``--max-queued-ops``.
    max_queued_ops: int = 1024
    #: Keep a record of every session under ``home/sessions`` and load them at start, so a
    #: restarted server reports the sessions it lost as Failed (runtime/sessions/persist.py). The
    #: server turns this on; in-process sessions end with their process.
    persist_sessions: bool = False
    #: Let ``BaseModelArn`` name a local directory or any resolvable name. A server turns
    #: this off: remote callers may name only the listed models (or their Hub ARNs), never a
    #: path on the server's disk.
    local_model_paths: bool = True
    #: Where the local Hub exports tokenizers for clients (default ``home/hf-hub``); live
    #: ``localsession.mock()`` contexts share one, since HF_HUB_CACHE is process-wide.
    hub_cache: Path | None = None
    #: The sampling scheduler's gathering window in seconds (None: the scheduler's default).
    #: An instant engine (the fakes) sets 0: a batch is taken as soon as one op is queued.
    gather_quiet_s: float | None = None
    #: Refuse CreateTrainingSession members outside botocore's model of the ``sagemaker``
    #: API. Reading that model costs 0.1-0.5 s on the first create; the light fakes, whose
    #: requests come from their own client, turn it off.
    check_create_members: bool = True
    #: The engine's settings (``LOCALSESSION_DEVICE`` ...), carried on every session's
    #: :class:`EngineSpec`. ``None``: not chosen; :meth:`from_env` and the wiring's
    #: ``build_service`` read the environment's, and a service given none runs the defaults.
    engine_options: EngineOptions | None = None

    @classmethod
    def from_env(cls, **overrides: Any) -> ServiceConfig:
        """Defaults, then ``LOCALSESSION_*`` variables, then explicit overrides (a name that is
        no setting raises ``TypeError``). A bad variable raises
        :class:`~localsession.engine_options.SettingError` naming it and what it accepts."""
        config = cls(
            region=os.environ.get("AWS_REGION")
            or os.environ.get("AWS_DEFAULT_REGION")
            or DEFAULT_REGION,
            max_sessions=_env_count("LOCALSESSION_MAX_SESSIONS", 4),
            gap_timeout=_env_seconds("LOCALSESSION_GAP_TIMEOUT", 60.0) or 0.0,
            idle_timeout=_env_seconds("LOCALSESSION_IDLE_TIMEOUT", None),
            heartbeat_timeout=_env_seconds(
                "LOCALSESSION_HEARTBEAT_TIMEOUT", vocab.TINKER_HEARTBEAT_TIMEOUT_S
            )
            or 0.0,
            engine_options=EngineOptions.from_env(),
        )
        return dataclasses.replace(config, **overrides)
