"""Helpers shared by the differential tests: the two implementations side by side."""

from __future__ import annotations

from typing import Any

import pydantic
import sagemaker.train.training_session as sdk  # installed by `make test`
from sagemaker.train.training_session import _utils as sdk_utils
from sagemaker.train.training_session import exceptions as sdk_exceptions
from sagemaker.train.training_session import futures as sdk_futures
from sagemaker.train.training_session import types as sdk_types

import localsession as ours
from localsession import exceptions as our_exceptions
from localsession import futures as our_futures
from localsession import types as our_types
from localsession.client import _inputs as our_inputs

__all__ = [
    "ours",
    "our_exceptions",
    "our_futures",
    "our_inputs",
    "our_types",
    "sdk",
    "sdk_exceptions",
    "sdk_futures",
    "sdk_types",
    "sdk_utils",
    "outcome",
    "same_outcome",
]


def outcome(fn: Any) -> tuple[str, Any]:
    """("ok", value) or ("raised", exception) for one call."""
    try:
        return "ok", fn()
    except Exception as exc:  # noqa: BLE001 - compared by the caller
        return "raised", exc


def _locations(exc: BaseException) -> Any:
    if isinstance(exc, pydantic.ValidationError):
        return sorted(str(e["loc"]) for e in exc.errors())
    return None


def same_outcome(mine: tuple[str, Any], theirs: tuple[str, Any], compare: Any) -> None:
    """Both accepted with equal ``compare(value)``, or both refused with the same exception
    class (and, for pydantic, the same error locations)."""
    assert mine[0] == theirs[0], (mine, theirs)
    if mine[0] == "ok":
        assert compare(mine[1]) == compare(theirs[1])
        return
    assert type(mine[1]) is type(theirs[1]), (mine[1], theirs[1])
    assert _locations(mine[1]) == _locations(theirs[1]), (mine[1], theirs[1])
