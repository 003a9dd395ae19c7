"""An optimisation of engine/batch.py: the same training batch, one tensor per column.

The reference is :func:`localsession.engine.batch.parse_datums` (one datum and one column at
a time, naming the first problem); read that one first. :func:`batched` only ever returns
what it returns, or ``None``: well-formed datums take this path, each check one tensor op
over the whole batch; anything it does not accept as it stands (a bad value, integral
floats as ids, a column some datums lack, a datum past the context) is declined, and the
caller (``train_step.parse``) hands the datums to the reference, which converts what may be
converted and raises the error naming the datum and key. tests/engine/test_batch_fast.py
holds the two to the same batches and errors, and tests/test_fast_paths.py runs a training
loop with this path declining every batch, byte for byte alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy
import torch
from torch import Tensor

from localsession.engine.batch import Batch
from localsession.numerics import inputs as checks
from localsession.port import EngineInputError, TrainingDatum

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
            ids, given = checks.datum_columns(i, datum, loss_fn)
            for key, values in given.items():
                columns.setdefault(key, []).append(values)
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
