"""``runtime/paging.py``: List* pages of ``MaxResults`` rows, chained by ``NextToken``."""

from __future__ import annotations

from typing import Any

import pytest

from localsession.runtime.errors import ServiceError
from localsession.runtime.paging import page


def _all_pages(rows: list[int], limit: int | None) -> list[list[int]]:
    pages, request = [], {} if limit is None else {"MaxResults": limit}
    while True:
        body = page(rows, request, "Rows", lambda r: {"n": r})
        pages.append([entry["n"] for entry in body["Rows"]])
        if "NextToken" not in body:
            return pages
        request = {**request, "NextToken": body["NextToken"]}


def test_pages_cover_every_row_once_in_order() -> None:
    rows = list(range(250))
    assert [len(p) for p in _all_pages(rows, None)] == [100, 100, 50]  # default MaxResults=100
    assert [len(p) for p in _all_pages(rows, 7)] == [7] * 35 + [5]
    assert sum(_all_pages(rows, 7), []) == rows
    assert _all_pages(rows[:100], 100) == [rows[:100]]  # an exact fit has no NextToken


def test_no_rows_is_one_empty_page_without_a_token() -> None:
    assert page([], {}, "Rows", lambda r: {"n": r}) == {"Rows": []}


@pytest.mark.parametrize(
    "request_",
    [
        {"MaxResults": 0},
        {"MaxResults": 101},
        {"MaxResults": True},
        {"MaxResults": "5"},
        {"NextToken": "abc"},
        {"NextToken": "-1"},
        {"NextToken": 5},
        {"NextToken": "١"},  # a non-ASCII digit
    ],
)
def test_bad_limits_and_foreign_tokens_are_validation_errors(request_: dict[str, Any]) -> None:
    with pytest.raises(ServiceError) as raised:
        page([1, 2, 3], request_, "Rows", lambda r: {"n": r})
    assert raised.value.code == "ValidationException"
    assert str(next(iter(request_.values()))) in raised.value.message
