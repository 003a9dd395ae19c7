"""Typed results of the runtime's operations: what an engine returns and a dialect serialises.

A leaf beside :mod:`localsession.port` (it imports nothing of the package): an engine (the
torch engine, the fakes') returns these values and writes no wire key; the runtime stores
them on the operation; each dialect turns them into its own wire in one place (the
SageMaker dialect in ``runtime/sagemaker_wire.py``, the Tinker dialect in
``server/tinker/results.py``). Lists are plain Python values (floats, ints), never tensors.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from localsession import vocab

#: Why a sampled sequence ended: a stop token or string (``"stop"``), or ``max_tokens``
#: (``"length"``).
StopReason = Literal["stop", "length"]


@dataclass(frozen=True)
class DatumOutput:
    """One datum's outputs of a ``forward`` / ``forward_backward``.

    ``logprobs`` and ``elementwise_loss`` hold one value per input token (unpadded);
    ``extra`` holds the per-datum diagnostics (e.g. ``actor/pg_loss``, the datum's summed
    loss), one value each.
    """

    logprobs: list[float]
    elementwise_loss: list[float]
    extra: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class ForwardResult:
    """A ``forward`` / ``forward_backward``: the batch's metrics and each datum's outputs.

    ``metrics`` includes ``global_token_num`` (the tokens the op ran over) and the loss's
    ``loss`` (the mean over datums of each datum's summed loss).
    """

    metrics: dict[str, float]
    outputs: list[DatumOutput]

    @classmethod
    def from_rows(
        cls,
        lengths: Sequence[int],
        lp_rows: Sequence[Sequence[float]],
        loss_rows: Sequence[Sequence[float]],
        metrics: dict[str, float],
        datum_values: Mapping[str, Sequence[float]] | None = None,
    ) -> ForwardResult:
        """The result of a batch from its per-datum rows (``[B][T]`` lists, padded past
        ``lengths`` or not): ``metrics`` plus ``global_token_num``, and per datum its unpadded
        ``logprobs`` and ``elementwise_loss`` and each ``datum_values[key][i]``."""
        metrics[vocab.Metric.GLOBAL_TOKEN_NUM] = float(sum(lengths))
        extras: list[dict[str, float]] = [{} for _ in lengths]
        for key, values in (datum_values or {}).items():
            for extra, value in zip(extras, values, strict=True):
                extra[key] = value
        outputs = [
            DatumOutput(list(lp_rows[i][:n]), list(loss_rows[i][:n]), extras[i])
            for i, n in enumerate(lengths)
        ]
        return cls(metrics, outputs)

    @classmethod
    def empty(cls) -> ForwardResult:
        """The result of an op over no datums: zero loss, zero tokens, no outputs."""
        return cls.from_rows((), (), (), {vocab.Metric.LOSS: 0.0})

    @property
    def token_count(self) -> int:
        """The tokens the op ran over (``global_token_num``)."""
        return int(self.metrics.get(vocab.Metric.GLOBAL_TOKEN_NUM, 0))


@dataclass(frozen=True)
class OptimResult:
    """An optimizer step's metrics (``grad_norm``, ``learning_rate``, ...)."""

    metrics: dict[str, float]


@dataclass(frozen=True)
class TopLogprob:
    """One of the top-k alternatives at a prompt position."""

    token_id: int
    logprob: float


@dataclass(frozen=True)
class SampledSequence:
    """One sampled continuation: its tokens, their logprobs and why it ended.

    ``topk_logprobs`` (when asked for): per sampled token, the top-k alternatives of the
    distribution it was drawn from, likeliest first.
    """

    tokens: list[int]
    logprobs: list[float]
    stop_reason: StopReason
    topk_logprobs: list[list[TopLogprob]] | None = None


@dataclass(frozen=True)
class PromptAltTokens:
    """Per prompt position after the first: ``k`` tokens drawn from the model's
    distribution there, with their logprobs (``tokens[i][j]``, ``logprobs[i][j]``)."""

    tokens: list[list[int]]
    logprobs: list[list[float]]


@dataclass(frozen=True)
class SampleResult:
    """A ``sample`` request's continuations, with the prompt scores it asked for.

    ``prompt_logprobs`` (when asked for): log p(prompt[i] | prompt[:i]) at T = 1, entry 0
    (no context) ``0.0``. ``topk_prompt_logprobs`` (when asked for): per prompt position its
    top-k alternatives, position 0 an empty list. ``target_prompt_logprobs`` (when asked
    for): per prompt position the logprobs of the requested target tokens (``None`` where
    there is no context). ``prompt_alt_tokens`` (when asked for): sampled alternatives per
    prompt position. ``prompt_tokens`` is the prompt's length,
    filled in by the runtime (the per-sequence token usage the SageMaker wire reports).
    """

    sequences: list[SampledSequence]
    prompt_logprobs: list[float] | None = None
    topk_prompt_logprobs: list[list[TopLogprob]] | None = None
    target_prompt_logprobs: list[list[float | None]] | None = None
    prompt_alt_tokens: PromptAltTokens | None = None
    prompt_tokens: int = 0


@dataclass(frozen=True)
class LogprobsResult:
    """A ``computeLogprobs``: log p(tokens[i] | tokens[:i]) at T = 1; entry 0 is ``None``."""

    logprobs: list[float | None]


@dataclass(frozen=True)
class SaveResult:
    """A ``saveState`` / ``saveWeights``: the model package written."""

    package_arn: str


@dataclass(frozen=True)
class LoadResult:
    """A ``loadState`` or ``loadWeightsForSampling``: nothing to report but success."""


#: Every operation's typed result.
OpResult = ForwardResult | OptimResult | SampleResult | LogprobsResult | SaveResult | LoadResult


@dataclass(frozen=True)
class OpOutcome:
    """Where an operation stands, as a dialect reads it (``Service.operation_outcome``).

    ``status`` is one of ``vocab.OP_STATUSES``; ``result`` is set once it is ``Completed``;
    ``error`` names the problem of a ``Failed`` or ``Skipped`` op.
    """

    status: str
    result: OpResult | None = None
    error: str | None = None
