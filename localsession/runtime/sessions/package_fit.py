"""Which model packages a session may read: the same base model always, and for training
(``loadState``, which restores the adapter and its optimizer in place) the same LoRA rank.

Samplers read a package of any rank and alpha: the engine uses the package's own adapter
config. A package that does not fit raises :class:`PackageMismatch`, whose message names
both sides and the fix; the op that asked fails (run_op.py) or the request is refused
(``Service.sampling_weights``, the chat completions).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from localsession.port import EngineSpec, ResolvedModel
from localsession.runtime.packages.registry import Registry


class PackageMismatch(Exception):
    """A package whose base model (or, for training, LoRA rank) does not fit the session."""


class Fits(Protocol):
    """What the check reads of a session (``lifecycle.Session``)."""

    spec: EngineSpec
    registry: Callable[[], Registry]
    #: The service's catalog lookup, to tell whether a package's base model is this one.
    resolve_model: Callable[[str], ResolvedModel] | None


def compatible_package(session: Fits, arn: str, *, training: bool = False) -> Path:
    """The directory of package ``arn`` if it fits ``session`` (module doc); else raise
    :class:`PackageMismatch` (or the registry's not-found error for an unknown ARN)."""
    info = session.registry().get(arn)
    spec = session.spec
    # Equal names need no resolution (which reads the model map and the HF cache); this
    # runs on every sampling request that names a package.
    same_base = info.base_model == spec.base_model
    if not same_base and session.resolve_model is not None:
        try:
            mine = spec.model or session.resolve_model(spec.base_model)
            same_base = session.resolve_model(info.base_model).target == mine.target
        except ValueError:
            same_base = False
    if not same_base:
        raise PackageMismatch(
            f"Model package {arn} was trained on base model {info.base_model!r}, but this "
            f"session runs {spec.base_model!r}. Load it into a session created on "
            f"{info.base_model!r}."
        )
    if training and info.lora_rank != spec.rank:
        raise PackageMismatch(
            f"Model package {arn} holds a rank-{info.lora_rank} LoRA adapter, but this "
            f"session's adapter has rank {spec.rank}. Create the session with "
            f"rank={info.lora_rank} (create_training_client_from_state defaults to 32)."
        )
    return session.registry().path(arn)
