"""localsession.types against the installed SDK's types, on generated valid and invalid input.

When both accept: equal ``model_dump()``, wire form and JSON schema; when both refuse: the same
exception class and the same field locations; and objects cross between the two packages.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ._sdk import our_types, ours, outcome, same_outcome, sdk, sdk_types

SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
logging.getLogger("localsession.types").setLevel(logging.ERROR)
logging.getLogger("sagemaker.train.training_session.types").setLevel(logging.ERROR)

MODELS = [
    "ModelPackageInfo",
    "TrainingSessionSummary",
    "ModelPackageDeletion",
    "VpcConfig",
    "TensorData",
    "EncodedTextChunk",
    "ModelInputChunk",
    "ModelInput",
    "Datum",
    "AdamParams",
    "SamplingParams",
    "SampledSequence",
    "TokenLogprob",
    "SampleResponse",
]

ENUM_TEXT = ["Running", "Failed", "model", "checkpoint", "float32", "half", "stop", "length"]
leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 1000),
    st.floats(-2, 2, allow_nan=False),
    st.text(max_size=4),
    st.sampled_from(ENUM_TEXT),
    st.just(dt.datetime(2026, 1, 2, 3, 4, 5)),
)
value = st.recursive(
    leaf,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(
            st.sampled_from(["tokens", "chunk", "chunks", "prompt", "data", "dtype", "x"]),
            inner,
            max_size=3,
        ),
    ),
    max_leaves=8,
)


def _fields(name: str) -> list[str]:
    model = getattr(sdk, name)
    names = list(model.model_fields)
    if name == "TensorData":
        names.append("data")
    return [*names, "bogus", "weight"]


def _wire(model: Any) -> Any:
    """The wire form (or the class of what it raised)."""
    if not hasattr(model, "_to_api"):
        return None
    kind, got = outcome(model._to_api)
    return got if kind == "ok" else type(got).__name__


def _view(model: Any) -> Any:
    kind, dumped = outcome(lambda: model.model_dump(mode="json"))
    return (dumped if kind == "ok" else type(dumped).__name__), _wire(model)


@pytest.mark.parametrize("name", MODELS)
@SETTINGS
@given(data=st.data())
def test_construction_accepts_and_refuses_alike(name: str, data: Any) -> None:
    kwargs = data.draw(st.dictionaries(st.sampled_from(_fields(name)), value, max_size=4))
    mine = outcome(lambda: getattr(ours, name)(**kwargs))
    theirs = outcome(lambda: getattr(sdk, name)(**kwargs))
    same_outcome(mine, theirs, _view)
    if mine[0] == "ok":
        # Round trips across the two packages, both ways, through the JSON dump.
        to_sdk = outcome(lambda: getattr(sdk, name)(**mine[1].model_dump(mode="json")))
        to_ours = outcome(lambda: getattr(ours, name)(**theirs[1].model_dump(mode="json")))
        same_outcome(to_sdk, to_ours, _view)


def _strip(schema: Any) -> Any:
    if isinstance(schema, dict):
        return {k: _strip(v) for k, v in schema.items() if k != "description"}
    if isinstance(schema, list):
        return [_strip(v) for v in schema]
    return schema


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("mode", ["validation", "serialization"])
def test_json_schema_is_the_sdks(name: str, mode: str) -> None:
    """Equal apart from descriptions (docstrings, which are ours)."""
    mine = getattr(ours, name).model_json_schema(mode=mode)
    theirs = getattr(sdk, name).model_json_schema(mode=mode)
    assert _strip(mine) == _strip(theirs)


FROM_ANY = ["TensorData", "EncodedTextChunk", "ModelInput", "Datum", "AdamParams"]
FROM_ANY += ["SamplingParams", "VpcConfig"]


@pytest.mark.parametrize("name", FROM_ANY)
@SETTINGS
@given(raw=value)
def test_from_any_reads_plain_values_alike(name: str, raw: Any) -> None:
    mine = outcome(lambda: getattr(ours, name).from_any(raw))
    theirs = outcome(lambda: getattr(sdk, name).from_any(raw))
    same_outcome(mine, theirs, _view)


class _Foreign:
    """A caller's own type with some of the attributes ``from_any`` reads."""

    def __init__(self, **attrs: Any) -> None:
        self.__dict__.update(attrs)


@SETTINGS
@given(
    attrs=st.dictionaries(
        st.sampled_from(
            [
                "model_input",
                "chunks",
                "prompt",
                "loss_fn_inputs",
                "weight",
                "tokens",
                "learning_rate",
                "max_tokens",
                "temp",
                "subnets",
                "security_group_ids",
                "data",
                "dtype",
                "shape",
            ]
        ),
        value,
        max_size=3,
    ),
    name=st.sampled_from(FROM_ANY),
)
def test_from_any_reads_foreign_objects_alike(attrs: dict[str, Any], name: str) -> None:
    mine = outcome(lambda: getattr(ours, name).from_any(_Foreign(**attrs)))
    theirs = outcome(lambda: getattr(sdk, name).from_any(_Foreign(**attrs)))
    same_outcome(mine, theirs, _view)


@SETTINGS
@given(
    tokens=st.lists(st.integers(0, 99), max_size=5),
    extra=st.lists(st.lists(st.integers(0, 99), max_size=3), max_size=3),
    text=st.one_of(st.none(), st.text(min_size=1, max_size=5)),
)
def test_model_input_methods_alike(
    tokens: list[int], extra: list[list[int]], text: str | None
) -> None:
    for module in (ours, sdk):
        module_result = []
        base = module.ModelInput.from_text(text) if text else module.ModelInput.from_ints(tokens)
        for more in extra:
            module_result.append(outcome(lambda b=base, m=more: b.append(m).to_ints()))
        module_result.append(outcome(lambda b=base: b.append_int(7).length))
        module_result.append(outcome(lambda b=base: b.to_ints()))
        module_result.append(outcome(lambda b=base: b._to_api()))
        if module is ours:
            mine = module_result
        else:
            theirs = module_result
    for a, b in zip(mine, theirs, strict=True):
        same_outcome(a, b, lambda v: v)


def test_results_read_the_same_fields() -> None:
    raw = {
        "forwardBackward": {"metrics": {"loss": 1.5}, "lossFnOutputs": [{"a": 1}]},
        "optimizerStep": {"metrics": {"lr": 0.1}},
        "saveState": {"modelPackageArn": "arn:s"},
        "saveWeights": {"modelPackageArn": "arn:w"},
    }
    for name, attrs in [
        ("ForwardBackwardOutput", ["metrics", "loss_fn_outputs"]),
        ("OptimStepResponse", ["metrics"]),
        ("SaveStateResponse", ["model_package_arn"]),
        ("SaveWeightsResponse", ["model_package_arn"]),
    ]:
        for body in (raw, {}, {"forward": None}, {"forward": {"metrics": {"loss": 2.0}}}):
            mine = getattr(our_types, name)._from_api(body)
            theirs = getattr(sdk_types, name)._from_api(body)
            assert [getattr(mine, a) for a in attrs] == [getattr(theirs, a) for a in attrs]
    sample = {
        "sequences": [{"stopReason": "stop", "tokens": [1, 2], "logprobs": [-0.5, -1.0]}],
        "promptLogprobs": [-1.0, -2.0],
        "topkPromptLogprobs": [[{"tokenId": 3, "logprob": -0.1}]],
    }
    assert (
        our_types.SampleResponse._from_api(sample).model_dump()
        == sdk_types.SampleResponse._from_api(sample).model_dump()
    )
    summary = {"TrainingSessionArn": "arn:a/b/name", "TrainingSessionStatus": "Novel"}
    mine_s = our_types.TrainingSessionSummary._from_summary(summary)
    theirs_s = sdk_types.TrainingSessionSummary._from_summary(summary)
    assert mine_s.model_dump() == theirs_s.model_dump()
    assert mine_s.training_session_name == theirs_s.training_session_name == "name"


# -- TensorData over list, numpy and torch × dtypes × shapes -----------------------------------

DTYPES = ["bool", "int32", "int64", "half", "bfloat16", "float", "float64", "uint8"]
shapes = st.lists(st.integers(1, 3), min_size=0, max_size=3)


def _values(shape: list[int], draw: Any) -> list[Any]:
    count = 1
    for n in shape:
        count *= n
    return draw(st.lists(st.integers(0, 4), min_size=count, max_size=count))


def _tensor_like(kind: str, dtype: str, shape: list[int], flat: list[int]) -> Any:
    import numpy as np
    import torch

    if kind == "torch":
        return torch.tensor(flat, dtype=getattr(torch, dtype)).reshape(shape)
    if kind == "numpy":
        name = {"half": "float16", "float": "float32"}.get(dtype, dtype)
        return np.asarray(flat, dtype=name).reshape(shape)
    nested: Any = np.asarray(flat).reshape(shape).tolist() if shape else list(flat)
    return nested


@SETTINGS
@given(
    kind=st.sampled_from(["torch", "numpy", "list"]),
    dtype=st.sampled_from(DTYPES),
    shape=shapes,
    data=st.data(),
)
def test_tensor_data_coercion_alike(kind: str, dtype: str, shape: list[int], data: Any) -> None:
    if kind == "numpy" and dtype == "bfloat16":
        return  # numpy has no bfloat16
    flat = _values(shape, data.draw)
    source = _tensor_like(kind, dtype, shape, flat)
    mine = outcome(lambda: ours.TensorData.from_any(source))
    theirs = outcome(lambda: sdk.TensorData.from_any(source))
    same_outcome(mine, theirs, _view)
    direct = {"data": source, "dtype": getattr(source, "dtype", dtype)}
    same_outcome(
        outcome(lambda: ours.TensorData(**direct)),
        outcome(lambda: sdk.TensorData(**direct)),
        _view,
    )
    datum = {"model_input": {"chunks": [{"tokens": [1, 2]}]}, "loss_fn_inputs": {"x": source}}
    same_outcome(
        outcome(lambda: ours.Datum(**datum)._to_api()),
        outcome(lambda: sdk.Datum(**datum)._to_api()),
        lambda v: v,
    )
    if mine[0] == "ok":
        for convert in ("tolist", "to_numpy", "to_torch"):
            a = outcome(getattr(mine[1], convert))
            b = outcome(getattr(theirs[1], convert))
            same_outcome(a, b, lambda v: v.tolist() if hasattr(v, "tolist") else v)


@SETTINGS
@given(
    key=st.sampled_from(["target_tokens", "weights", "advantages", "mask", "logprobs"]),
    raw=st.one_of(
        st.lists(st.integers(0, 5), max_size=4),
        st.lists(st.floats(-1, 1), max_size=4),
        st.lists(st.lists(st.integers(0, 5), max_size=3), max_size=3),
        st.lists(st.one_of(st.integers(0, 5), st.lists(st.integers(0, 5), max_size=2)), max_size=3),
        st.lists(st.lists(st.lists(st.integers(0, 5), max_size=2), max_size=2), max_size=2),
        st.lists(st.booleans(), max_size=3),
    ),
)
def test_loss_fn_inputs_serialise_alike(key: str, raw: Any) -> None:
    mine = outcome(lambda: our_types._serialize_loss_fn_inputs({key: raw}))
    theirs = outcome(lambda: sdk_types._serialize_loss_fn_inputs({key: raw}))
    same_outcome(mine, theirs, lambda v: v)
