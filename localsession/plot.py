"""``localsession plot RUN_DIR``: draw a run's ``metrics.jsonl`` curves into one PNG.

matplotlib is an optional extra (``pip install 'localsession[plot]'``); without it,
:func:`plot_run` raises :class:`PlotUnavailable` whose message says how to install it.
One panel per numeric metric, against ``step``; records carrying a ``phase`` (e.g. ``sft``
then ``grpo``) are drawn as separate lines so the phases read apart.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from localsession.metrics import read_metrics

INSTALL_HINT = (
    "plotting needs matplotlib, an optional extra: pip install 'localsession[plot]' "
    "(or pip install matplotlib)"
)
_SKIP = {"step", "time"}


class PlotUnavailable(RuntimeError):
    """matplotlib is not installed."""


def series(records: list[dict[str, Any]]) -> dict[str, dict[str, list[tuple[float, float]]]]:
    """metric -> phase -> [(step, value)], numeric values only, in file order."""
    out: dict[str, dict[str, list[tuple[float, float]]]] = {}
    for record in records:
        phase = str(record.get("phase", ""))
        for key, value in record.items():
            if key in _SKIP or isinstance(value, (str, bool)) or value is None:
                continue
            if isinstance(value, (int, float)) and math.isfinite(value):
                out.setdefault(key, {}).setdefault(phase, []).append(
                    (float(record["step"]), float(value))
                )
    return out


def plot_run(run_dir: str | Path, out: str | Path | None = None) -> Path:
    """Write the PNG (default ``<run_dir>/metrics.png``) and return its path."""
    curves = series(read_metrics(run_dir))
    if not curves:
        raise ValueError(f"{run_dir}: metrics.jsonl has no numeric metrics to plot")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise PlotUnavailable(INSTALL_HINT) from exc
    cols = min(3, len(curves))
    rows = math.ceil(len(curves) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.5 * cols, 3.0 * rows), squeeze=False)
    for ax, (name, phases) in zip(axes.flat, sorted(curves.items()), strict=False):
        for phase, points in phases.items():
            xs, ys = zip(*points, strict=True)
            ax.plot(xs, ys, marker="." if len(xs) < 30 else None, label=phase or None)
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("step", fontsize=8)
        if len(phases) > 1:
            ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(curves) :]:
        ax.axis("off")
    fig.suptitle(Path(run_dir).name, fontsize=10)
    fig.tight_layout()
    target = Path(out) if out is not None else Path(run_dir) / "metrics.png"
    fig.savefig(target, dpi=100)
    plt.close(fig)
    return target


def cli(run_dir: str, out: str | None = None) -> int:
    """``localsession plot RUN_DIR [--out PNG]``: 0 on success, 1 with a message otherwise."""
    import sys

    try:
        print(f"wrote {plot_run(run_dir, out)}")
    except PlotUnavailable as exc:
        print(f"localsession plot: {exc}", file=sys.stderr)
        return 1
    except (FileNotFoundError, ValueError) as exc:
        print(f"localsession plot: {exc}", file=sys.stderr)
        return 1
    return 0
