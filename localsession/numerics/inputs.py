"""The torch-free half of the numerics: reading and checking what an op asks the engine for.

Every engine (the torch engine, the fakes' numeric bigram engine and their torch-free light
engine) reads its inputs through these functions, so a bad input fails with the same message
whichever engine runs it, and always before any state changes:

- ``loss_fn`` and the clip bounds of its ``loss_fn_config`` (:func:`check_loss_fn`,
  :func:`clip_config`); the config and the Adam hyperparameters arrive as the port's typed
  values (:class:`~localsession.port.LossConfig`, :class:`~localsession.port.AdamHyperparams`),
  checked once by the runtime;
- datums, as the runtime parsed them (:class:`~localsession.port.TrainingDatum`): their
  tokens (:func:`datum_tokens`), their ``loss_fn_inputs`` keys (:func:`check_input_keys`),
  one value per token (:func:`column_data`) and, as plain lists, every value
  (:func:`read_datums`). The wire structure was checked once, by the runtime; what is left
  here are the checks only an engine can make, which fail the op (``datum 3: ...``);
- whether a computed loss is finite (:func:`finite_or_raise`), before any gradient is added.

Results are the port's own values, built by each engine
(:meth:`~localsession.port_results.ForwardResult.from_rows`).

Names and ranges come from :mod:`localsession.vocab`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from localsession import vocab
from localsession.port import EngineInputError, LossConfig, TrainingDatum

# -- losses ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class ClipConfig:
    """Absolute ratio bounds: ``lo`` in [0, 1], ``hi`` in [1, 10]."""

    low: float
    high: float


def check_loss_fn(loss_fn: str) -> None:
    """Raise ``EngineInputError`` unless ``loss_fn`` is one of the service's losses."""
    if loss_fn not in vocab.LOSS_FUNCTIONS:
        raise EngineInputError(
            f"unknown loss_fn {loss_fn!r}; supported: {', '.join(vocab.LOSS_FUNCTIONS)}"
        )


def clip_config(loss_fn: str, config: LossConfig | None) -> ClipConfig:
    """The clip bounds of ``loss_fn`` under the runtime-checked ``loss_fn_config``
    (docs/semantics.md#1): the bounds given, the loss's defaults for the rest."""
    check_loss_fn(loss_fn)
    if config is None:  # the usual case, on every op
        found = _DEFAULT_CLIPS.get(loss_fn)  # a loss added later: vocab.DEFAULT_CLIP's
        return found if found is not None else ClipConfig(*vocab.DEFAULT_CLIP[loss_fn])
    return ClipConfig(*config.bounds(loss_fn))


_DEFAULT_CLIPS = {fn: ClipConfig(*bounds) for fn, bounds in vocab.DEFAULT_CLIP.items()}


# -- datums ---------------------------------------------------------------------------------


def datum_tokens(datum: TrainingDatum, index: int) -> list[int]:
    """A datum's ``modelInput`` token ids; refused when there are none."""
    if not datum.tokens:
        raise EngineInputError(f"datum {index}: `modelInput` has no tokens")
    return datum.tokens


def check_input_keys(index: int, datum: TrainingDatum, loss_fn: str) -> dict[str, list[Any]]:
    """A datum's ``loss_fn_inputs``: every key ``loss_fn`` needs, no other."""
    inputs = datum.loss_fn_inputs
    for key in inputs:
        if key not in vocab.LOSS_INPUT_KEYS:
            raise EngineInputError(
                f"datum {index}: unsupported loss_fn_inputs key {key!r}; "
                f"allowed keys: {', '.join(vocab.LOSS_INPUT_KEYS)}"
            )
    required = vocab.REQUIRED_INPUT_KEYS[loss_fn]
    for key in required:
        if key not in inputs:
            raise EngineInputError(
                f"datum {index}: `{key}` is missing; loss_fn {loss_fn!r} needs "
                f"{', '.join(required)}"
            )
    return inputs


def column_data(index: int, key: str, data: list[Any], length: int) -> list[Any]:
    """One input's flat values, checked to hold one value per token."""
    where = f"datum {index}: `{key}`"
    if len(data) != length:
        raise EngineInputError(
            f"{where} has {len(data)} values, its model_input has {length} tokens "
            "(give one value per model_input token)"
        )
    return data


def datum_columns(
    index: int, datum: TrainingDatum, loss_fn: str
) -> tuple[list[int], dict[str, list[Any]]]:
    """A datum's tokens and its ``loss_fn_inputs`` columns, with the three checks above:
    tokens given, the keys ``loss_fn`` needs and no other, one value per token."""
    tokens = datum_tokens(datum, index)
    given = check_input_keys(index, datum, loss_fn)
    return tokens, {k: column_data(index, k, v, len(tokens)) for k, v in given.items()}


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return float(value)
    return float(value) if isinstance(value, (int, float)) else None


def token_ids(values: Sequence[Any], vocab_size: int, what: str) -> list[int]:
    """Integer ids in ``[0, vocab_size)`` (JSON booleans and integral floats accepted)."""
    out: list[int] = []
    for value in values:
        number = _number(value)
        if number is None or not math.isfinite(number) or number != int(number):
            raise EngineInputError(f"{what} must hold integer token ids")
        out.append(int(number))
    bad = [t for t in out if not 0 <= t < vocab_size]
    if bad:
        raise EngineInputError(
            f"{what} holds token id {bad[0]}, outside the vocabulary [0, {vocab_size})"
        )
    return out


@dataclass
class DatumRows:
    """One datum as plain lists: its tokens and each ``loss_fn_inputs`` column it gave."""

    tokens: list[int]
    targets: list[int]
    columns: dict[str, list[float]] = field(default_factory=dict)


def read_datums(datums: Sequence[TrainingDatum], loss_fn: str, vocab_size: int) -> list[DatumRows]:
    """Every check of the torch engine's ``parse_datums``, over plain lists (no torch)."""
    check_loss_fn(loss_fn)
    if not datums:
        raise EngineInputError("no datums given")
    rows: list[DatumRows] = []
    given: dict[str, list[bool]] = {key: [] for key in vocab.LOSS_INPUT_KEYS}
    for i, datum in enumerate(datums):
        tokens = token_ids(datum_tokens(datum, i), vocab_size, f"datum {i}: `modelInput`")
        inputs = check_input_keys(i, datum, loss_fn)
        row = DatumRows(tokens=tokens, targets=[])
        for key in vocab.LOSS_INPUT_KEYS:
            given[key].append(key in inputs)
            if key not in inputs:
                continue
            data = column_data(i, key, inputs[key], len(tokens))
            if key == "target_tokens":
                row.targets = token_ids(data, vocab_size, f"datum {i}: `target_tokens`")
                continue
            values = [_number(v) for v in data]
            if any(v is None for v in values):
                raise EngineInputError(f"datum {i}: `{key}` must be a flat list of numbers")
            floats = [float(v) for v in values if v is not None]
            if not all(math.isfinite(v) for v in floats):
                raise EngineInputError(
                    f"datum {i}: `{key}` holds a non-finite value (NaN or infinity)"
                )
            if key == "temperature" and not all(v > 0 for v in floats):
                raise EngineInputError(f"datum {i}: `{key}`: every temperature must be > 0")
            row.columns[key] = floats
        rows.append(row)
    for key, flags in given.items():
        if any(flags) and not all(flags) and key != "temperature":
            raise EngineInputError(
                f"datum {flags.index(False)}: `{key}` is missing while other datums give it; "
                "give it for every datum or for none"
            )
    return rows


# -- results --------------------------------------------------------------------------------


def finite_or_raise(value: float, what: str) -> float:
    """Raise ``EngineInputError`` if a computed value is not finite (nothing applied yet)."""
    if not math.isfinite(value):
        raise EngineInputError(
            f"{what} is not finite ({value}); check `logprobs` / `advantages` for extreme "
            "values (the ratio exp(lp - logprobs) overflowed)"
        )
    return value
