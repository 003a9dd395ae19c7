"""The fast path of reading a wire ``datumList``: the plain shape every client sends.

The exact path is runtime/wire_datums.py; this module only ever returns what that one
returns, or hands the request to it. Every client sends the same plain shape: a
``modelInput`` of one chunk of token ids, and ``lossFnInputs`` of flat ``TensorData``.
:func:`plain_datum` reads that shape with checks that run in C over whole lists
(``set(map(type, ...))``, ``min``), and builds no message for a datum that passes. A list
with any datum off that shape is read by the exact path, which names the first problem
(tests/runtime/test_wire_datums_fast.py holds the two to the same values).
"""

from __future__ import annotations

import functools
from typing import Any

from localsession import vocab
from localsession.port import TrainingDatum
from localsession.runtime import wire_datums
from localsession.runtime.members import MEMBERS


def training_datums(datums: Any, op: str = vocab.OpKind.FORWARD_BACKWARD) -> list[TrainingDatum]:
    """``wire_datums.training_datums``: every datum read on the plain shape, else the exact
    path reads them all."""
    if type(datums) is not list or not datums:
        return wire_datums.training_datums(datums, op)
    plain = plain_shapes()
    read: list[TrainingDatum] = []
    for datum in datums:
        one = plain_datum(datum, *plain)
        if one is None:
            return wire_datums.training_datums(datums, op)
        read.append(one)
    return read


@functools.cache
def plain_shapes() -> tuple[frozenset[str], ...]:
    """The members of Datum, EncodedTextChunk and TensorData (read from botocore once)."""
    return tuple(MEMBERS[shape] for shape in ("Datum", "EncodedTextChunk", "TensorData"))


def plain_datum(
    datum: Any, datum_keys: frozenset[str], chunk_keys: frozenset[str], tensor_keys: frozenset[str]
) -> TrainingDatum | None:
    """The datum's port value if it has the plain shape (one chunk, flat tensors), else None:
    :func:`wire_datums.checked_datum` then decides, and names any problem."""
    if type(datum) is not dict or not datum.keys() <= datum_keys:
        return None
    model_input = datum.get("modelInput")
    if type(model_input) is not dict or len(model_input) != 1:
        return None
    parts = model_input.get("chunks")
    if type(parts) is not list or len(parts) != 1:
        return None
    chunk = parts[0]
    if type(chunk) is not dict or not chunk.keys() <= chunk_keys:
        return None
    ids = chunk.get("tokens")
    if type(ids) is not list or chunk.get("type", "encoded_text") != "encoded_text":
        return None
    if ids and not (set(map(type, ids)) <= {int} and min(ids) >= 0):
        return None
    inputs = datum.get("lossFnInputs", {})
    if type(inputs) is not dict:
        return None
    for value in inputs.values():
        if type(value) is not dict or not value.keys() <= tensor_keys:
            return None
        data, shape = value.get("data"), value.get("shape")
        if type(data) is not list or (data and isinstance(data[0], list)):
            return None  # nested rows: flattened on the checked path
        if type(value.get("dtype", "")) is not str:
            return None
        if shape is not None and not (
            type(shape) is list and set(map(type, shape)) <= {int} and min(shape, default=0) >= 0
        ):
            return None
    return TrainingDatum([*ids], {key: value["data"] for key, value in inputs.items()})
