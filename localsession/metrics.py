"""Per-step metrics of a training run: a JSONL file in the run directory, plus optional
MLflow / TensorBoard mirrors when those packages are installed (never required).

Each line of ``<run_dir>/metrics.jsonl`` is one JSON object: ``step``, ``time`` (seconds since
the logger opened) and the numbers logged at that step, e.g.::

    {"step": 3, "time": 12.4, "phase": "grpo", "loss": -0.8, "reward": 0.42, "tokens_per_s": 910}

Non-numeric values other than short strings are dropped; NaN and infinities are written as
``null`` so every line stays valid JSON. ``localsession plot RUN_DIR`` draws the curves.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from types import TracebackType
from typing import Any

METRICS_FILE = "metrics.jsonl"


def _clean(value: Any) -> Any:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, (int, float)):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, str) and len(value) <= 64:
        return value
    return None


class MetricsLogger:
    """Appends one JSON line per ``log`` call; mirrors numbers to MLflow / TensorBoard."""

    def __init__(
        self, run_dir: str | Path, *, config: dict[str, Any] | None = None, mirrors: bool = True
    ) -> None:
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.path = self.run_dir / METRICS_FILE
        self._file = self.path.open("a", encoding="utf-8")
        self._start = time.perf_counter()
        self._mirrors: list[Any] = _open_mirrors(self.run_dir, config or {}) if mirrors else []
        if config is not None:
            (self.run_dir / "config.json").write_text(json.dumps(config, indent=2, default=str))

    def log(self, step: int, **metrics: Any) -> dict[str, Any]:
        """Write one line; returns the record as written."""
        record: dict[str, Any] = {"step": int(step)}
        record["time"] = round(time.perf_counter() - self._start, 3)
        for key, value in metrics.items():
            cleaned = _clean(value)
            if cleaned is not None or isinstance(value, float):
                record[key] = cleaned
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()
        numbers = {k: v for k, v in record.items() if isinstance(v, float) and k != "time"}
        for mirror in self._mirrors:
            mirror.log(step, numbers)
        return record

    def close(self) -> None:
        self._file.close()
        for mirror in self._mirrors:
            mirror.close()

    def __enter__(self) -> MetricsLogger:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def read_metrics(run_dir: str | Path) -> list[dict[str, Any]]:
    """The records of ``<run_dir>/metrics.jsonl`` (or of that file, if given directly)."""
    path = Path(run_dir)
    if path.is_dir():
        path = path / METRICS_FILE
    if not path.exists():
        raise FileNotFoundError(f"no metrics at {path}: run an example with --run-dir first")
    with path.open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


class _TensorBoard:
    def __init__(self, run_dir: Path) -> None:
        from torch.utils.tensorboard import SummaryWriter  # needs the tensorboard package

        self.writer = SummaryWriter(log_dir=str(run_dir / "tensorboard"))

    def log(self, step: int, numbers: dict[str, float]) -> None:
        for key, value in numbers.items():
            self.writer.add_scalar(key, value, step)

    def close(self) -> None:
        self.writer.close()


class _MLflow:
    def __init__(self, run_dir: Path, config: dict[str, Any]) -> None:
        import mlflow

        self.mlflow = mlflow
        mlflow.start_run(run_name=run_dir.name)
        mlflow.log_params({k: str(v)[:250] for k, v in config.items()})

    def log(self, step: int, numbers: dict[str, float]) -> None:
        safe = {k.replace("/", "_"): v for k, v in numbers.items()}
        self.mlflow.log_metrics(safe, step=step)

    def close(self) -> None:
        self.mlflow.end_run()


def _open_mirrors(run_dir: Path, config: dict[str, Any]) -> list[Any]:
    """Whichever of TensorBoard and MLflow is installed; any failure just skips that one."""
    import importlib.util

    mirrors: list[Any] = []
    if importlib.util.find_spec("tensorboard") is not None:
        try:
            mirrors.append(_TensorBoard(run_dir))
        except Exception:  # noqa: BLE001 - an optional mirror never breaks a run
            pass
    if importlib.util.find_spec("mlflow") is not None:
        try:
            mirrors.append(_MLflow(run_dir, config))
        except Exception:  # noqa: BLE001
            pass
    return mirrors
