"""The bench's own honesty: rows that cannot run are MISS, never info, and the table then
does not end in "pass" (issue 28, item 5)."""

from __future__ import annotations

import math

import pytest

from bench.common import Row, render


def test_real_rows_without_the_model_are_misses(monkeypatch: pytest.MonkeyPatch) -> None:
    bench_real = pytest.importorskip("bench.bench_real")
    monkeypatch.setattr(bench_real.real_model, "available", lambda: False)
    rows = bench_real.collect(smoke=False)
    assert {r.metric.split(" (")[0] for r in rows} == {
        f"real: {what}" for what in bench_real.PARTS.values()
    }
    assert all(r.ok is False and math.isnan(r.ours) for r in rows)
    table = render([Row("some other row", 1.0, "ms", "≤ 2 ms", True), *rows])
    assert table.splitlines()[-1].startswith("MISS: 1/6 targets met")
    assert "nan" not in table and "not installed" in table
    only_memory = bench_real.collect(smoke=False, only=["memory"])
    assert [r.metric for r in only_memory] == [r.metric for r in rows if "RSS" in r.metric]
