"""Parity with the real SDK, live: sagemaker-train 1.27.0 is installed into the test env.

Compares ``__all__``, every public class, method, property, function, enum and pydantic
field, and the signatures (names, kinds, defaults, annotations, async-ness), so drift from the
SDK fails here. Differences we own are listed explicitly below and nowhere else.
"""

from __future__ import annotations

import enum
import inspect
from typing import Any

import pydantic
import pytest

import localsession

try:
    import sagemaker.train.training_session as sdk
except ImportError:  # pragma: no cover - `make test` installs it; a skip would hide drift
    pytest.fail(
        "the real SDK is missing: `make test` installs it "
        "(pip install --no-deps sagemaker-train==1.27.0 boto3 pydantic)",
        pytrace=False,
    )

#: Keyword-only extensions of ours (documented in the README), all with defaults.
EXTENSIONS = {("ServiceClient", "__init__"): {"strict", "backend"}}


def _norm(text: str) -> str:
    """An annotation as text, with the two packages' module paths made equal."""
    return text.replace("sagemaker.train.training_session.", "localsession.").strip("'\"")


_DUNDERS = {"__init__", "__enter__", "__exit__", "__await__", "__eq__"}


def _members(cls: type) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for klass in reversed(cls.__mro__):
        if klass in (object, pydantic.BaseModel, enum.Enum, str, int, Exception, BaseException):
            continue
        for name, value in vars(klass).items():
            if (not name.startswith("_") or name in _DUNDERS) and not name.startswith("model_"):
                out[name] = value
    return out


def _describe(value: Any) -> Any:
    """A comparable description of one class member."""
    if isinstance(value, property):
        return "property"
    if isinstance(value, (classmethod, staticmethod)):
        return (type(value).__name__, _signature(value.__func__))
    if callable(value):
        return ("async" if inspect.iscoroutinefunction(value) else "def", _signature(value))
    return ("value", repr(value))


def _fields(model: type[pydantic.BaseModel]) -> dict[str, tuple[str, str]]:
    return {k: (_norm(str(f.annotation)), repr(f.default)) for k, f in model.model_fields.items()}


def _signature(fn: Any) -> list[tuple[str, str, str, str]]:
    sig = inspect.signature(fn)
    return [
        (p.name, str(p.kind), repr(p.default), _norm(str(p.annotation)))
        for p in sig.parameters.values()
    ] + [("return", "", "", _norm(str(sig.return_annotation)))]


def test_all_is_the_sdk_all() -> None:
    assert list(localsession.__all__) == list(sdk.__all__)
    assert len(localsession.__all__) == 36


@pytest.mark.parametrize("name", sdk.__all__)
def test_public_name_matches(name: str) -> None:
    ours, theirs = getattr(localsession, name), getattr(sdk, name)
    if isinstance(theirs, str):
        assert ours == theirs
        return
    if inspect.isfunction(theirs):
        assert _signature(ours) == _signature(theirs)
        return
    assert inspect.isclass(ours) and inspect.isclass(theirs)
    assert [b.__name__ for b in ours.__mro__] == [b.__name__ for b in theirs.__mro__]
    if issubclass(theirs, enum.Enum):
        assert [(m.name, m.value) for m in ours] == [(m.name, m.value) for m in theirs]
    if issubclass(theirs, pydantic.BaseModel):
        assert ours.model_config == theirs.model_config
        assert _fields(ours) == _fields(theirs)
    mine, sdks = _members(ours), _members(theirs)
    assert set(sdks) - set(mine) == set(), "missing public members"
    assert set(mine) - set(sdks) == set(), "public members the SDK does not have"
    for member in sdks:
        expected, actual = _describe(sdks[member]), _describe(mine[member])
        extra = EXTENSIONS.get((name, member))
        if extra and isinstance(actual, tuple):
            kind, params = actual
            actual = (kind, [p for p in params if p[0] not in extra])
            for p in params:
                if p[0] in extra:
                    assert p[1] == "KEYWORD_ONLY" and p[2] != repr(inspect.Parameter.empty)
        assert actual == expected, f"{name}.{member}"


def test_batch_coercion_matches_the_sdk() -> None:
    """The vendored input path produces the SDK's wire datums for every batch form."""
    from sagemaker.train.training_session import _utils as sdk_utils

    from localsession.client import _inputs

    tokens = [5, 6, 7, 8]
    inputs = {"target_tokens": tokens[1:] + [0], "weights": [0.0, 1.0, 1.0, 1.0]}
    batches: list[Any] = [
        tokens,
        [tokens, tokens[:2] + [9, 9]],
        [
            localsession.Datum(
                model_input=localsession.ModelInput.from_ints(tokens), loss_fn_inputs=inputs
            )
        ],
        [{"modelInput": {"chunks": [{"tokens": tokens, "type": "encoded_text"}]}}],
    ]
    for batch in batches:
        assert _inputs.batch_to_datum_list(batch, loss_fn_inputs=inputs) == (
            sdk_utils.batch_to_datum_list(batch, loss_fn_inputs=inputs)
        )
    bad = [{"modelInput": {"chunks": [{"tokens": tokens}]}, "lossFnInputs": {"weights": [1.0]}}]
    with pytest.raises(ValueError) as ours:
        _inputs.batch_to_datum_list(bad, loss_fn_name="cross_entropy")
    with pytest.raises(ValueError) as theirs:
        sdk_utils.batch_to_datum_list(bad, loss_fn_name="cross_entropy")
    assert str(ours.value) == str(theirs.value)
