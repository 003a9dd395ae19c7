"""``wire_copy``: the in-process submit's copy of a request is what a JSON round trip makes of
it (the wire's own copy), judged against ``json.loads(json.dumps(...))`` itself, and shares
no list or dict with what the caller still holds."""

from __future__ import annotations

import enum
import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from testkit import containers

from localsession.client.param_check_fast import wire_copy

_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=6),
        st.tuples(inner, inner),
        st.dictionaries(st.text(max_size=5), inner, max_size=5),
        st.dictionaries(st.integers(), inner, max_size=3),  # JSON makes these keys strings
    ),
    max_leaves=30,
)


@settings(max_examples=200, deadline=None)
@given(_VALUES)
def test_the_copy_is_the_json_round_trip_and_shares_no_container(value: Any) -> None:
    copied = wire_copy(value)
    # repr on both sides: it tells 1 from "1" as a key, and NaN != NaN but both read nan
    assert repr(copied) == repr(json.loads(json.dumps(value)))
    assert not set(containers(copied)) & set(containers(value))


def test_types_json_cannot_write_are_refused_as_json_refuses_them() -> None:
    class Opaque:
        pass

    for bad in ({"data": [1, Opaque()]}, {("tuple", "key"): 1}, {"x": {1, 2}}):
        with pytest.raises(TypeError) as ours:
            wire_copy(bad)
        with pytest.raises(TypeError) as theirs:
            json.dumps(bad)
        assert str(ours.value) == str(theirs.value)


def test_subclasses_become_what_json_makes_of_them() -> None:
    class Level(enum.IntEnum):
        HIGH = 3

    class Ratio(float):
        pass

    copied = wire_copy({"level": [Level.HIGH, 1], "ratio": Ratio(0.5), "flag": True})
    assert copied == {"level": [3, 1], "ratio": 0.5, "flag": True}
    assert type(copied["level"][0]) is int and type(copied["ratio"]) is float


def test_a_row_of_numbers_is_a_new_list_with_the_same_values() -> None:
    row = [1, 2.5, math.inf, -0.0]
    copied = wire_copy({"data": row})["data"]
    row.append(7)
    assert copied == [1, 2.5, math.inf, -0.0] and math.copysign(1, copied[3]) == -1
