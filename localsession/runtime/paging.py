"""Paging for the List* calls: ``MaxResults`` rows from the offset a ``NextToken`` holds.

Tokens are decimal offsets this service issued; anything else is a ValidationException that
names the bad token.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from localsession.runtime import errors

_Row = TypeVar("_Row")


def page(
    rows: list[_Row], request: dict[str, Any], key: str, summary: Callable[[_Row], dict[str, Any]]
) -> dict[str, Any]:
    """One page of a List* call: the summaries of ``MaxResults`` rows from the offset in
    ``NextToken`` under ``key``, and the ``NextToken`` of the next page if there is one."""
    limit, token = request.get("MaxResults", 100), request.get("NextToken") or "0"
    if type(limit) is not int or not 1 <= limit <= 100:
        raise errors.validation(f"MaxResults={limit!r} must be an integer in [1, 100]")
    if not isinstance(token, str) or not (token.isascii() and token.isdigit()):
        raise errors.validation(f"NextToken {token!r} is not a token this service issued")
    start = int(token)
    body: dict[str, Any] = {key: [summary(row) for row in rows[start : start + limit]]}
    if start + limit < len(rows):
        body["NextToken"] = str(start + limit)
    return body
