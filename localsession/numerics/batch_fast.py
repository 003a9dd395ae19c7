"""The fast path of building a training batch: one tensor per column for the whole batch.

The exact path is numerics/batch.py (one datum and one column at a time); this module only
ever returns what that one returns, or hands the datums to it. Well-formed datums take
:func:`batched`, each check one tensor op. Anything it does not accept as it stands (a bad
value, integral floats as ids, a column some datums lack) goes through the exact path, which
converts what may be converted and raises the error naming the datum and key
(tests/numerics/test_batch_fast.py holds the two to the same batches and errors).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy
import torch
from torch import Tensor

from localsession.numerics import batch as exact
from localsession.numerics.batch import Batch
from localsession.numerics.inputs import check_input_keys, check_loss_fn, column_data, datum_tokens
from localsession.port import EngineInputError, TrainingDatum


def parse_datums(
    datums: Sequence[TrainingDatum],
    loss_fn: str,
    vocab_size: int,
    pad_id: int,
    device: torch.device,
    *,
    max_length: int | None = None,
) -> Batch:
    """``batch.parse_datums``: :func:`batched` when it accepts the datums, else the exact path."""
    check_loss_fn(loss_fn)
    fast = batched(datums, loss_fn, vocab_size, pad_id, device, max_length)
    if fast is not None:
        return fast
    return exact.parse_datums(datums, loss_fn, vocab_size, pad_id, device, max_length=max_length)


_NUMBERS = {float, int, bool}


def _padded(rows: list[list[Any]], width: int, fill: Any) -> list[list[Any]]:
    """``rows`` right-padded with ``fill`` to ``width`` (still lists: one conversion then
    takes several columns at once)."""
    return [row + [fill] * (width - len(row)) for row in rows]


def batched(
    datums: Sequence[TrainingDatum],
    loss_fn: str,
    vocab_size: int,
    pad_id: int,
    device: torch.device,
    max_length: int | None,
) -> Batch | None:
    """The batch of datums that pass every check as they stand, built a column at a time on
    the CPU; None for anything else (the caller then finds and names the problem)."""
    if not datums or not 0 <= pad_id < vocab_size:
        return None
    try:
        tokens: list[list[Any]] = []
        columns: dict[str, list[list[Any]]] = {}
        for i, datum in enumerate(datums):
            ids = datum_tokens(datum, i)
            inputs = check_input_keys(i, datum, loss_fn)
            for key, value in inputs.items():
                columns.setdefault(key, []).append(column_data(i, key, value, len(ids)))
            tokens.append(ids)
        lengths = [len(ids) for ids in tokens]
        width = max(lengths)
        if max_length is not None and width > max_length:
            return None
        if any(len(rows) != len(tokens) for rows in columns.values()):
            return None  # a column some datums lack: refused, or temperature's default
        targets = columns.pop("target_tokens")
        if "weights" not in columns:
            return None
        id_rows = _padded(tokens, width, pad_id) + _padded(targets, width, 0)  # 2B rows
        keys = list(columns)  # the float columns, "weights" among them
        values = [_padded(columns[k], width, 1.0 if k == "temperature" else 0.0) for k in keys]
        # only numbers: numpy would also read "1.5" and None; map() runs in C
        if not all(set(map(type, row)) <= _NUMBERS for rows in values for row in rows):
            return None
        small = len(id_rows) * width <= SMALL_TOKENS
        converted = (_small_tensors if small else _numpy_tensors)(id_rows, values, vocab_size)
    except (EngineInputError, KeyError, TypeError, ValueError, RuntimeError, OverflowError):
        return None
    if converted is None:
        return None
    ids_2BT, floats_KBT = converted
    if "temperature" in keys and not bool((floats_KBT[keys.index("temperature")] > 0).all()):
        return None
    if device.type != "cpu":  # each torch call costs ~10-20 us on a cold cache: none spare
        ids_2BT, floats_KBT = ids_2BT.to(device), floats_KBT.to(device)
    tokens_BT, targets_BT = ids_2BT.unbind()
    floats = dict(zip(keys, floats_KBT.unbind(), strict=True))
    return Batch(
        tokens_BT=tokens_BT,
        targets_BT=targets_BT,
        weights_BT=floats["weights"],
        lengths=lengths,
        advantages_BT=floats.get("advantages"),
        logprobs_BT=floats.get("logprobs"),
        ref_log_prob_BT=floats.get("ref_log_prob"),
        temperature_BT=floats.get("temperature"),
    )


#: A batch of at most this many ids (inputs and targets, padded) is checked in Python and
#: converted with ``torch.tensor``; a larger one through numpy. Each numpy or torch call
#: costs a fixed ~20-50 us on a cache gone cold during a forward pass, which is what a
#: small batch pays; a large one pays per value, where numpy is fastest.
SMALL_TOKENS = 512

#: float32's largest finite value: a float past it converts to infinity
_FLOAT32_MAX = float(numpy.finfo(numpy.float32).max)


def _small_tensors(
    ids: list[list[Any]], values: list[list[list[Any]]], vocab_size: int
) -> tuple[Tensor, Tensor] | None:
    """The ids (``[2, B, T]`` long: inputs, then targets) and float columns (``[K, B, T]``
    float32) of a small batch, checked with Python's builtins; None if an id is not an int in
    the vocabulary or a value is not finite in float32 (NaN fails both comparisons)."""
    if not all(set(map(type, row)) <= {int} for row in ids):
        return None
    if min(map(min, ids)) < 0 or max(map(max, ids)) >= vocab_size:
        return None
    bound = _FLOAT32_MAX
    if not all(-bound <= v <= bound for rows in values for row in rows for v in row):
        return None
    half = len(ids) // 2  # inputs, then targets
    return torch.tensor([ids[:half], ids[half:]]), torch.tensor(values, dtype=torch.float32)


def _numpy_tensors(
    ids: list[list[Any]], values: list[list[list[Any]]], vocab_size: int
) -> tuple[Tensor, Tensor] | None:
    """:func:`_small_tensors` for a large batch: checked and converted in numpy, which from
    nested lists is ~6x faster than ``torch.tensor`` (8x128 ids: 43 against 250 us). The
    ids' dtype is inferred, so floats (or anything else) among them show."""
    ids_NT = numpy.array(ids)  # N = 2B rows: inputs, then targets
    if ids_NT.dtype.kind != "i" or ids_NT.min() < 0 or ids_NT.max() >= vocab_size:
        return None
    with numpy.errstate(over="ignore"):  # past float32's range: inf, refused below
        floats_KBT = numpy.array(values, dtype=numpy.float64).astype(numpy.float32)
    if not numpy.isfinite(floats_KBT).all():
        return None
    ids_2BT = ids_NT.astype(numpy.int64, copy=False).reshape(2, -1, ids_NT.shape[1])
    return torch.from_numpy(ids_2BT), torch.from_numpy(floats_KBT)
