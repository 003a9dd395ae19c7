"""Tinker's ``gspo`` and ``stable_reinforce`` over the runtime's ops: each request is checked
here (a 400 naming the datum and the problem), then runs as dro.py runs ``dro``: a forward
for ``lp``, then a ``cross_entropy`` backward whose weights are ``-dℓ/dlp``
(numerics/sequence_losses.py has the formulas and the proof of the gradient).

``stable_reinforce`` reads the datum's provenance (provenance.py): each run names a recorded
sequence (stability.py), which must exist, be this session's and be unexpired; the tokens a
run claims must be the recorded ones; the sampler log-probabilities the loss uses are the
recorded ones at the positions of sampled runs, and only those positions are trained.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from localsession import vocab
from localsession.port import ProvenanceSpan, TrainingDatum
from localsession.runtime import errors
from localsession.server.tinker import dro
from localsession.server.tinker.dro import Surrogate
from localsession.server.tinker.stability import RecordedSequence, StabilityRecords

if TYPE_CHECKING:
    from torch import Tensor

Shapes = dict[str, list[int]]
LossOfLp = Callable[["Tensor"], "Tensor"]
#: The Tinker losses run as a forward, then a cross-entropy backward (dro.py).
TWO_OP_LOSSES = (
    vocab.TinkerLoss.DRO,
    vocab.TinkerLoss.GSPO,
    vocab.TinkerLoss.STABLE_REINFORCE,
)


def _column(datum: TrainingDatum, shapes: Shapes, key: str, n: int, where: str) -> list[float]:
    given = datum.loss_fn_inputs.get(key)
    if given is None:
        raise errors.validation(f"{where} needs `{key}` (one value per target token)")
    if len(given) != n or len(shapes.get(key) or [n]) != 1:
        raise errors.validation(f"{where}: `{key}` has {len(given)} values, target_tokens {n}")
    values = [float(v) for v in given]
    if not all(math.isfinite(v) for v in values):
        raise errors.validation(f"{where}: `{key}` holds a non-finite value")
    return values


def _targets(datum: TrainingDatum, shapes: Shapes, allowed: set[str], where: str) -> list[Any]:
    extra = sorted(set(datum.loss_fn_inputs) - allowed)
    if extra:
        raise errors.validation(
            f"{where} does not take {', '.join(extra)} (it takes {', '.join(sorted(allowed))})"
        )
    target = datum.loss_fn_inputs.get("target_tokens")
    if target is None or len(shapes.get("target_tokens") or [0, 0]) != 1:
        raise errors.validation(f"{where} needs 1-D `target_tokens`")
    return target


def _forward(datum: TrainingDatum, target: list[Any]) -> TrainingDatum:
    inputs = {"target_tokens": target, "weights": [1.0] * len(target)}
    return replace(datum, loss_fn_inputs=inputs)


def _f64(values: list[float]) -> Tensor:
    import torch

    return torch.tensor(values, dtype=torch.float64)


@dataclass(frozen=True)
class _Plan:
    """Per datum, the elementwise loss as a function of ``lp`` (a Surrogate for dro.py)."""

    name: str
    losses: list[Callable[[], LossOfLp]]

    def weights(self, index: int, lp: list[float]) -> list[float]:
        from localsession.numerics.sequence_losses import surrogate_weights

        return surrogate_weights(self.losses[index](), lp)[1]

    def loss(self, index: int, lp: list[float]) -> list[float]:
        from localsession.numerics.sequence_losses import surrogate_weights

        return surrogate_weights(self.losses[index](), lp)[0]


def _config_number(config: dict[str, Any], key: str, default: float, high: float) -> float:
    value = config.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise errors.validation(f"loss_fn_config {key}={value!r} must be a number")
    if not math.isfinite(value) or not 0 <= value <= high:
        raise errors.validation(f"loss_fn_config {key}={value} must be in [0, {high:g}]")
    return float(value)


def parse_gspo(
    config: dict[str, Any], datums: list[TrainingDatum], shapes: list[Shapes]
) -> tuple[_Plan, list[TrainingDatum]]:
    """The checked ``gspo`` request: its plan and the forward's datums."""
    from localsession.numerics import sequence_losses as sl

    name = vocab.TinkerLoss.GSPO
    unknown = sorted(set(config) - {"epsilon_low", "epsilon_high"})
    if unknown:
        raise errors.validation(
            f"loss_fn {name!r} takes loss_fn_config epsilon_low and epsilon_high, not {unknown}"
        )
    low = _config_number(config, "epsilon_low", sl.GSPO_EPSILON_LOW, 1.0)
    high = _config_number(config, "epsilon_high", sl.GSPO_EPSILON_HIGH, 10.0)
    allowed = {"target_tokens", "logprobs", "advantages", "sequence_ratio_mask"}
    losses: list[Callable[[], LossOfLp]] = []
    forward = []
    for index, (datum, shape_of) in enumerate(zip(datums, shapes, strict=True)):
        where = f"datum {index}: loss_fn {name!r}"
        target = _targets(datum, shape_of, allowed, where)
        n = len(target)
        q = _column(datum, shape_of, "logprobs", n, where)
        adv = _column(datum, shape_of, "advantages", n, where)
        mask = _column(datum, shape_of, "sequence_ratio_mask", n, where)
        if not any(m != 0 for m in mask):
            raise errors.validation(
                f"{where}: `sequence_ratio_mask` marks no position; mark (1) the sampled "
                "tokens whose mean log-ratio is the sequence ratio"
            )

        def loss_of(q: list[float] = q, adv: list[float] = adv, mask: list[float] = mask) -> Any:
            q_T, adv_T, mask_T = _f64(q), _f64(adv), _f64(mask)
            return lambda lp_T: sl.gspo(lp_T, q_T, adv_T, mask_T, low, high)

        losses.append(loss_of)
        forward.append(_forward(datum, target))
    return _Plan(name, losses), forward


def _claimed(
    spans: tuple[ProvenanceSpan, ...],
    tokens: list[Any],
    recorded: dict[str, RecordedSequence],
    where: str,
    prompt_tokens_too: bool = True,
) -> list[tuple[ProvenanceSpan, int]]:
    """Each position's run and index into that run's recorded tokens, checked: the runs tile
    ``tokens``, each run lies inside its sequence, and every token is the recorded one it
    claims to be (a prompt run's only when ``prompt_tokens_too``: the cookbook puts
    placeholder targets under the prompt, where advantages are 0)."""
    total = sum(span.length for span in spans)
    if total != len(tokens):
        raise errors.validation(
            f"{where}: its runs cover {total} positions, the field has {len(tokens)}; the runs "
            "must tile it (Datum.with_provenance)"
        )
    out: list[tuple[ProvenanceSpan, int]] = []
    for span in spans:
        sequence = recorded[span.sequence_id]
        source = sequence.tokens if span.sampled else sequence.prompt
        kind = "sampled tokens" if span.sampled else "prompt"
        if span.offset + span.length > len(source):
            raise errors.validation(
                f"{where}: a run claims {kind} [{span.offset}, {span.offset + span.length}) of "
                f"sequence_id {span.sequence_id!r}, which has {len(source)}"
            )
        for k in range(span.length):
            position, claimed = len(out), span.offset + k
            checked = span.sampled or prompt_tokens_too
            if checked and int(tokens[position]) != source[claimed]:
                raise errors.validation(
                    f"{where}: position {position} is token {int(tokens[position])}, but its "
                    f"run names {kind} token {claimed} of sequence_id {span.sequence_id!r}, "
                    f"which was {source[claimed]}"
                )
            out.append((span, claimed))
    return out


def parse_stable_reinforce(
    config: dict[str, Any],
    datums: list[TrainingDatum],
    shapes: list[Shapes],
    records: StabilityRecords,
    session_id: str | None,
) -> tuple[_Plan, list[TrainingDatum]]:
    """The checked ``stable_reinforce`` request: its plan and the forward's datums. Every
    sequence it names has its day restarted (stability.py)."""
    from localsession.numerics import sequence_losses as sl

    name = vocab.TinkerLoss.STABLE_REINFORCE
    if config:
        raise errors.validation(
            f"loss_fn {name!r} takes no loss_fn_config here (given {sorted(config)}); "
            "docs/semantics.md has localsession's objective"
        )
    allowed = {"target_tokens", "logprobs", "advantages"}
    ids: set[str] = set()
    for index, datum in enumerate(datums):
        if datum.loss_fn_input_spans is None or datum.model_input_spans is None:
            raise errors.validation(
                f"datum {index}: loss_fn {name!r} needs provenance on every datum "
                "(Datum.with_provenance naming the sequence_id of each sampled token; sample "
                "with a client created with record_stability_info=True)"
            )
        ids.update(s.sequence_id for s in datum.model_input_spans + datum.loss_fn_input_spans)
    recorded = records.take(ids, session_id)
    losses: list[Callable[[], LossOfLp]] = []
    forward = []
    for index, (datum, shape_of) in enumerate(zip(datums, shapes, strict=True)):
        where = f"datum {index}: loss_fn {name!r}"
        target = _targets(datum, shape_of, allowed, where)
        adv = _column(datum, shape_of, "advantages", len(target), where)
        assert datum.model_input_spans is not None and datum.loss_fn_input_spans is not None
        _claimed(datum.model_input_spans, datum.tokens, recorded, f"{where}: model_input_spans")
        claims = _claimed(
            datum.loss_fn_input_spans, target, recorded, f"{where}: loss_fn_input_spans", False
        )
        q = [recorded[span.sequence_id].logprobs[k] if span.sampled else 0.0 for span, k in claims]
        sampled = [span.sampled for span, _ in claims]

        def loss_of(
            q: list[float] = q, adv: list[float] = adv, sampled: list[bool] = sampled
        ) -> Any:
            import torch

            q_T, adv_T = _f64(q), _f64(adv)
            sampled_T = torch.tensor(sampled, dtype=torch.bool)
            return lambda lp_T: sl.stable_reinforce(lp_T, q_T, adv_T, sampled_T)

        losses.append(loss_of)
        forward.append(_forward(datum, target))
    return _Plan(name, losses), forward


def parse(
    records: StabilityRecords,
    model_id: str,
    loss_fn: str,
    config: dict[str, Any],
    datums: list[TrainingDatum],
    shapes: list[Shapes],
) -> tuple[Surrogate, list[TrainingDatum]]:
    """The checked request of one of :data:`TWO_OP_LOSSES`: its surrogate and the forward's
    datums. ``model_id``'s session (the part before ``:``) owns its recorded sequences."""
    if loss_fn == vocab.TinkerLoss.GSPO:
        return parse_gspo(config, datums, shapes)
    if loss_fn == vocab.TinkerLoss.STABLE_REINFORCE:
        session_id = model_id.split(":", 1)[0] or None
        return parse_stable_reinforce(config, datums, shapes, records, session_id)
    return dro.parse(config, datums, shapes)
