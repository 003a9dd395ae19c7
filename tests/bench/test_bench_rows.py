"""The bench's own honesty: rows that cannot run are MISS, never info, and the table then
does not end in "pass" (issue 28, item 5); a row whose spread of paired rounds crosses its
target is "noisy", and every row carries its load (issue 48, item 4)."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest

from bench import common
from bench.common import (
    Row,
    meets,
    paired_rates,
    paired_ratios,
    render,
    stamp,
    summary,
    target_bound,
)


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


def paired(target: str, rounds: list[float], ok: bool | None = None) -> Row:
    """A paired row whose ratio is the median of ``rounds``."""
    ratio = sorted(rounds)[len(rounds) // 2]
    return Row(
        "r",
        1.0,
        "tok/s",
        target,
        meets(target, ratio) if ok is None else ok,
        1.0,
        ratio,
        rounds=rounds,
    )


def test_spread_is_the_interquartile_range_of_the_rounds() -> None:
    row = paired("≥ 1.3×", [1.0, 2.0, 3.0, 4.0, 5.0])
    assert row.spread() == (2.0, 4.0)
    assert paired("≥ 1.3×", [1.5, 1.1, 1.9, 1.3]).spread() == pytest.approx((1.25, 1.6))
    assert Row("r", 1.0, "ms", "≤ 2 ms", True).spread() is None


@pytest.mark.parametrize(
    ("target", "rounds", "result"),
    [
        ("≥ 1.3×", [1.35, 1.4, 1.5, 1.6, 1.7], "pass"),  # IQR 1.4-1.6: all above
        ("≥ 1.3×", [1.0, 1.1, 1.2, 1.25, 1.5], "MISS"),  # IQR 1.1-1.25: all below
        ("≥ 1.3×", [1.0, 1.2, 1.35, 1.4, 1.5], "noisy"),  # IQR 1.2-1.4 crosses 1.3
        ("≥ 1.3×", [1.0, 1.25, 1.28, 1.3, 1.5], "noisy"),  # the top quartile meets it
        ("≥ 1.3×", [1.0, 1.3, 1.4, 1.5, 1.9], "pass"),  # the bottom quartile on the target
        ("≤ 1.15×", [1.0, 1.05, 1.1, 1.12, 1.3], "pass"),
        ("≤ 1.15×", [1.0, 1.1, 1.12, 1.2, 1.3], "noisy"),
        ("≤ 1.15×", [1.16, 1.2, 1.3, 1.4, 1.5], "MISS"),
        ("≥ 2×", [2.5], "pass"),  # one round: no spread to cross
    ],
)
def test_a_row_whose_spread_crosses_its_target_is_noisy(
    target: str, rounds: list[float], result: str
) -> None:
    assert paired(target, rounds).result == result


def test_results_of_rows_without_rounds_and_of_rows_that_do_not_apply() -> None:
    assert Row("r", 1.0, "ms", "≤ 2 ms", True).result == "pass"
    assert Row("r", 3.0, "ms", "≤ 2 ms", False).result == "MISS"
    assert Row("r", 3.0, "ms", "info", None).result == "info"
    # a target that is no plain ratio bound ("in 3 of 3 runs") is judged by ``ok`` alone
    row = Row("r", 1.0, "x", "≥ 1.3× in 3 of 3 runs", False, 1.0, 1.4, rounds=[1.2, 1.4, 1.5])
    assert row.result == "MISS"
    na = Row("bf16", math.nan, "tok/s", "≥ 1.3× in 3 of 3 runs", None, na="no AMX-BF16")
    assert na.result == "n/a: no AMX-BF16"


def test_target_parsing() -> None:
    assert target_bound("≥ 1.3×") == ("≥", 1.3)
    assert target_bound("≤ 1.15×") == ("≤", 1.15)
    assert target_bound("≥ 2×") == ("≥", 2.0)
    assert target_bound("≤ 50 ms") is None and target_bound("info") is None
    assert meets("≥ 1.3×", 1.3) and not meets("≥ 1.3×", 1.29)
    assert meets("≤ 1.15×", 1.15) and not meets("≤ 1.15×", 1.16)
    with pytest.raises(ValueError, match="not of the form"):
        meets("≤ 50 ms", 1.0)


def test_paired_ratios_pair_each_round() -> None:
    times = {"ours": [1.0, 2.0, 1.0], "raw": [2.0, 2.0, 4.0], "other": [1.0, 1.0, 1.0]}
    assert paired_ratios(times) == [2.0, 1.0, 4.0]
    work = {"ours": [10, 10, 10], "raw": [5, 10, 10], "other": [1, 1, 1]}
    assert paired_ratios(times, work) == [4.0, 1.0, 4.0]
    assert paired_ratios(times, sides=("other", "ours")) == [1.0, 2.0, 1.0]


def test_paired_rates_drop_the_warm_up_counts_and_pair_tokens_per_second() -> None:
    times = {"ours": [1.0, 2.0, 4.0], "raw": [2.0, 2.0, 2.0]}
    # one warm-up call each first (its counts are dropped), then one count per timed round
    counts = {"ours": [999, 10, 20, 40], "raw": [1, 5, 10, 40]}
    ratios, rates = paired_rates(times, counts)
    # ours 10, 10, 10 tok/s; raw 2.5, 5, 20 tok/s
    assert ratios == [4.0, 2.0, 0.5]
    assert rates == {"ours": 10.0, "raw": 5.0}
    with pytest.raises(ValueError):  # fewer counts than timed rounds
        paired_rates(times, {"ours": [10, 20], "raw": [5, 10, 40]})


def test_summary_counts_noisy_rows_apart_and_skips_rows_that_do_not_apply() -> None:
    good = paired("≥ 1.3×", [1.4, 1.5, 1.6])
    shaky = replace(paired("≥ 1.3×", [1.0, 1.35, 1.9]), metric="shaky")
    bad = replace(paired("≥ 2×", [1.0, 1.1, 1.2]), metric="bad")
    na = Row("bf16", math.nan, "tok/s", "≥ 1.3× in 3 of 3 runs", None, na="no AMX-BF16")
    assert summary([good, na]) == "pass: 1/1 targets met"
    assert summary([good, shaky, na]) == "noisy: 1/2 targets met; noisy: shaky"
    assert summary([good, shaky, bad]) == "MISS: 1/3 targets met; missed: bad; noisy: shaky"
    table = render([good, shaky, na])
    assert "1.45–1.55×" in table and "noisy" in table and "n/a: no AMX-BF16" in table


def test_rows_carry_the_load_before_and_after(monkeypatch: pytest.MonkeyPatch) -> None:
    loads = iter([(3.5, 0.0, 0.0)])
    monkeypatch.setattr(common.os, "getloadavg", lambda: next(loads))
    kept = Row("kept", 1.0, "ms", "info", None, load=[0.1, 0.2])
    fresh, same = stamp([Row("fresh", 1.0, "ms", "info", None), kept], before=1.25)
    assert fresh.load == [1.25, 3.5] and same == kept
    assert "1.25→3.50" in render([fresh])
    assert Row(**json.loads(json.dumps(fresh.to_json()))) == fresh  # the JSON hand-off


def test_performance_doc_is_marked_generated_and_holds_the_table() -> None:
    from bench.perf_doc import COLUMNS, render_doc

    rows = [paired("≥ 1.3×", [1.4, 1.5, 1.6]), Row("a | b", 2.0, "ms", "info", None)]
    text = render_doc(rows, took=600.0, before=0.5, root=Path(__file__).parent)
    assert text.startswith("<!-- Generated by `make bench`")
    assert "Regenerate with `make bench`" in text.splitlines()[0]
    header = "| " + " | ".join(COLUMNS) + " |"
    table = text.splitlines()[text.splitlines().index(header) :]
    assert table[2].startswith("| r | 1.00 tok/s | 1.00 tok/s | 1.50× | 1.45–1.55× | ≥ 1.3× | pass")
    assert table[3].startswith("| a \\| b |")  # a pipe in a metric cannot split its row
    assert "took 10.0 min; 1-minute load 0.50 at the start" in text
    assert "pass: 1/1 targets met" in text
    assert "partial" not in text
    partial = render_doc(rows, 60.0, 0.5, Path(__file__).parent, "a partial run: --rounds 2")
    assert "- **a partial run: --rounds 2**: not the full `make bench`" in partial


def test_a_part_that_fails_is_a_miss_row_and_the_run_goes_on(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import subprocess

    from bench import headline

    ran: list[list[str]] = []

    def failing(command: list[str], **_: object) -> subprocess.CompletedProcess[str]:
        ran.append(command)
        return subprocess.CompletedProcess(command, 3)

    monkeypatch.setattr(headline.subprocess, "run", failing)
    (row,) = headline.run_part("threads", False, tmp_path, rounds=2)
    assert ran[0][-2:] == ["--rounds", "2"] and "threads" in ran[0]
    assert row.result == "MISS" and "exit status 3" in row.metric and row.load is not None


def test_the_gpu_section_is_rewritten_alone_from_the_recorded_run(tmp_path: Path) -> None:
    """``perf_doc --gpu``: the recorded gpu_check run replaces the doc's GPU section (or is
    appended to a doc without one); the CPU part stays byte for byte."""
    from bench.perf_doc import GPU_HEADING, gpu_section, rewrite_gpu_section

    results = tmp_path / "gpu_check.json"
    run = {
        "date": "2026-12-04 16:40 UTC",
        "device": "NVIDIA H200",
        "torch": "2.11.0+cu130",
        "transformers": "5.17.0",
        "commit": "abc1234",
        "wall_s": 48.8,
        "rows": [
            Row("bf16 parity", 1.0, "", "= 1", True).to_json(),
            Row("train tok/s", 42912.0, "tok/s", "info", None).to_json(),
            Row("loss distance", 8.0e-7, "", "≤ 0.02", True).to_json(),
        ],
    }
    results.write_text(json.dumps(run))
    cpu_part = "# Performance\n\n| row | ours |\n|---|---|\n| x | 1 |\n"
    for old in ("", f"\n{GPU_HEADING}\n\nan older run\n"):
        doc = tmp_path / "performance.md"
        doc.write_text(cpu_part + old)
        rewrite_gpu_section(doc, results)
        text = doc.read_text()
        assert text.startswith(cpu_part + "\n" + GPU_HEADING + "\n")
        assert "an older run" not in text
        assert "- 2026-12-04 16:40 UTC, commit abc1234, NVIDIA H200, torch 2.11.0+cu130" in text
        assert "| bf16 parity | 1.00 | — | — | = 1 | pass |" in text
        assert "| train tok/s | 42,912 tok/s | — | — | info | info |" in text
        assert "| loss distance | 8.0e-07 | — | — | ≤ 0.02 | pass |" in text  # not "0.00"
        assert "\npass: 2/2 targets met\n" in text and "[device.md](device.md)" in text
    assert "No run is recorded" in gpu_section(tmp_path / "missing.json")


def test_a_rewrite_keeps_the_hand_written_history(tmp_path: Path) -> None:
    """``make bench`` rewrites performance.md whole, but its dated "Measurements behind the
    design" section (moved out of architecture.md) is carried over word for word, before the
    GPU section; the real doc has one."""
    from bench.perf_doc import DOC, GPU_HEADING, HISTORY_HEADING, kept_history, write_doc

    history = f"{HISTORY_HEADING}\n\nOn 12-01 a step ran at 1.43× raw.\n"
    doc = tmp_path / "performance.md"
    doc.write_text(f"old table\n\n{history}\n{GPU_HEADING}\n\nold gpu\n", encoding="utf-8")
    assert kept_history(doc.read_text(encoding="utf-8")) == history
    write_doc(doc, [Row("r", 1.0, "ms", "info", None)], took=60.0, before=0.1)
    text = doc.read_text(encoding="utf-8")
    assert "old table" not in text and history in text
    assert text.index(HISTORY_HEADING) < text.index(GPU_HEADING)
    assert kept_history(text) == history
    assert "1.43× raw" in kept_history(DOC.read_text(encoding="utf-8"))


def test_burner_row_passes_on_the_better_count_or_on_the_ratio() -> None:
    """Issue 56's restated burner target: auto ran the better fixed count in ≥ 90% of its
    steps, or it reads ≥ 0.97× that count."""
    from bench.threads_row import THREADS_TARGET, best_count_share, threads_ok

    steps = [1] * 9 + [2]  # auto's thread count at each decode step
    assert best_count_share(steps, 1) == pytest.approx(0.9)
    assert best_count_share(steps, 2) == pytest.approx(0.1)
    assert best_count_share([], 1) == 0.0
    assert threads_ok(0.5, 0.9)  # picks right, however the noisy ratio reads
    assert threads_ok(0.97, 0.1)  # picks wrong but costs under 3%
    assert not threads_ok(0.96, 0.89)
    # not a plain ratio target: never "noisy", pass or MISS as threads_ok says
    assert target_bound(THREADS_TARGET) is None
    row = Row("r", 1.0, "tok/s", THREADS_TARGET, threads_ok(0.9, 0.95), 1.0, 0.9, rounds=[0.8, 1.0])
    assert row.result == "pass"


def test_the_gpu_section_names_the_checks_its_run_predates(tmp_path: Path) -> None:
    """A recorded run without the decode rows says so (they were added after it); a run
    with them does not."""
    from bench.perf_doc import gpu_section

    def run(*metrics: str) -> Path:
        path = tmp_path / "gpu_check.json"
        rows = [Row(m, 1.0, "", "info", None).to_json() for m in metrics]
        record = {"date": "d", "device": "NVIDIA H200", "torch": "t", "transformers": "x"}
        path.write_text(json.dumps({**record, "commit": "c", "wall_s": 1.0, "rows": rows}))
        return path

    old = gpu_section(run("bf16 parity"))
    assert "Not in this run: checks 7 and 8 (bench/gpu_decode.py" in old
    assert "--dry-run" in old
    new = gpu_section(run("bf16 parity", "decode tok/s, 0.47B, 1 streams"))
    assert "Not in this run" not in new
