"""The scaling bench's plots (issue 49, item 6): which series go in which panel, a pure
function checked on stated inputs; no axis mixes units, and nothing constant is drawn."""

from __future__ import annotations

from bench.bench_scaling import plot_panels


def test_one_unit_per_series_gives_each_its_own_panel() -> None:
    series = {"steps/s": ([1, 2, 4], [3.1, 3.6, 3.4]), "p99 step (s)": ([1, 2, 4], [0.4, 0.7, 1.3])}
    assert plot_panels("steps/s · p99 s", series) == [
        [("steps/s", [1, 2, 4], [3.1, 3.6, 3.4], True)],
        [("p99 step (s)", [1, 2, 4], [0.4, 0.7, 1.3], True)],
    ]


def test_one_unit_draws_the_measurement_against_its_models() -> None:
    series = {"step": ([128, 512], [0.02, 0.07]), "linear": ([128, 512], [0.02, 0.08])}
    assert plot_panels("s", series) == [
        [("step", [128, 512], [0.02, 0.07], True), ("linear", [128, 512], [0.02, 0.08], False)]
    ]


def test_a_series_that_never_varies_is_left_out() -> None:
    series = {"peak RSS": ([1, 4], [600.0, 680.0]), "flat": ([1, 4], [5.0, 5.0])}
    assert plot_panels("MB", series) == [[("peak RSS", [1, 4], [600.0, 680.0], True)]]
    assert plot_panels("MB", {"flat": ([1, 4], [5.0, 5.0])}) == []
