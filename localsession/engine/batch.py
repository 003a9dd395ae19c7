"""Parsed datums -> one right-padded training batch, every semantic check done first: the
reference path of the step's batch preparation (engine/train_step.py, step 1).

``parse_datums`` turns the runtime's :class:`~localsession.port.TrainingDatum` values
(tokens, flat ``loss_fn_inputs`` columns) into right-padded ``[B, T]`` tensors, one datum
and one column at a time. It raises ``EngineInputError`` naming the datum index and the key
*before* any tensor touches the model, so a failing operation never adds gradient
(docs/semantics.md#1, #4). The list-level checks are the ones every engine shares
(:mod:`localsession.numerics.inputs`, torch-free).

engine/batch_fast.py is an optimisation of this module: for well-formed datums it builds
the same :class:`Batch` a column at a time, and declines anything else, which then comes
here (tests/engine/test_batch_fast.py holds the two to the same batches and errors).

Checks: the loss's required keys are present and no unsupported key is; every per-token input
has one value per ``modelInput`` token; values are numbers (JSON booleans count as 0/1) and
finite; token ids (input and targets) are integers inside the vocabulary; temperatures > 0;
no datum is longer than the model's context.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor
from torch.nn.utils.rnn import pad_sequence

from localsession import vocab
from localsession.numerics import inputs as checks
from localsession.numerics.inputs import (
    check_input_keys,
    check_loss_fn,
    datum_tokens,
)
from localsession.numerics.losses import LossInputs
from localsession.port import EngineInputError, TrainingDatum


@dataclass
class Batch:
    """Right-padded batch; padding positions have ``mask_BT == False`` and weight 0."""

    tokens_BT: Tensor  # long
    targets_BT: Tensor  # long
    weights_BT: Tensor  # float32
    lengths: list[int]
    advantages_BT: Tensor | None = None
    logprobs_BT: Tensor | None = None
    ref_log_prob_BT: Tensor | None = None
    temperature_BT: Tensor | None = None

    def rows(self, start: int, stop: int) -> Batch:
        """Rows ``start:stop`` as a batch of their own, trimmed to their longest row."""
        lengths = self.lengths[start:stop]
        width = max(lengths)

        def cut(t: Tensor | None) -> Tensor | None:
            return None if t is None else t[start:stop, :width]

        return Batch(
            tokens_BT=self.tokens_BT[start:stop, :width],
            targets_BT=self.targets_BT[start:stop, :width],
            weights_BT=self.weights_BT[start:stop, :width],
            lengths=lengths,
            advantages_BT=cut(self.advantages_BT),
            logprobs_BT=cut(self.logprobs_BT),
            ref_log_prob_BT=cut(self.ref_log_prob_BT),
            temperature_BT=cut(self.temperature_BT),
        )

    @property
    def mask_BT(self) -> Tensor:
        """True at each datum's own positions, False on padding (bool ``[B, T]``)."""
        device = self.tokens_BT.device
        lengths_B = torch.tensor(self.lengths, device=device)
        return torch.arange(self.tokens_BT.shape[1], device=device) < lengths_B[:, None]

    def loss_inputs(self) -> LossInputs:
        """The per-position inputs of the losses (``numerics/losses.py``); no mask when no
        row is padded."""
        padded = min(self.lengths) < self.tokens_BT.shape[1]
        return LossInputs(
            weights=self.weights_BT,
            sampler_logprobs=self.logprobs_BT,
            advantages=self.advantages_BT,
            ref_logprobs=self.ref_log_prob_BT,
            mask=self.mask_BT if padded else None,
        )


def int_tensor(values: Sequence[Any], what: str) -> Tensor:
    """Integer ids (JSON booleans and integral floats accepted) as a long tensor."""
    try:
        raw = torch.tensor(values)
    except (TypeError, ValueError, RuntimeError, OverflowError):
        raise EngineInputError(f"{what} must be a flat list of integer token ids") from None
    if raw.dim() != 1:
        raise EngineInputError(f"{what} must be a flat list of integer token ids")
    if raw.is_floating_point():
        if not bool(torch.isfinite(raw).all()) or not bool((raw == raw.round()).all()):
            raise EngineInputError(f"{what} must hold integer token ids")
    return raw.to(torch.long)


def check_vocab(ids: Tensor, vocab_size: int, what: str) -> None:
    """Raise unless every id is in ``[0, vocab_size)``."""
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= vocab_size):
        bad = int(ids[(ids < 0) | (ids >= vocab_size)][0])
        raise EngineInputError(
            f"{what} holds token id {bad}, outside the vocabulary [0, {vocab_size})"
        )


def _input_tensor(datum: int, key: str, value: list[Any], length: int) -> Tensor:
    where = f"datum {datum}: `{key}`"
    data = checks.column_data(datum, key, value, length)  # conformance plants a defect there
    if key == "target_tokens":
        return int_tensor(data, where)
    try:
        out = torch.tensor(data, dtype=torch.float32)
    except (TypeError, ValueError, RuntimeError, OverflowError):
        raise EngineInputError(f"{where} must be a flat list of numbers") from None
    if not bool(torch.isfinite(out).all()):
        raise EngineInputError(f"{where} holds a non-finite value (NaN or infinity)")
    if key == "temperature" and not bool((out > 0).all()):
        raise EngineInputError(f"{where}: every temperature must be > 0")
    return out


def parse_datums(
    datums: Sequence[TrainingDatum],
    loss_fn: str,
    vocab_size: int,
    pad_id: int,
    device: torch.device,
    *,
    max_length: int | None = None,
) -> Batch:
    """Check parsed datums for ``loss_fn`` and pad them into one batch on ``device``, one
    datum and one column at a time, raising on the first problem. A datum longer than
    ``max_length`` (the model's maximum positions) is refused."""
    check_loss_fn(loss_fn)
    tokens_list: list[Tensor] = []
    columns: dict[str, list[Tensor | None]] = {key: [] for key in vocab.LOSS_INPUT_KEYS}
    for i, datum in enumerate(datums):
        ids = int_tensor(datum_tokens(datum, i), f"datum {i}: `modelInput` tokens")
        if max_length is not None and ids.numel() > max_length:
            raise EngineInputError(
                f"datum {i}: `modelInput` has {ids.numel()} tokens, past the model's maximum "
                f"context length of {max_length}; shorten or split it"
            )
        check_vocab(ids, vocab_size, f"datum {i}: `modelInput`")
        inputs = check_input_keys(i, datum, loss_fn)
        for key in vocab.LOSS_INPUT_KEYS:
            column = _input_tensor(i, key, inputs[key], len(ids)) if key in inputs else None
            if key == "target_tokens" and column is not None:
                check_vocab(column, vocab_size, f"datum {i}: `target_tokens`")
            columns[key].append(column)
        tokens_list.append(ids)
    if not tokens_list:
        raise EngineInputError("no datums given")
    lengths = [int(t.numel()) for t in tokens_list]

    def pad(key: str, fill: float) -> Tensor | None:
        values = columns[key]
        if all(v is None for v in values):
            return None
        filled: list[Tensor] = []
        for i, v in enumerate(values):
            if v is None:
                if key != "temperature":  # only temperature has a neutral default (1.0)
                    raise EngineInputError(
                        f"datum {i}: `{key}` is missing while other datums give it; "
                        "give it for every datum or for none"
                    )
                v = torch.ones(lengths[i], dtype=torch.float32)
            filled.append(v)
        return pad_sequence(filled, batch_first=True, padding_value=fill).to(device)

    tokens_BT = pad_sequence(tokens_list, batch_first=True, padding_value=pad_id).to(device)
    targets_BT, weights_BT = pad("target_tokens", 0), pad("weights", 0.0)
    assert targets_BT is not None and weights_BT is not None  # required for every loss
    return Batch(
        tokens_BT=tokens_BT,
        targets_BT=targets_BT,
        weights_BT=weights_BT,
        lengths=lengths,
        advantages_BT=pad("advantages", 0.0),
        logprobs_BT=pad("logprobs", 0.0),
        ref_log_prob_BT=pad("ref_log_prob", 0.0),
        temperature_BT=pad("temperature", 1.0),
    )
