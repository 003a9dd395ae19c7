"""Smoke run of every benchmark at tiny sizes, so the bench scripts do not rot.

Each ``bench/bench_*.py`` is imported and its ``collect(smoke=True)`` run once (tiny model,
one repetition): it must finish and return well-formed rows. So is every part of
bench/headline.py (``make bench``'s rows). The numbers are not judged here (smoke sizes say
nothing about performance); ``make bench`` does that.
"""

from __future__ import annotations

import importlib
import math
from pathlib import Path

import pytest

from bench.common import Row, render
from bench.headline import PARTS
from bench.run_all import scripts

BENCHES = [p.stem for p in scripts()]
#: Smoke runs of 15-30 s each (two SDKs' GRPO loops, fresh interpreters): `make test-slow`.
SLOW_SMOKES = {"bench_tinker", "bench_fakes", "bench_mock"}


def test_every_bench_script_is_covered() -> None:
    assert {
        "bench_training",
        "bench_sampling",
        "bench_checkpoints",
        "bench_server",
        "bench_fakes",
    } <= set(BENCHES)


@pytest.mark.parametrize(
    "name",
    [pytest.param(n, marks=pytest.mark.slow) if n in SLOW_SMOKES else n for n in BENCHES],
)
def test_bench_smoke(name: str) -> None:
    module = importlib.import_module(f"bench.{name}")
    rows = module.collect(smoke=True)
    assert rows, f"{name} returned no rows"
    well_formed(rows)


def well_formed(rows: list[Row]) -> None:
    """What every smoke row must be: finite (unless n/a), targeted, JSON-safe, in the table."""
    for row in rows:
        assert isinstance(row, Row)
        assert math.isfinite(row.ours) or row.na is not None, row
        assert row.target, row
        assert row == Row(**row.to_json())  # survives the JSON hand-off to run_all
        assert row.load is None or len(row.load) == 2, row
    table = render(rows)
    assert all(row.metric in table for row in rows)
    assert table.splitlines()[-1].startswith(("pass", "MISS", "noisy"))


#: Parts whose smoke run takes minutes on a busy box (four packages saved and sampled, four
#: peft merges for the raw side): `make test-slow`. The engine's multi-adapter batches are
#: tested in the default tier (tests/engine/test_multi_lora.py).
SLOW_PARTS = {"adapters"}


@pytest.mark.parametrize(
    "part", [pytest.param(p, marks=pytest.mark.slow) if p in SLOW_PARTS else p for p in PARTS]
)
def test_headline_smoke(part: str) -> None:
    """Every part of ``make bench``, measured (a burner runs beside the threads part; the
    bf16 part runs even without AMX-BF16, its row then n/a), each row with its load."""
    if part == "prefix":
        pytest.importorskip("bench.bench_prefix", reason="bench/bench_prefix.py not landed")
    headline = importlib.import_module("bench.headline")
    rows = headline.collect(smoke=True, only=[part])
    assert rows, part
    assert all(row.load is not None for row in rows)
    assert all(row.rounds for row in rows if part != "prefix")
    well_formed(rows)


def test_gpu_check_skips_cleanly_without_cuda(capsys: pytest.CaptureFixture[str]) -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present: gpu_check runs for real (make bench on a GPU)")
    module = importlib.import_module("bench.gpu_check")
    assert module.main([]) == 0
    assert "skip" in capsys.readouterr().out.lower()


def test_bench_dir_is_where_run_all_looks() -> None:
    assert all(Path(p).parent.name == "bench" for p in scripts())


def test_gpu_check_dry_run_exercises_every_check_on_the_cpu(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``--dry-run``: parity, throughput and the shared base at toy sizes on the CPU, ending
    in the one table (the numbers mean nothing; the script's logic is what is checked)."""
    module = importlib.import_module("bench.gpu_check")
    assert module.main(["--dry-run", "--no-real"]) == 0
    out = capsys.readouterr().out
    table = out[out.index("gpu_check on cpu (dry run)") :]
    metrics = ("bf16 parity", "train bf16 tok/s", "sessions sharing one base", "wall time")
    for metric in (*metrics, "tinker SDK step on serve", "prefix shared vs unshared"):
        assert metric in table, metric
    assert table.rstrip().splitlines()[-1].startswith("pass")
    decode_rows_are_well_formed(module.ROWS)


def decode_rows_are_well_formed(rows: list[Row]) -> None:
    """bench/gpu_decode.py's dry-run rows: per model and stream count a speed row (ours vs
    ``generate``, the larger counts under the ≥ 4× target, n/a on the CPU) and a bandwidth
    row whose bytes are the hand-computed ones (test_gpu_decode.py), then the GRPO row."""
    speed = [r for r in rows if r.metric.startswith("decode tok/s")]
    bandwidth = [r for r in rows if r.metric.startswith("decode % of the bandwidth limit")]
    assert [r.metric.split(",")[1].strip() for r in speed] == ["0.47B"] * 2 + ["1.1B"] * 2
    assert len(bandwidth) == len(speed) == 4
    for row in speed:
        assert row.baseline is not None and row.baseline > 0 and row.ratio is not None
        assert row.ratio == pytest.approx(row.ours / row.baseline)
    assert [r.target for r in speed] == ["info", "≥ 4×"] * 2
    assert [r.result for r in speed] == ["info", "n/a: dry run"] * 2
    assert [r.target for r in bandwidth] == ["info", "≥ 10 %", "info", "info"]
    assert bandwidth[1].result == "n/a: dry run"
    # 0.47B's dry model (tests/bench/test_gpu_decode.py by hand): 4 streams, prompt 8,
    # 3 new tokens read 17,607,168 bytes
    assert "4 streams: 0.0176 GB at" in bandwidth[1].metric
    # a positive share, unless the toy decode was too quick to time on a loaded box
    assert all(0 < r.ours < float("inf") or r.na is not None for r in bandwidth)
    graphs = [r for r in rows if r.metric.startswith("decode steps as CUDA graphs")]
    assert [r.result for r in graphs] == ["n/a: dry run"] * 2
    assert all("step kinds ['eager']" in r.metric for r in graphs)  # a CPU's steps
    (grpo,) = [r for r in rows if r.metric.startswith("GRPO step end to end")]
    assert "0.47B, 2 prompts × 2 samples of 4 tokens" in grpo.metric
    assert grpo.unit == "s" and grpo.ours > 0


def test_gpu_check_a_check_that_raises_fails_its_row_and_the_rest_still_run(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """On a lent machine one crash must not lose the other checks: the broken check is a
    failing row naming its error, the later checks still print their rows, and the exit
    status is 1."""
    module = importlib.import_module("bench.gpu_check")
    gpu_decode = importlib.import_module("bench.gpu_decode")

    def broken(steps: int) -> bool:
        raise RuntimeError("planted parity failure")

    monkeypatch.setattr(module, "parity", broken)
    # the decode checks' own dry run is the test above's (they are the slowest on the CPU)
    monkeypatch.setattr(gpu_decode, "decode_check", lambda accel, rows, label: True)
    monkeypatch.setattr(gpu_decode, "grpo_check", lambda accel, rows: None)
    assert module.main(["--dry-run", "--no-real"]) == 1
    out = capsys.readouterr()
    assert "planted parity failure" in out.err  # the traceback
    table = out.out[out.out.index("gpu_check on cpu (dry run)") :]
    assert "bf16 parity: raised RuntimeError: planted parity failure" in table
    for metric in ("train bf16 tok/s", "tinker SDK step on serve", "prefix shared vs unshared"):
        assert metric in table, metric
    assert table.rstrip().splitlines()[-1].startswith("MISS")
