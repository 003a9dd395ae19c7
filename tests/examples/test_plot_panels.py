"""Which panels ``localsession plot`` draws, and in which order (issue 49, item 6): a pure
function of the curves, checked here on hand-written inputs."""

from __future__ import annotations

from pathlib import Path

import pytest

from localsession.metrics import MetricsLogger
from localsession.plot import COST, OTHER, OUTCOME, Curves, Panel, choose_panels, plot_run


def _steps(values: list[float], start: int = 1) -> list[tuple[float, float]]:
    return [(float(start + i), v) for i, v in enumerate(values)]


def grpo_run() -> Curves:
    """A 4-step GRPO run as the demo logs it: held-out accuracy at steps 0 and 4 only."""
    return {
        "reward": {"grpo": _steps([0.1, 0.3, 0.4, 0.6])},
        "accuracy": {"grpo": _steps([0.1, 0.3, 0.4, 0.6])},  # the same numbers as reward
        "eval_accuracy": {"grpo": [(0.0, 0.0), (4.0, 0.22)]},
        "eval_greedy_accuracy": {"grpo": [(0.0, 0.12), (4.0, 0.6)]},
        "loss": {"grpo": _steps([0.5, 0.2, -0.1, 0.05])},
        "clipfrac": {"grpo": _steps([0.0, 0.0, 0.0, 0.0])},  # never varies
        "sample_seconds": {"grpo": _steps([3.0, 2.5, 2.6, 2.4])},
        "train_seconds": {"grpo": _steps([9.0, 8.0, 8.5, 8.2])},
        "sampled_tokens": {"grpo": _steps([700.0, 650.0, 520.0, 480.0])},
        "prefill_tokens": {"grpo": _steps([180.0, 180.0, 180.0, 180.0])},  # never varies
        "train_tokens_per_s": {"grpo": _steps([100.0, 110.0, 105.0, 108.0])},
        "grad_norm": {"grpo": _steps([1.0, 0.8, 0.9, 0.7])},
        "kl_sample_train": {"grpo": _steps([0.001, 0.002, 0.001, 0.003])},
    }


def _titles(panels: list[Panel]) -> list[tuple[int, str]]:
    return [(p.row, p.title) for p in panels]


def _labels(panels: list[Panel]) -> set[str]:
    return {line.label for p in panels for line in p.lines}


def test_reward_and_held_out_first_cost_second_the_rest_after() -> None:
    assert _titles(choose_panels(grpo_run())) == [
        (OUTCOME, "training reward"),
        (OUTCOME, "held-out"),
        (OUTCOME, "loss"),
        (COST, "seconds per step"),
        (COST, "tokens per step"),
        (COST, "tokens/s"),
        (OTHER, "grad norm"),
        (OTHER, "kl sample train"),
    ]


def test_series_that_never_vary_are_left_out() -> None:
    labels = _labels(choose_panels(grpo_run()))
    assert "clipfrac" not in labels and "prefill tokens" not in labels
    assert "sampled tokens" in labels  # its neighbour in the same panel stays


def test_held_out_accuracy_is_two_marked_points_not_a_line() -> None:
    held = next(p for p in choose_panels(grpo_run()) if p.title == "held-out")
    assert [(line.label, line.points, line.marked) for line in held.lines] == [
        ("accuracy", ((0.0, 0.0), (4.0, 0.22)), True),
        ("greedy accuracy", ((0.0, 0.12), (4.0, 0.6)), True),
    ]
    training = next(p for p in choose_panels(grpo_run()) if p.title == "training reward")
    assert [line.marked for line in training.lines] == [False]


def test_equal_series_are_drawn_once_under_both_names() -> None:
    training = next(p for p in choose_panels(grpo_run()) if p.title == "training reward")
    assert [line.label for line in training.lines] == ["accuracy = reward"]


def test_a_flat_evaluation_is_kept_because_no_change_is_the_result() -> None:
    curves = {
        "loss": {"": _steps([2.0, 1.5, 1.2, 1.1])},
        "eval_greedy_accuracy": {"": [(0.0, 0.234), (4.0, 0.234)]},
    }
    held = choose_panels(curves)[0]
    assert held.title == "held-out" and held.lines[0].points == ((0.0, 0.234), (4.0, 0.234))


def test_a_held_out_loss_keeps_its_own_scale_and_phases_stay_apart() -> None:
    curves = {
        "loss": {"sft": _steps([3.0, 2.0], start=0), "grpo": _steps([0.4, 0.1], start=2)},
        "held_out_loss": {"": [(0.0, 5.9), (3.0, 3.7)]},
        "eval_accuracy": {"": [(0.0, 0.1), (3.0, 0.3)]},
    }
    panels = choose_panels(curves)
    assert _titles(panels) == [(OUTCOME, "held-out"), (OUTCOME, "loss"), (OUTCOME, "loss")]
    assert [line.label for line in panels[1].lines] == ["loss"]  # held_out_loss, own panel
    assert panels[1].lines[0].marked
    assert [line.label for line in panels[2].lines] == ["loss (sft)", "loss (grpo)"]


def test_a_metric_logged_at_few_steps_is_marked_points_whatever_its_name() -> None:
    curves = {
        "loss": {"": _steps([4.0, 3.0, 2.5, 2.2, 2.0, 1.9])},
        "probe": {"": [(3.0, 0.5), (6.0, 0.7)]},  # 2 of 6 steps: an evaluation
    }
    probe = next(p for p in choose_panels(curves) if p.title == "probe")
    assert probe.row == OTHER and probe.lines[0].marked


def test_a_run_with_nothing_that_varies_is_a_clear_error(tmp_path: Path) -> None:
    with MetricsLogger(tmp_path, mirrors=False) as log:
        for step in range(3):
            log.log(step, clipfrac=0.0)
    with pytest.raises(ValueError, match="no varying numeric metric"):
        plot_run(tmp_path)
