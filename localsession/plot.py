"""``localsession plot RUN_DIR``: draw a run's ``metrics.jsonl`` as one PNG that tells its story.

matplotlib is an optional extra (``pip install 'localsession[plot]'``); without it,
:func:`plot_run` raises :class:`PlotUnavailable` whose message says how to install it.

Which panels, in which order, is a pure function of the curves (:func:`choose_panels`):

- first row, did it learn: the training reward (``reward``, ``accuracy``, ``pass_rate``, ...),
  the held-out evaluations (``eval_*``, ``held_out_*``) and the loss;
- second row, what it cost: seconds, tokens and tokens/s per step;
- then every other metric, one panel each.

An evaluation (a held-out metric, or any metric logged at no more than half the run's steps)
is drawn as marked points with their values, never joined by a line: "before" and "after"
are two measurements, not a trend. A series whose values never vary (a ``clipfrac`` of 0 all
run) is left out, except an evaluation, where "no change" is the result. Records carrying a
``phase`` (e.g. ``sft`` then ``grpo``) are separate series, so the phases read apart.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from localsession import vocab
from localsession.metrics import read_metrics

INSTALL_HINT = (
    "plotting needs matplotlib, an optional extra: pip install 'localsession[plot]' "
    "(or pip install matplotlib)"
)
#: Clocks, not metrics: ``time`` (the logger's) and ``seconds`` (elapsed since the loop began).
_SKIP = {"step", "time", "seconds"}
_HELD_OUT = ("eval_", "held_out_")
_REWARD_WORDS = ("reward", "accuracy", "pass_rate", "agreement")
COLUMNS = 3
#: The rows, in order: what the run learned, what it cost, everything else.
OUTCOME, COST, OTHER = 0, 1, 2

Curves = dict[str, dict[str, list[tuple[float, float]]]]


class PlotUnavailable(RuntimeError):
    """matplotlib is not installed."""


@dataclass(frozen=True)
class Line:
    """One series of a panel: ``marked`` ones are drawn as points with their values."""

    label: str
    points: tuple[tuple[float, float], ...]
    marked: bool


@dataclass(frozen=True)
class Panel:
    title: str
    row: int  # OUTCOME, COST or OTHER
    lines: tuple[Line, ...]


def series(records: list[dict[str, Any]]) -> Curves:
    """metric -> phase -> [(step, value)], numeric values only, in file order."""
    out: Curves = {}
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


def _held_out(name: str) -> bool:
    return name.startswith(_HELD_OUT)


def _short(name: str) -> str:
    for prefix in _HELD_OUT:
        name = name.removeprefix(prefix)
    return name.removesuffix("_per_s").replace("_", " ") + ("/s" if name.endswith("_per_s") else "")


def _is_fraction(lines: list[Line]) -> bool:
    return all(0.0 <= y <= 1.0 for line in lines for _, y in line.points)


def _merge_equal(lines: list[Line]) -> list[Line]:
    """Series with the same points are drawn once, labelled ``a = b``."""
    out: list[Line] = []
    for line in lines:
        twin = next((i for i, kept in enumerate(out) if kept.points == line.points), None)
        if twin is None:
            out.append(line)
        else:
            kept = out[twin]
            out[twin] = Line(f"{kept.label} = {line.label}", kept.points, kept.marked)
    return out


def choose_panels(curves: Curves) -> list[Panel]:
    """The figure's panels, in reading order (see the module docstring for the rules)."""
    run_steps = {x for phases in curves.values() for pts in phases.values() for x, _ in pts}
    by_metric: dict[str, list[Line]] = {}
    for name, phases in curves.items():
        for phase, points in phases.items():
            marked = _held_out(name) or 2 * len(points) <= len(run_steps)
            flat = len(points) > 1 and len({y for _, y in points}) == 1
            if flat and not _held_out(name):
                continue
            label = _short(name) + (f" ({phase})" if phase and len(phases) > 1 else "")
            by_metric.setdefault(name, []).append(Line(label, tuple(points), marked))

    panels: list[Panel] = []

    def take(title: str, row: int, test: Callable[[str], bool], share: bool = True) -> None:
        names = [n for n in sorted(by_metric) if test(n)]
        groups = [names] if share else [[n] for n in names]
        for group in groups:
            lines = _merge_equal([line for n in group for line in by_metric.pop(n)])
            if lines:
                panels.append(Panel(title or _short(group[0]), row, tuple(lines)))

    take(
        "training reward",
        OUTCOME,
        lambda n: not _held_out(n) and any(w in n for w in _REWARD_WORDS),
    )
    held = [n for n in sorted(by_metric) if _held_out(n)]
    fractions = [n for n in held if _is_fraction(by_metric[n])]
    take("held-out", OUTCOME, lambda n: n in fractions)  # accuracies share one panel
    take("", OUTCOME, _held_out, share=False)  # a held-out loss or KL keeps its own scale
    take("", OUTCOME, lambda n: n == vocab.Metric.LOSS or n.endswith("_loss"), share=False)
    take("seconds per step", COST, lambda n: n.endswith("seconds"))
    take("tokens per step", COST, lambda n: n.endswith("_tokens"))
    take("tokens/s", COST, lambda n: n.endswith("per_s"))
    take("", OTHER, lambda n: True, share=False)
    return panels


def _grid(panels: list[Panel]) -> list[list[Panel]]:
    """Rows of the figure: each of OUTCOME, COST, OTHER starts a new row, COLUMNS wide."""
    rows: list[list[Panel]] = []
    for row in (OUTCOME, COST, OTHER):
        mine = [p for p in panels if p.row == row]
        rows += [mine[i : i + COLUMNS] for i in range(0, len(mine), COLUMNS)]
    return rows


def _draw(ax: Any, panel: Panel, first: float, last: float) -> None:
    from matplotlib.ticker import MaxNLocator

    ticks: set[float] = set()
    fraction = _is_fraction(list(panel.lines))
    for line in panel.lines:
        xs, ys = zip(*line.points, strict=True)
        if line.marked:
            drawn = ax.plot(xs, ys, linestyle="none", marker="o", markersize=7, label=line.label)
            for x, y in line.points:
                ax.annotate(
                    f"{y:.2f}" if fraction else f"{y:.3g}",
                    (x, y),
                    textcoords="offset points",
                    xytext=(6, 4),
                    fontsize=8,
                    color=drawn[0].get_color(),
                )
            ticks |= set(xs)
        else:
            ax.plot(xs, ys, marker="." if len(xs) < 30 else None, label=line.label)
    if ticks and all(line.marked for line in panel.lines):
        names = {first: "before", last: "after"} if first != last else {}
        marks = sorted(ticks)
        ax.set_xticks(marks, [f"{x:g}\n{names[x]}" if x in names else f"{x:g}" for x in marks])
        ax.set_xlim(first - 0.08 * (last - first or 1), last + 0.25 * (last - first or 1))
    else:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    if panel.row == OUTCOME and fraction:
        ax.set_ylim(-0.03, 1.08)
    ax.set_title(panel.title, fontsize=10)
    ax.set_xlabel("step", fontsize=8)
    ax.tick_params(labelsize=8)
    if len(panel.lines) > 1 or panel.lines[0].label != panel.title:
        ax.legend(fontsize=7)


def plot_run(run_dir: str | Path, out: str | Path | None = None) -> Path:
    """Write the PNG (default ``<run_dir>/metrics.png``) and return its path."""
    curves = series(read_metrics(run_dir))
    panels = choose_panels(curves)
    if not panels:
        raise ValueError(f"{run_dir}: metrics.jsonl has no varying numeric metric to plot")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise PlotUnavailable(INSTALL_HINT) from exc
    steps = [x for phases in curves.values() for pts in phases.values() for x, _ in pts]
    rows = _grid(panels)
    fig, axes = plt.subplots(
        len(rows), COLUMNS, figsize=(4.6 * COLUMNS, 3.1 * len(rows)), squeeze=False
    )
    fig.set_layout_engine("constrained")
    for ax_row, panel_row in zip(axes, rows, strict=True):
        for ax, panel in zip(ax_row, panel_row, strict=False):
            _draw(ax, panel, min(steps), max(steps))
        for ax in ax_row[len(panel_row) :]:
            ax.axis("off")
    fig.suptitle(Path(run_dir).resolve().name, fontsize=11)
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
