"""Typed commands: what a dialect asks the runtime to run, parsed from its own wire.

A leaf beside :mod:`localsession.port`. Every dialect's wire is parsed into these values
once: the SageMaker wire by the runtime itself (``runtime/validate.py``), another dialect's
(Tinker, ``server/tinker/``) by the dialect, which calls the runtime's typed entry points
(``Service.create_session``, ``Service.submit_training``, ``Service.submit_sample``), so
no dialect builds another dialect's request shapes for the runtime to parse again. One
check judges every dialect's commands (``runtime/commands.check``); a queued op holds its
command and ``run_op`` matches on its type.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from localsession import vocab
from localsession.port import AdamHyperparams, LossConfig, SampleRequest, TrainingDatum


@dataclass(frozen=True)
class SessionCommand:
    """Create a training session: a LoRA adapter of ``rank`` / ``alpha`` on ``base_model``.

    ``seed`` seeds the LoRA initialisation; ``train_unembed`` puts LoRA on the output head
    too. ``strict`` (None: the service's default) applies the service's limits to its ops.
    ``region`` names the ARN's region (None: the service's). ``details`` are the
    ``DescribeTrainingSession`` members the session reports (e.g. ``RoleArn``).
    """

    name: str
    base_model: str
    rank: int
    alpha: int
    seed: int = 0
    train_unembed: bool = False
    strict: bool | None = None
    region: str | None = None
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ForwardCommand:
    """A ``forward`` (``backward=False``) or ``forward_backward`` over parsed datums.

    ``loss_fn`` is one of ``vocab.LOSS_FUNCTIONS``; ``loss_config`` None means the loss's
    default clip bounds.
    """

    datums: list[TrainingDatum]
    loss_fn: str
    loss_config: LossConfig | None = None
    backward: bool = True

    @property
    def kind(self) -> str:
        """The operation's kind (``vocab.TRAINING_OPS``)."""
        return vocab.OpKind.FORWARD_BACKWARD if self.backward else vocab.OpKind.FORWARD


@dataclass(frozen=True)
class OptimCommand:
    """An AdamW step over the accumulated gradients."""

    adam: AdamHyperparams

    kind = vocab.OpKind.OPTIMIZER_STEP


@dataclass(frozen=True)
class SaveCommand:
    """Save the adapter as a model package: a checkpoint (``checkpoint``: with the optimizer
    state, for training to resume from) or weights (for sampling; ``merge_weights`` also
    writes a merged full model). ``description`` is the package's description; ``key`` the
    saving dialect's own name for it, found again by ``Service.find_package``."""

    checkpoint: bool
    description: str | None = None
    merge_weights: bool = False
    key: str | None = None

    @property
    def kind(self) -> str:
        return vocab.OpKind.SAVE_STATE if self.checkpoint else vocab.OpKind.SAVE_WEIGHTS


@dataclass(frozen=True)
class LoadCommand:
    """Load a package's adapter (and, with ``load_optimizer``, its optimizer state)."""

    package_arn: str
    load_optimizer: bool

    kind = vocab.OpKind.LOAD_STATE


#: Every training command (ops ordered by sequence number).
TrainingCommand = ForwardCommand | OptimCommand | SaveCommand | LoadCommand


@dataclass(frozen=True)
class SampleCommand:
    """A ``sample`` op: ``request`` with the caller's values (its ``seed`` ignored when
    ``seed`` here is None: the runtime then draws one; its ``stop_token_ids`` the ids the
    caller named, which the runtime checks and completes from the stop strings), read from
    ``package_arn``'s weights (None: the session's sampling weights, else the base model).
    """

    request: SampleRequest
    seed: int | None = None
    package_arn: str | None = None
