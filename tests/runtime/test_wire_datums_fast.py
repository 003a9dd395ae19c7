"""The plain-shape reading of a datum (runtime/wire_datums_fast.py) against the
member-by-member one (runtime/wire_datums.py), the reference: on
every datum the plain reading accepts, both give the same ``TrainingDatum``; it accepts
every datum of the shape clients send; and it never accepts what the checked reading
refuses. Datums are drawn around the plain shape, with a wrong value at any member.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from localsession.runtime import wire_datums
from localsession.runtime.errors import ServiceError
from localsession.runtime.wire_datums import checked_datum
from localsession.runtime.wire_datums_fast import plain_datum, plain_shapes, training_datums

_ODD = st.sampled_from([None, 3, -1, 1.5, True, "x", [], [[1, 2]], {}, {"k": 1}, (1,)])
_TOKENS = st.lists(st.integers(0, 300), max_size=6)
_SHAPE = st.lists(st.integers(-1, 8), max_size=2)
_NUMBERS = st.lists(st.one_of(st.floats(allow_nan=False), st.integers()), max_size=6)


def _maybe(value: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """``value``, or in one draw in eight a wrong one."""
    return st.integers(0, 7).flatmap(lambda roll: _ODD if roll == 0 else value)


def _stray(objects: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[Any]:
    """``objects``, or in one draw in eight one with a member its shape does not define."""
    odd = objects.map(lambda fields: {**fields, "weight": 1.0})
    return st.integers(0, 7).flatmap(lambda roll: odd if roll == 0 else objects)


_TENSOR = _stray(
    st.fixed_dictionaries(
        {"data": _maybe(st.one_of(_NUMBERS, st.lists(_NUMBERS, max_size=2)))},
        optional={"dtype": _maybe(st.sampled_from(["float32", "int64"])), "shape": _maybe(_SHAPE)},
    )
)
_CHUNK = _stray(
    st.fixed_dictionaries(
        {"tokens": _maybe(_TOKENS)}, optional={"type": _maybe(st.just("encoded_text"))}
    )
)
_CHUNKS = st.one_of(st.lists(_CHUNK, min_size=1, max_size=1), st.lists(_CHUNK, max_size=3))
_INPUTS = st.dictionaries(st.sampled_from(["weights", "x"]), _maybe(_TENSOR))
_DATUM = _stray(
    st.fixed_dictionaries(
        {"modelInput": _maybe(_stray(st.fixed_dictionaries({"chunks": _maybe(_CHUNKS)})))},
        optional={"lossFnInputs": _maybe(_INPUTS)},
    )
)


def _checked(datum: Any) -> Any:
    try:
        return checked_datum(datum, "forward.datumList[0]")
    except ServiceError:
        return None


def _plain_shape(datum: Any) -> bool:
    """One chunk of int tokens >= 0, and flat tensors with string dtypes and int shapes."""
    chunks = datum["modelInput"]["chunks"]
    tensors = datum.get("lossFnInputs", {}).values()
    return len(chunks) == 1 and all(
        not any(isinstance(x, list) for x in t["data"]) and type(t.get("dtype", "")) is str
        for t in tensors
    )


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(_DATUM)
def test_the_plain_reading_agrees_with_the_checked_one(datum: dict[str, Any]) -> None:
    fast, slow = plain_datum(datum, *plain_shapes()), _checked(datum)
    if fast is not None:
        assert slow is not None, f"the plain reading accepts what the checks refuse: {datum!r}"
        assert (fast.tokens, fast.loss_fn_inputs) == (slow.tokens, slow.loss_fn_inputs)
    elif slow is not None:
        assert not _plain_shape(datum), f"a plain datum left to the checks: {datum!r}"


def test_rows_of_values_are_flattened_row_by_row() -> None:
    datum = {
        "modelInput": {"chunks": [{"tokens": [1, 2, 3, 4]}]},
        "lossFnInputs": {"advantages": {"data": [[1.0, 2.0], [3.0, 4.0]], "shape": [2, 2]}},
    }
    (read,) = training_datums([datum])
    assert read.loss_fn_inputs == {"advantages": [1.0, 2.0, 3.0, 4.0]}


def test_both_readings_copy_the_tokens_and_keep_the_values() -> None:
    ids, weights = [1, 2, 3], [0.0, 1.0, 1.0]
    datum = {
        "modelInput": {"chunks": [{"tokens": ids, "type": "encoded_text"}]},
        "lossFnInputs": {"weights": {"data": weights, "dtype": "float32", "shape": [3]}},
    }
    for read in (plain_datum(datum, *plain_shapes()), _checked(datum)):
        assert read is not None
        assert read.tokens == ids and read.tokens is not ids
        assert read.loss_fn_inputs == {"weights": weights}


@pytest.mark.parametrize(
    ("datum", "named"),
    [
        ({"modelInput": {"chunks": [{"tokens": [1, -2]}]}}, "tokens holds -2"),
        ({"modelInput": {"chunks": [{"tokens": [1]}]}, "weight": 1.0}, "unknown member 'weight'"),
        ({"modelInput": {"chunks": []}}, "has no chunks"),
        (
            {"modelInput": {"chunks": [{"tokens": [1]}]}, "lossFnInputs": {"w": {"data": 1}}},
            "lossFnInputs['w'] must be TensorData",
        ),
        (
            {
                "modelInput": {"chunks": [{"tokens": [1]}]},
                "lossFnInputs": {"w": {"data": [1.0], "dtype": "float32", "weight": 2}},
            },
            "lossFnInputs['w'] has unknown member 'weight'",
        ),
        (
            {
                "modelInput": {"chunks": [{"tokens": [1]}]},
                "lossFnInputs": {"w": {"data": [1.0], "shape": [-1]}},
            },
            "lossFnInputs['w'].shape must be a list of integers >= 0",
        ),
    ],
)
def test_a_datum_off_the_plain_shape_is_refused_with_its_field_named(
    datum: dict[str, Any], named: str
) -> None:
    with pytest.raises(ServiceError) as refused:
        training_datums([{"modelInput": {"chunks": [{"tokens": [5]}]}}, datum], "forward")
    assert "forward.datumList[1]" in refused.value.message and named in refused.value.message


def test_a_list_with_one_datum_off_the_plain_shape_is_read_by_the_exact_path() -> None:
    plain = {"modelInput": {"chunks": [{"tokens": [1, 2]}]}}
    nested = {
        "modelInput": {"chunks": [{"tokens": [3]}, {"tokens": [4]}]},  # two chunks
        "lossFnInputs": {"weights": {"data": [[1.0], [0.0]]}},
    }
    both = training_datums([plain, nested], "forward")
    assert both == wire_datums.training_datums([plain, nested], "forward")
    assert [d.tokens for d in both] == [[1, 2], [3, 4]]
    assert both[1].loss_fn_inputs == {"weights": [1.0, 0.0]}
