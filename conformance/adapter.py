"""The backend adapter the suite talks to: a client factory, capabilities and limits.

A backend is whatever produces the SDK's public surface (``ServiceClient`` and the types).
:class:`Backend` bundles what the suite needs to drive it and nothing else, so anyone can
write one for their own server: see ``conformance/README.md`` ("Your own backend").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from conformance.artifacts import PackageFiles, s3_package_files


class BackendUnavailable(Exception):
    """The backend cannot run here (no credentials, no server...): every test is skipped
    with this message as the reason."""


def byte_decode(tokens: list[int]) -> str:
    """Text of byte-tokenizer tokens (ids < 256 are bytes; PAD/BOS/EOS decode to nothing)."""
    return bytes(t for t in tokens if 0 <= t < 256).decode("utf-8", errors="replace")


@dataclass(frozen=True)
class Limits:
    """Numbers the suite sizes its inputs and tolerances by."""

    #: The smallest ``max_tokens`` the client accepts (512 through botocore).
    min_max_tokens: int = 512
    #: Concurrent sessions the backend allows (None: unknown; quota tests skip).
    max_sessions: int | None = None
    #: Seconds a missing sequence number blocks later ops (docs/semantics.md#4).
    gap_timeout_s: float = 60.0
    #: Seconds without a heartbeat after which a Tinker server expires a session (None:
    #: undeclared; the expiry test skips).
    heartbeat_timeout_s: float | None = None
    #: Seconds of inactivity after which a SageMaker session becomes ``Expired`` (None:
    #: undeclared; the idle-expiry test skips).
    idle_timeout_s: float | None = None
    #: Seconds any one ``result()`` may take before the test fails: a hang detector, sized
    #: for a loaded machine (a 512-token sample took over 120 s on 2 busy cores), not a
    #: speed check.
    op_timeout_s: float = 900.0
    #: Largest mean squared difference between sampler and trainer logprobs.
    logprob_mse: float = 1e-6
    #: Absolute tolerance when comparing logprobs computed by two code paths.
    logprob_atol: float = 1e-4
    #: LoRA rank the suite creates sessions with.
    rank: int = 4
    #: Learning rate the suite trains with (inside the service range (0, 0.01]).
    learning_rate: float = 5e-3
    #: LoRA alpha of the sessions the suite creates (None: twice the rank).
    lora_alpha: int | None = None
    #: Relative tolerance of a loss compared with its closed form from the same forward.
    loss_rtol: float = 1e-4


@dataclass
class Backend:
    """One backend under test.

    ``service_client()`` returns a ServiceClient (the SDK's, or a drop-in) that the suite
    may call freely; ``strict_client()`` one that enforces the service limits (None when the
    backend cannot give one). ``ts`` is the module whose public names the suite uses
    (``sagemaker.train.training_session`` or ``localsession``).
    """

    name: str
    version: str
    ts: ModuleType
    base_model: str
    service_client: Callable[[], Any]
    capabilities: frozenset[str] = frozenset()
    limits: Limits = field(default_factory=Limits)
    strict_client: Callable[[], Any] | None = None
    #: Text of a token list (for stop strings; None: tests that need it skip). The tiny
    #: models' byte tokenizer by default.
    decode: Callable[[list[int]], str] | None = byte_decode
    #: The model's end-of-sequence token id, if known.
    eos_token_id: int | None = 258
    #: A prompt of valid token ids for this model (BOS + a few bytes by default).
    prompt: tuple[int, ...] = (257, 104, 101, 108, 108, 111)
    #: Token ids of a text for this model (None: the suite builds inputs from ``prompt``).
    encode: Callable[[str], list[int]] | None = None
    #: ``BillableTokenUsage`` of a session by name (capability ``accounting.tokens``).
    billable_usage: Callable[[str], dict[str, int]] | None = None
    #: Known divergences: lines ``<test id>  # reason`` (see plugin.read_xfail_file).
    xfail_file: Path | None = None
    close: Callable[[], None] = lambda: None
    #: Free-form facts recorded in the report (server URL, region, ...).
    details: dict[str, str] = field(default_factory=dict)
    #: The client surface: ``sagemaker`` (``suite/``) or ``tinker`` (``suite_tinker/``). It
    #: answers the ``surface.*`` capabilities, whatever ``--capabilities`` declares.
    surface: str = "sagemaker"
    #: The files of a saved model package by its ARN, ``{path under its S3Uri: bytes}``
    #: (conformance/artifacts.py): how the optimizer tests read the adapter back. By
    #: default boto3 against the environment's endpoints, as a user reads them.
    package_files: PackageFiles = field(default_factory=lambda: s3_package_files)

    def has(self, capability: str) -> bool:
        if capability.startswith("surface."):
            return capability == f"surface.{self.surface}"
        return capability in self.capabilities
