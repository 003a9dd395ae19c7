"""The examples' metric log (metrics.jsonl) and ``localsession plot RUN_DIR``."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

from localsession.cli import main as cli_main
from localsession.metrics import MetricsLogger, read_metrics
from localsession.plot import INSTALL_HINT, series


def write_run(run_dir: Path) -> None:
    with MetricsLogger(run_dir, config={"steps": 3}, mirrors=False) as log:
        log.log(0, phase="sft", loss=2.0)
        log.log(1, phase="sft", loss=1.0, note="x" * 100)
        log.log(1, phase="grpo", reward=0.25, kl_sample_train=float("nan"), done=True)
        log.log(2, phase="grpo", reward=0.5, kl_sample_train=0.01)


def test_jsonl_round_trip_and_non_finite_values(tmp_path: Path) -> None:
    write_run(tmp_path)
    records = read_metrics(tmp_path)
    assert [r["step"] for r in records] == [0, 1, 1, 2]
    assert records[2]["kl_sample_train"] is None  # NaN is written as null: the line stays JSON
    assert records[2]["done"] == 1 and "note" not in records[1]
    assert all(r["time"] >= 0 for r in records)
    assert json.loads((tmp_path / "config.json").read_text()) == {"steps": 3}
    curves = series(records)
    assert curves["loss"] == {"sft": [(0.0, 2.0), (1.0, 1.0)]}
    assert curves["kl_sample_train"] == {"grpo": [(2.0, 0.01)]}


def test_missing_run_dir_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert cli_main(["plot", str(tmp_path / "nope")]) == 1
    assert "no metrics" in capsys.readouterr().err


def test_plot_without_matplotlib_says_how_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    write_run(tmp_path)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    assert cli_main(["plot", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert INSTALL_HINT in err and "localsession[plot]" in err
    assert not (tmp_path / "metrics.png").exists()


def test_plot_writes_a_png(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="the optional `plot` extra is not installed")
    write_run(tmp_path)
    assert cli_main(["plot", str(tmp_path)]) == 0
    png = (tmp_path / "metrics.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 1000


def test_logger_keeps_every_value_finite_or_null(tmp_path: Path) -> None:
    with MetricsLogger(tmp_path, mirrors=False) as log:
        record = log.log(5, a=math.inf, b=-math.inf, c=1)
    assert record == {"step": 5, "time": record["time"], "a": None, "b": None, "c": 1.0}
