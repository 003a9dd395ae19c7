"""botocore's client-side parameter check and the wire's copy of a request: the exact path.

A strict client must refuse exactly what botocore's ``ParamValidator`` refuses, with its
report (:func:`check`), and must then send what a JSON round trip makes of the request
(:func:`wire_copy`). Clients reach these through client/param_check_fast.py, which proves the
usual request valid and copies it in one pass, and hands anything it cannot prove here.
"""

from __future__ import annotations

import json
from typing import Any

from botocore.exceptions import ParamValidationError


def check(params: dict[str, Any], shape: Any) -> None:
    """botocore's own walk, and its report (with our hint for the 512-token floor):
    ``ParamValidationError`` for what the SDK's client rejects before sending."""
    from botocore.validate import ParamValidator

    report = ParamValidator().validate(params, shape)
    if report.has_errors():
        text = report.generate_report()
        if "maxTokens, value" in text and "valid min value" in text:  # the 512 floor
            text += (
                "\nThe service minimum applies in strict mode; for shorter local runs use "
                "ServiceClient(..., strict=False) or `localsession serve --relaxed`."
            )
        raise ParamValidationError(report=text)


def wire_copy(data: Any) -> Any:
    """What the wire delivers of ``data``: its JSON round trip."""
    return json.loads(json.dumps(data))


def checked_copy(params: dict[str, Any], shape: Any) -> Any:
    """``params`` checked as botocore checks them (:func:`check`), then copied as the wire
    delivers them (:func:`wire_copy`)."""
    check(params, shape)
    return wire_copy(params)
