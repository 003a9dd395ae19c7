"""One training (or forward-only) step over a parsed batch: the loss, its gradients and the
per-datum metrics (docs/semantics.md#1).

``TorchEngine.forward_backward`` calls :func:`loss_step` under the session's lock and inside
``torch.enable_grad()`` or ``torch.no_grad()``. The loss is the plain sum over real tokens, so
splitting the rows into micro-batches (:func:`chunked_backward`, on a CPU when the padded
batch is large) gives the same gradients up to float rounding. A non-finite loss raises
before any gradient is added. A batch whose datums share prefixes comes with a ``Plan``
(shared_prefix.py) and runs packed (:func:`shared_backward`), in micro-batches of whole
groups by the same limits.
"""

from __future__ import annotations

from typing import Any

import torch

from localsession import vocab
from localsession.engine.head_logprobs import row_logprobs
from localsession.engine.shared_prefix import Plan, chunked, packed_logprobs
from localsession.numerics.batch import Batch, finite_or_raise, fwd_result
from localsession.numerics.losses import (
    ClipConfig,
    batch_metrics,
    datum_metrics,
    datum_sums,
    loss_terms,
)
from localsession.numerics.optim import LoraAdamW
from localsession.numerics.prefix_groups import Group
from localsession.port_results import ForwardResult

#: Padded tokens per training micro-batch on a CPU (:func:`chunked_backward`).
CHUNK_TOKENS = 4096
#: Float32 logits per training micro-batch on a CPU: a large vocabulary's logits (and the
#: activations that come with as many tokens) set the step's peak memory. Smaller chunks
#: cost speed (SmolLM2-135M, 8×256: 2-row chunks took 9.4 s a step, 4-row 8.65 s, the raw
#: unchunked loop 8.05 s), so the limit lets that batch (402 MB of logits) run whole, as the
#: raw loop does, at the raw loop's live-memory peak (4.59 GB against 4.57 GB).
CHUNK_LOGIT_BYTES = 512 * 2**20


def loss_step(
    model: Any,
    optimizer: LoraAdamW,
    batch: Batch,
    loss_fn: str,
    clip: ClipConfig,
    backward: bool,
    device: torch.device,
    vocab_size: int,
    plan: Plan | None = None,
) -> ForwardResult:
    """Run the peft ``model`` over ``batch``; accumulate the loss's gradients into the
    trainable parameters ``optimizer`` steps when ``backward``. Returns the typed result
    (``fwd_result``) with ``actor/grad_norm``: the norm of all gradients accumulated so far.
    With a ``plan`` the batch runs packed (:func:`shared_backward`)."""
    rows = chunk_rows(batch, device, vocab_size)
    inputs = batch.loss_inputs()
    if backward:
        optimizer.install_grad_views()  # gradients then accumulate into its flat buffers
    if plan is not None:
        lp_BT, loss_BT = shared_backward(
            model, optimizer, batch, plan, loss_fn, clip, backward, (device, vocab_size)
        )
        sums = datum_sums(loss_BT)
    elif backward and rows < len(batch.lengths):
        with optimizer.restored_on_error():  # a non-finite chunk undoes the earlier ones
            lp_BT, loss_BT = chunked_backward(model, batch, loss_fn, clip, rows)
        sums = datum_sums(loss_BT)  # each datum's Σ ℓ, for both metric sets
    else:
        lp_BT = row_logprobs(model, batch.tokens_BT, batch.targets_BT, batch.temperature_BT)
        loss_BT = loss_terms(loss_fn, lp_BT, inputs, clip)
        sums = datum_sums(loss_BT)  # the one read-back before the backward
        finite_or_raise(sum(sums), "the loss")  # before any gradient is added
        if backward:
            loss_BT.sum().backward()
    # metrics over the whole batch's logprobs, as unchunked
    metrics = batch_metrics(loss_fn, lp_BT, inputs, clip, sums)
    values = datum_metrics(loss_fn, lp_BT, loss_BT, inputs, clip, sums)
    # the norm of the gradient accumulated so far (this pass's included): the SDK keeps
    # the last chunk's, which is then the whole batch's
    norm = optimizer.grad_norm()
    metrics[vocab.Metric.ACTOR_GRAD_NORM] = norm
    values[vocab.Metric.ACTOR_GRAD_NORM] = [norm] * len(batch.lengths)
    return fwd_result(batch, lp_BT, loss_BT, metrics, values)


def chunk_rows(batch: Batch, device: torch.device, vocab_size: int) -> int:
    """Rows per micro-batch: all of them, except on a CPU when the padded batch holds
    more than ``CHUNK_TOKENS`` tokens or more than ``CHUNK_LOGIT_BYTES`` of float32
    logits (see :func:`chunked_backward`)."""
    rows, width = (int(n) for n in batch.tokens_BT.shape)
    return rows_per_chunk(rows, width, device, vocab_size)


def rows_per_chunk(rows: int, width: int, device: torch.device, vocab_size: int) -> int:
    """:func:`chunk_rows` of ``rows`` padded rows of ``width`` tokens."""
    if device.type != "cpu":
        return rows
    by_tokens = CHUNK_TOKENS // width
    by_logits = CHUNK_LOGIT_BYTES // (width * vocab_size * 4)
    return min(rows, max(1, min(by_tokens, by_logits)))


def chunked_backward(
    model: Any,
    batch: Batch,
    loss_fn: str,
    clip: ClipConfig,
    step: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Forward + backward ``step`` rows at a time, accumulating gradients. -> the whole
    batch's logprobs and elementwise loss, ``[B, T]`` each.

    On a CPU a batch past ~4k tokens outgrows the caches and runs slower per token
    (measured: 128×128 tokens at 0.6× the tokens/s of 32×128, raw torch too), and a
    large vocabulary's logits and activations set the peak memory; the summed loss
    makes micro-batching exact up to float rounding. The caller computes the metrics over
    the whole batch's logprobs, as unchunked. A non-finite chunk raises before its backward;
    the caller puts back the gradients the earlier chunks added.
    """
    width = batch.tokens_BT.shape[1]
    lp_parts: list[torch.Tensor] = []
    loss_parts: list[torch.Tensor] = []
    for start in range(0, len(batch.lengths), step):
        sub = batch.rows(start, start + step)
        lp_BT = row_logprobs(model, sub.tokens_BT, sub.targets_BT, sub.temperature_BT)
        loss_BT = loss_terms(loss_fn, lp_BT, sub.loss_inputs(), clip)
        finite_or_raise(sum(datum_sums(loss_BT)), "the loss")
        loss_BT.sum().backward()
        pad = (0, width - lp_BT.shape[1])  # back to the batch's width
        lp_parts.append(torch.nn.functional.pad(lp_BT.detach(), pad))
        loss_parts.append(torch.nn.functional.pad(loss_BT.detach(), pad))
    return torch.cat(lp_parts), torch.cat(loss_parts)


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
    batch: Batch,
    plan: Plan,
    loss_fn: str,
    clip: ClipConfig,
    backward: bool,
    where: tuple[torch.device, int],
) -> tuple[torch.Tensor, torch.Tensor]:
    """The batch's logprobs and elementwise loss (``[B, T]`` each) from packed rows of its
    groups (shared_prefix.py), the loss's gradients accumulated when ``backward``. On a CPU a
    backward runs whole groups at a time under :func:`rows_per_chunk`'s limits on the packed
    rows; a non-finite chunk raises before its backward, after the earlier chunks' gradients
    are put back."""
    device, vocab_size = where
    dtype = plan.dtype

    def fits(rows: int, width: int) -> bool:
        return not backward or rows <= rows_per_chunk(rows, width, device, vocab_size)

    runs = chunked(plan.groups, plan.lengths, fits)
    if len(runs) == 1:  # the whole batch in one forward, as unchunked
        lp_BT = packed_logprobs(
            model,
            plan.groups,
            batch.lengths,
            batch.tokens_BT,
            batch.targets_BT,
            batch.temperature_BT,
            dtype,
        )
        loss_BT = loss_terms(loss_fn, lp_BT, batch.loss_inputs(), clip)
        finite_or_raise(sum(datum_sums(loss_BT)), "the loss")  # before any gradient is added
        if backward:
            loss_BT.sum().backward()
        return lp_BT, loss_BT
    lp_full = torch.zeros(batch.tokens_BT.shape, dtype=torch.float32, device=device)
    loss_full = torch.zeros_like(lp_full)
    with optimizer.restored_on_error():  # a non-finite chunk undoes the earlier ones
        for run in runs:
            index = [i for g in run for i in g.members]
            local = {i: k for k, i in enumerate(index)}
            groups = [Group(tuple(local[i] for i in g.members), g.prefix) for g in run]
            sub = _pick(batch, index)
            lp_BT = packed_logprobs(
                model,
                groups,
                sub.lengths,
                sub.tokens_BT,
                sub.targets_BT,
                sub.temperature_BT,
                dtype,
            )
            loss_BT = loss_terms(loss_fn, lp_BT, sub.loss_inputs(), clip)
            finite_or_raise(sum(datum_sums(loss_BT)), "the loss")
            if backward:
                loss_BT.sum().backward()
            at = torch.tensor(index, device=device)
            width = lp_BT.shape[1]
            lp_full[at, :width] = lp_BT.detach()
            loss_full[at, :width] = loss_BT.detach()
    return lp_full, loss_full
