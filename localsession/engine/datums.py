"""Wire datums -> one padded training batch, with every semantic check done up front.

``parse_datums`` turns wire ``Datum`` dicts (``{"modelInput": {"chunks": [{"tokens"}]},
"lossFnInputs": {key: TensorData}}``) into right-padded ``[B, T]`` tensors. It raises
``EngineInputError`` naming the datum index and the key *before* any tensor touches the model,
so a failing operation never adds gradient (local-semantics §1 / §4).

Checks: the loss's required keys are present and no unsupported key is; every per-token input
has one value per ``modelInput`` token; values are numbers (JSON booleans count as 0/1) and
finite; token ids (input and targets) are integers inside the vocabulary; temperatures > 0.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor
from torch.nn.utils.rnn import pad_sequence

from localsession.engine.losses import (
    ALLOWED_INPUT_KEYS,
    REQUIRED_INPUT_KEYS,
    LossInputs,
    check_loss_fn,
)
from localsession.runtime.engine_api import EngineInputError


@dataclass
class Batch:
    """Right-padded batch; padding positions have ``mask_BT == False`` and weight 0."""

    tokens_BT: Tensor  # long
    targets_BT: Tensor  # long
    mask_BT: Tensor  # bool
    weights_BT: Tensor  # float32
    lengths: list[int]
    advantages_BT: Tensor | None = None
    logprobs_BT: Tensor | None = None
    ref_log_prob_BT: Tensor | None = None
    temperature_BT: Tensor | None = None

    @property
    def num_tokens(self) -> int:
        """Tokens processed (padding excluded)."""
        return sum(self.lengths)

    def rows(self, start: int, stop: int) -> Batch:
        """Rows ``start:stop`` as a batch of their own, trimmed to their longest row."""
        lengths = self.lengths[start:stop]
        width = max(lengths)

        def cut(t: Tensor | None) -> Tensor | None:
            return None if t is None else t[start:stop, :width]

        return Batch(
            tokens_BT=self.tokens_BT[start:stop, :width],
            targets_BT=self.targets_BT[start:stop, :width],
            mask_BT=self.mask_BT[start:stop, :width],
            weights_BT=self.weights_BT[start:stop, :width],
            lengths=lengths,
            advantages_BT=cut(self.advantages_BT),
            logprobs_BT=cut(self.logprobs_BT),
            ref_log_prob_BT=cut(self.ref_log_prob_BT),
            temperature_BT=cut(self.temperature_BT),
        )

    def loss_inputs(self) -> LossInputs:
        """The per-position inputs of ``losses.compute_loss``."""
        return LossInputs(
            weights=self.weights_BT,
            sampler_logprobs=self.logprobs_BT,
            advantages=self.advantages_BT,
            ref_logprobs=self.ref_log_prob_BT,
            mask=self.mask_BT,
        )


def _flatten(data: Any) -> Any:
    if isinstance(data, list) and data and isinstance(data[0], list):
        return [x for row in data for x in _flatten(row)]
    return data


def datum_tokens(datum: Any, index: int) -> list[int]:
    """The concatenated ``modelInput`` token ids of one wire datum."""
    if not isinstance(datum, dict):
        raise EngineInputError(f"datum {index}: expected an object, got {type(datum).__name__}")
    model_input = datum.get("modelInput")
    chunks = model_input.get("chunks") if isinstance(model_input, dict) else None
    if not isinstance(chunks, list):
        raise EngineInputError(
            f"datum {index}: `modelInput` must be {{'chunks': [{{'tokens': [...]}}]}}"
        )
    tokens: list[int] = []
    for c, chunk in enumerate(chunks):
        if not isinstance(chunk, dict) or not isinstance(chunk.get("tokens"), list):
            raise EngineInputError(f"datum {index}: chunk {c} has no `tokens` list")
        kind = chunk.get("type", "encoded_text")
        if kind != "encoded_text":
            raise EngineInputError(
                f"datum {index}: chunk {c} has type {kind!r}; only 'encoded_text' is supported"
            )
        tokens.extend(chunk["tokens"])
    if not tokens:
        raise EngineInputError(f"datum {index}: `modelInput` has no tokens")
    return tokens


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


def _input_tensor(datum: int, key: str, value: Any, length: int) -> Tensor:
    where = f"datum {datum}: `{key}`"
    if not isinstance(value, dict) or "data" not in value:
        raise EngineInputError(f"{where} must be a TensorData object {{'data': [...], 'dtype'}}")
    data = _flatten(value["data"])
    if not isinstance(data, list):
        raise EngineInputError(f"{where}: `data` must be a list of numbers")
    if len(data) != length:
        raise EngineInputError(
            f"{where} has {len(data)} values, its model_input has {length} tokens "
            "(give one value per model_input token)"
        )
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
    datums: Sequence[Any],
    loss_fn: str,
    vocab_size: int,
    pad_id: int,
    device: torch.device,
    *,
    max_length: int | None = None,
) -> Batch:
    """Validate wire datums for ``loss_fn`` and pad them into one batch on ``device``.
    A datum longer than ``max_length`` (the model's maximum positions) is refused."""
    check_loss_fn(loss_fn)
    required = REQUIRED_INPUT_KEYS[loss_fn]
    tokens_list: list[Tensor] = []
    columns: dict[str, list[Tensor | None]] = {key: [] for key in ALLOWED_INPUT_KEYS}
    for i, datum in enumerate(datums):
        ids = int_tensor(datum_tokens(datum, i), f"datum {i}: `modelInput` tokens")
        if max_length is not None and ids.numel() > max_length:
            raise EngineInputError(
                f"datum {i}: `modelInput` has {ids.numel()} tokens, past the model's maximum "
                f"context length of {max_length}; shorten or split it"
            )
        check_vocab(ids, vocab_size, f"datum {i}: `modelInput`")
        inputs = datum.get("lossFnInputs") or {}
        if not isinstance(inputs, dict):
            raise EngineInputError(f"datum {i}: `lossFnInputs` must be an object")
        for key in inputs:
            if key not in ALLOWED_INPUT_KEYS:
                raise EngineInputError(
                    f"datum {i}: unsupported loss_fn_inputs key {key!r}; "
                    f"allowed keys: {', '.join(ALLOWED_INPUT_KEYS)}"
                )
        for key in required:
            if key not in inputs:
                raise EngineInputError(
                    f"datum {i}: `{key}` is missing; loss_fn {loss_fn!r} needs "
                    f"{', '.join(required)}"
                )
        for key in ALLOWED_INPUT_KEYS:
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

    mask_BT = pad_sequence(
        [torch.ones(n, dtype=torch.bool) for n in lengths], batch_first=True, padding_value=False
    ).to(device)
    tokens_BT = pad_sequence(tokens_list, batch_first=True, padding_value=pad_id).to(device)
    targets_BT, weights_BT = pad("target_tokens", 0), pad("weights", 0.0)
    assert targets_BT is not None and weights_BT is not None  # required for every loss
    return Batch(
        tokens_BT=tokens_BT,
        targets_BT=targets_BT,
        mask_BT=mask_BT,
        weights_BT=weights_BT,
        lengths=lengths,
        advantages_BT=pad("advantages", 0.0),
        logprobs_BT=pad("logprobs", 0.0),
        ref_log_prob_BT=pad("ref_log_prob", 0.0),
        temperature_BT=pad("temperature", 1.0),
    )


def finite_or_raise(value: float, what: str) -> float:
    """Raise ``EngineInputError`` if a computed value is not finite (nothing applied yet)."""
    if not math.isfinite(value):
        raise EngineInputError(
            f"{what} is not finite ({value}); check `logprobs` / `advantages` for extreme "
            "values (the ratio exp(lp - logprobs) overflowed)"
        )
    return value


def fwd_result(
    batch: Batch,
    lp_BT: Tensor,
    loss_BT: Tensor,
    metrics: dict[str, float],
    datum_values: Mapping[str, list[float]] | None = None,
) -> dict[str, Any]:
    """The wire ``FwdResult`` of a batch: its metrics (plus ``global_token_num``) and, per
    datum, its unpadded ``logprobs`` and ``elementwise_loss`` as float32 TensorData, plus
    each ``datum_values[key][i]`` (the ``actor/*`` diagnostics) as a one-value TensorData."""
    metrics["global_token_num"] = float(batch.num_tokens)
    lp_rows = lp_BT.detach().float().cpu().tolist()  # [B, T]
    loss_rows = loss_BT.detach().float().cpu().tolist()  # [B, T]

    def tensor_data(values: list[float]) -> dict[str, Any]:
        return {"data": values, "dtype": "float32", "shape": [len(values)]}

    outputs = [
        {"logprobs": tensor_data(lp_rows[i][:n]), "elementwise_loss": tensor_data(loss_rows[i][:n])}
        for i, n in enumerate(batch.lengths)
    ]
    for key, values in (datum_values or {}).items():
        for output, value in zip(outputs, values, strict=True):
            output[key] = tensor_data([value])
    return {"metrics": metrics, "lossFnOutputs": outputs}
