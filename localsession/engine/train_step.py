"""One ``forward_backward`` (or ``forward``) of the torch engine, read top to bottom
(docs/architecture.md, "One forward_backward, in the engine"; docs/semantics.md#1).

``TorchEngine.forward_backward`` calls :func:`prepare` outside the session's lock, then
:func:`loss_step` under it, inside ``torch.enable_grad()`` or ``torch.no_grad()``:

1. **prepare**: the loss's clip bounds, the datums checked and padded into one
   :class:`~localsession.engine.batch.Batch` (:func:`parse`: engine/batch.py is the
   reference, engine/batch_fast.py its optimisation), and the shared-prefix ``Plan``
   (engine/shared_prefix.py; ``None`` when the rows run unshared). Every check runs here,
   before any tensor touches the model.
2. **forward**: each position's log-probability of its target, ``lp`` ``[B, T]``
   (engine/head_logprobs.py, or packed rows for a plan).
3. **loss**: the elementwise ℓ ``[B, T]`` (``numerics.losses.loss_terms``, a pure
   function of ``lp`` and the batch's inputs); a non-finite sum raises here, before any
   gradient is added.
4. **backward**: ``ℓ.sum().backward()`` accumulates into the optimizer's flat gradient
   buffer (``numerics/optim.py``). The loss is a plain sum, so splitting the rows into
   micro-batches (on a CPU when the padded batch is large; whole groups for a plan) gives
   the same gradients up to float rounding, and steps 2-4 run once per micro-batch; a
   non-finite micro-batch puts back the gradients the earlier ones added.
5. **report**: each datum's Σ ℓ, the batch's metrics and each datum's diagnostics over
   the whole batch (``numerics.losses.loss_report``), and the norm of the gradient
   accumulated so far.
6. **result**: the port's :class:`~localsession.port_results.ForwardResult`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from localsession import port, vocab
from localsession.engine import batch_fast, shared_prefix
from localsession.engine.batch import Batch, parse_datums
from localsession.engine.head_logprobs import row_logprobs
from localsession.engine.loading import LoadedModel
from localsession.engine.shared_prefix import Plan, chunked, packed_logprobs
from localsession.numerics.inputs import clip_config
from localsession.numerics.losses import ClipConfig, LossReport, finite_loss_terms, loss_report
from localsession.numerics.optim import LoraAdamW
from localsession.numerics.prefix_groups import Group
from localsession.port import TrainingDatum
from localsession.port_results import ForwardResult

#: Padded tokens per training micro-batch on a CPU (:func:`rows_per_chunk`).
CHUNK_TOKENS = 4096
#: Float32 logits per training micro-batch on a CPU: a large vocabulary's logits (and the
#: activations that come with as many tokens) set the step's peak memory. Smaller chunks
#: cost speed (SmolLM2-135M, 8×256: 2-row chunks took 9.4 s a step, 4-row 8.65 s, the raw
#: unchunked loop 8.05 s), so the limit lets that batch (402 MB of logits) run whole, as the
#: raw loop does, at the raw loop's live-memory peak (4.59 GB against 4.57 GB).
CHUNK_LOGIT_BYTES = 512 * 2**20


@dataclass(frozen=True)
class Step:
    """A prepared step: what :func:`loss_step` runs."""

    loss_fn: str
    clip: ClipConfig
    batch: Batch
    plan: Plan | None  # None: the rows run unshared


# -- 1. prepare ------------------------------------------------------------------------------


def prepare(
    datums: Sequence[TrainingDatum],
    loss_fn: str,
    loss_fn_config: port.LossConfig | None,
    loaded: LoadedModel,
    shape: tuple[int, int, int],
    max_positions: int | None,
) -> Step | None:
    """Check and pad the datums for ``loss_fn`` and plan their shared prefixes; ``None``
    for no datums (after the loss name and config are checked). ``shape``: the model's
    (non-embedding parameters, layers, width), for the plan's cost rule."""
    clip = clip_config(loss_fn, loss_fn_config)  # raises on an unknown loss
    if not datums:
        return None
    m = loaded
    batch = parse(datums, loss_fn, m.vocab_size, m.pad_id, m.device, max_positions)
    return Step(loss_fn, clip, batch, shared_prefix.batch_plan(batch, m, shape))


def parse(
    datums: Sequence[TrainingDatum],
    loss_fn: str,
    vocab_size: int,
    pad_id: int,
    device: torch.device,
    max_length: int | None = None,
) -> Batch:
    """The datums as one padded batch on ``device``: the reference ``batch.parse_datums``'s
    answer, which ``batch_fast.batched`` gives faster for well-formed datums (it declines
    the rest, and the reference names their problem)."""
    fast = batch_fast.batched(datums, loss_fn, vocab_size, pad_id, device, max_length)
    if fast is not None:
        return fast
    return parse_datums(datums, loss_fn, vocab_size, pad_id, device, max_length=max_length)


# -- 2-6. forward, loss, backward, report, result --------------------------------------------


def loss_step(
    model: Any,
    optimizer: LoraAdamW,
    step: Step,
    backward: bool,
    device: torch.device,
    vocab_size: int,
) -> ForwardResult:
    """Run the peft ``model`` over the prepared batch; accumulate the loss's gradients into
    the trainable parameters ``optimizer`` steps when ``backward``. The result carries
    ``actor/grad_norm``: the norm of all gradients accumulated so far (this pass's
    included; the SDK keeps the last chunk's, which is then the whole batch's)."""
    batch = step.batch
    if backward:
        optimizer.install_grad_views()  # gradients then accumulate into its flat buffers
    if step.plan is not None:
        lp_BT, loss_BT, sums = shared_backward(
            model, optimizer, step, backward, (device, vocab_size)
        )
    else:
        height, width = (int(n) for n in batch.tokens_BT.shape)
        rows = rows_per_chunk(height, width, device, vocab_size) if backward else 0
        lp_BT, loss_BT, sums = row_backward(model, optimizer, step, backward, rows)
    inputs = batch.loss_inputs()
    report = loss_report(step.loss_fn, lp_BT, loss_BT, inputs, step.clip, sums)
    return forward_result(batch, lp_BT, loss_BT, report, optimizer.grad_norm())


#: A (micro-)batch's logprobs and elementwise loss (``[B, T]`` each) and, when the batch ran
#: in one piece, each datum's Σ ℓ (``[B]``; None after micro-batches)
Pass = tuple[torch.Tensor, torch.Tensor, "list[float] | None"]


def loss_and_backward(
    lp_BT: torch.Tensor, sub: Batch, step: Step, backward: bool
) -> tuple[torch.Tensor, list[float]]:
    """Steps 3-4 on one (micro-)batch: its elementwise loss ``[B, T]`` and each datum's
    Σ ℓ from its logprobs ``lp_BT``, refused if not finite, then differentiated when
    ``backward``."""
    loss_BT, sums = finite_loss_terms(step.loss_fn, lp_BT, sub.loss_inputs(), step.clip)
    if backward:
        loss_BT.sum().backward()
    return loss_BT, sums


def forward_result(
    batch: Batch, lp_BT: torch.Tensor, loss_BT: torch.Tensor, report: LossReport, norm: float
) -> ForwardResult:
    """Step 6: the port's result, ``actor/grad_norm`` added to the batch's and each datum's
    metrics."""
    metrics, values = report.metrics, report.per_datum
    metrics[vocab.Metric.ACTOR_GRAD_NORM] = norm
    values[vocab.Metric.ACTOR_GRAD_NORM] = [norm] * len(batch.lengths)
    # tolist() reads any dtype and device, graph or not, as Python floats: no casts needed
    lp_rows, loss_rows = lp_BT.tolist(), loss_BT.tolist()  # [B, T] each
    return ForwardResult.from_rows(batch.lengths, lp_rows, loss_rows, metrics, values)


def rows_per_chunk(rows: int, width: int, device: torch.device, vocab_size: int) -> int:
    """Rows per training micro-batch of ``rows`` padded rows of ``width`` tokens: all of
    them, except on a CPU when they hold more than ``CHUNK_TOKENS`` tokens or more than
    ``CHUNK_LOGIT_BYTES`` of float32 logits.

    On a CPU a batch past ~4k tokens outgrows the caches and runs slower per token
    (measured: 128×128 tokens at 0.6× the tokens/s of 32×128, raw torch too), and a large
    vocabulary's logits and activations set the peak memory; the summed loss makes
    micro-batching exact up to float rounding."""
    if device.type != "cpu":
        return rows
    by_tokens = CHUNK_TOKENS // width
    by_logits = CHUNK_LOGIT_BYTES // (width * vocab_size * 4)
    return min(rows, max(1, min(by_tokens, by_logits)))


def row_backward(model: Any, optimizer: LoraAdamW, step: Step, backward: bool, rows: int) -> Pass:
    """Steps 2-4 over the unshared batch, ``rows`` rows at a time (0: all at once). -> the
    whole batch's logprobs and elementwise loss (and sums: :data:`Pass`)."""
    batch = step.batch
    if rows <= 0 or rows >= len(batch.lengths):  # the whole batch in one forward
        lp_BT = row_logprobs(model, batch.tokens_BT, batch.targets_BT, batch.temperature_BT)
        return (lp_BT, *loss_and_backward(lp_BT, batch, step, backward))
    width = batch.tokens_BT.shape[1]
    lp_parts: list[torch.Tensor] = []
    loss_parts: list[torch.Tensor] = []
    with optimizer.restored_on_error():  # a non-finite chunk undoes the earlier ones
        for start in range(0, len(batch.lengths), rows):
            sub = batch.rows(start, start + rows)  # trimmed to its own longest row
            lp_BT = row_logprobs(model, sub.tokens_BT, sub.targets_BT, sub.temperature_BT)
            loss_BT, _ = loss_and_backward(lp_BT, sub, step, backward)
            pad = (0, width - lp_BT.shape[1])  # back to the batch's width
            lp_parts.append(torch.nn.functional.pad(lp_BT.detach(), pad))
            loss_parts.append(torch.nn.functional.pad(loss_BT.detach(), pad))
    return torch.cat(lp_parts), torch.cat(loss_parts), None


def _pick(batch: Batch, index: list[int]) -> Batch:
    """Rows ``index`` of ``batch`` as a batch of their own, trimmed to their longest row."""
    lengths = [batch.lengths[i] for i in index]
    width = max(lengths)
    at = torch.tensor(index, device=batch.tokens_BT.device)

    def cut(t: torch.Tensor | None) -> torch.Tensor | None:
        return None if t is None else t.index_select(0, at)[:, :width]

    picked = {k: cut(getattr(batch, k)) for k in _ROW_FIELDS}
    return Batch(lengths=lengths, **picked)  # type: ignore[arg-type]


_ROW_FIELDS = (
    "tokens_BT",
    "targets_BT",
    "weights_BT",
    "advantages_BT",
    "logprobs_BT",
    "ref_log_prob_BT",
    "temperature_BT",
)


def shared_backward(
    model: Any,
    optimizer: LoraAdamW,
    step: Step,
    backward: bool,
    where: tuple[torch.device, int],
) -> Pass:
    """Steps 2-4 from packed rows of the plan's groups (shared_prefix.py). -> the batch's
    logprobs and elementwise loss (and sums: :data:`Pass`). On a CPU a backward runs whole groups
    at a time under :func:`rows_per_chunk`'s limits on the packed rows; a non-finite chunk
    raises before its backward, after the earlier chunks' gradients are put back."""
    batch, plan = step.batch, step.plan
    assert plan is not None
    device, vocab_size = where

    def fits(rows: int, width: int) -> bool:
        return not backward or rows <= rows_per_chunk(rows, width, device, vocab_size)

    def packed(groups: Sequence[Group], sub: Batch) -> torch.Tensor:
        tokens, targets, tau = sub.tokens_BT, sub.targets_BT, sub.temperature_BT
        return packed_logprobs(model, groups, sub.lengths, tokens, targets, tau, plan.dtype)

    runs = chunked(plan.groups, plan.lengths, fits)
    if len(runs) == 1:  # the whole batch in one forward, as unchunked
        lp_BT = packed(plan.groups, batch)
        return (lp_BT, *loss_and_backward(lp_BT, batch, step, backward))
    lp_full = torch.zeros(batch.tokens_BT.shape, dtype=torch.float32, device=device)
    loss_full = torch.zeros_like(lp_full)
    with optimizer.restored_on_error():  # a non-finite chunk undoes the earlier ones
        for run in runs:
            index = [i for g in run for i in g.members]
            local = {i: k for k, i in enumerate(index)}
            groups = [Group(tuple(local[i] for i in g.members), g.prefix) for g in run]
            sub = _pick(batch, index)
            lp_BT = packed(groups, sub)
            loss_BT, _ = loss_and_backward(lp_BT, sub, step, backward)
            at = torch.tensor(index, device=device)
            width = lp_BT.shape[1]
            lp_full[at, :width] = lp_BT.detach()
            loss_full[at, :width] = loss_BT.detach()
    return lp_full, loss_full, None
