"""A wire ``datumList`` checked and parsed into the engine port's ``TrainingDatum`` values.

The exact path: :func:`checked_datum` checks a datum member by member and names the first
problem and its fix. The usual datum is read faster by runtime/wire_datums_fast.py, which
returns what this module returns, or hands the datum here.
"""

from __future__ import annotations

from typing import Any, TypeGuard

from localsession import vocab
from localsession.port import TrainingDatum
from localsession.runtime.errors import validation
from localsession.runtime.members import known_members


def training_datums(datums: Any, op: str = vocab.OpKind.FORWARD_BACKWARD) -> list[TrainingDatum]:
    """Check a wire ``datumList``'s structure; its datums as the engine port's values."""
    if not isinstance(datums, list) or not datums:
        raise validation(f"{op}.datumList must hold at least one datum")
    return [checked_datum(datum, f"{op}.datumList[{i}]") for i, datum in enumerate(datums)]


def checked_datum(datum: Any, where: str) -> TrainingDatum:
    """One datum checked member by member: the first problem raises, named with its fix."""
    if not isinstance(datum, dict):
        raise validation(f"{where} must be an object with modelInput")
    known_members(datum, "Datum", where)
    tokens = model_input_tokens(datum.get("modelInput"), f"{where}.modelInput")
    inputs = datum.get("lossFnInputs", {})
    columns: dict[str, list[Any]] = {}
    if not isinstance(inputs, dict):
        raise validation(f"{where}.lossFnInputs must be an object")
    for key, value in inputs.items():
        if not isinstance(value, dict) or not isinstance(value.get("data"), list):
            raise validation(
                f"{where}.lossFnInputs[{key!r}] must be TensorData "
                "{'data': [...], 'dtype': 'float32'}"
            )
        column = f"{where}.lossFnInputs[{key!r}]"
        known_members(value, "TensorData", column)
        if not isinstance(value.get("dtype", ""), str):
            raise validation(f"{column}.dtype must be a string such as 'float32'")
        shape = value.get("shape")
        if shape is not None and not (
            isinstance(shape, list) and all(is_int(n) and n >= 0 for n in shape)
        ):
            raise validation(f"{column}.shape must be a list of integers >= 0")
        columns[key] = _flat(value["data"])
    return TrainingDatum(tokens, columns)


def model_input_tokens(model_input: Any, where: str) -> list[int]:
    """Flatten a wire ModelInput into token ids, refusing malformed chunks."""
    if not isinstance(model_input, dict) or not isinstance(model_input.get("chunks"), list):
        raise validation(f"{where} must be {{'chunks': [{{'tokens': [...]}}]}}")
    known_members(model_input, "ModelInput", where)
    chunks = model_input["chunks"]
    if not chunks:
        raise validation(f"{where} has no chunks; give it at least one chunk of token ids")
    tokens: list[int] = []
    for c, chunk in enumerate(chunks):
        if not isinstance(chunk, dict) or not isinstance(chunk.get("tokens"), list):
            raise validation(f"{where}.chunks[{c}] must be {{'tokens': [int, ...]}}")
        known_members(chunk, "EncodedTextChunk", f"{where}.chunks[{c}]")
        if chunk.get("type", "encoded_text") != "encoded_text":
            raise validation(f"{where}.chunks[{c}].type must be 'encoded_text'")
        ids = chunk["tokens"]
        # set(map(type, ...)) and min() run in C: no Python-level loop over the tokens
        if ids and not (set(map(type, ids)) <= {int} and min(ids) >= 0):
            tok = next(t for t in ids if not is_int(t) or t < 0)
            raise validation(f"{where}.chunks[{c}].tokens holds {tok!r}; token ids are ints >= 0")
        tokens.extend(ids)
    return tokens


def is_int(value: Any) -> TypeGuard[int]:
    """An integer, and not a bool (JSON tells them apart; Python does not)."""
    return isinstance(value, int) and not isinstance(value, bool)


def _flat(data: list[Any]) -> list[Any]:
    """A ``TensorData.data`` list flattened row by row (a flat list is returned as it is)."""
    if data and isinstance(data[0], list):
        return [x for row in data for x in (_flat(row) if isinstance(row, list) else [row])]
    return data
