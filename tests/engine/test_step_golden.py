"""The training step's numbers do not move: a fresh fixed-seed record (step_golden.py) equals
the one main wrote before the step's refactor (issue 55 item 7), bit for bit.

Exact equality holds for float32 on the CPU with the torch version and CPU kernels the
fixture names; on another CPU or torch (other kernels, other rounding) the values are held
to 1e-5 relative instead, and the weights by their norms rather than their bytes.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from .step_golden import FIXTURE, environment, record


@pytest.fixture(scope="module")
def golden() -> dict[str, Any]:
    return json.loads(FIXTURE.read_text(encoding="utf-8"))  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def fresh() -> dict[str, Any]:
    return json.loads(json.dumps(record()))  # type: ignore[no-any-return]


def _close(a: Any, b: Any, where: str) -> None:
    """``a`` equals ``b`` within 1e-5 relative, through nested dicts and lists."""
    if isinstance(a, dict):
        assert sorted(a) == sorted(b), where
        for key in a:
            _close(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, list):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _close(x, y, f"{where}[{i}]")
    elif isinstance(a, float):
        assert a == pytest.approx(b, rel=1e-5, abs=1e-6), where
    else:
        assert a == b, where


def test_the_fixture_covers_every_loss_and_path(golden: dict[str, Any]) -> None:
    cases = golden["cases"]
    for loss in ("cross_entropy", "importance_sampling", "ppo", "cispo", "dro", "gspo"):
        assert len(cases[loss]["steps"]) == 2 and cases[loss]["weights_sha256"]
    assert {"ppo/shared_prefix", "cispo/chunked"} <= set(cases)
    # the paths differ from the plain one in rounding only: so each really ran
    plain, shared = cases["ppo"], cases["ppo/shared_prefix"]
    assert plain["weights_sha256"] != shared["weights_sha256"]
    assert cases["cispo"]["weights_sha256"] != cases["cispo/chunked"]["weights_sha256"]


@pytest.mark.parametrize(
    "case",
    [
        "cross_entropy",
        "importance_sampling",
        "ppo",
        "cispo",
        "ppo/shared_prefix",
        "cross_entropy/shared_prefix",
        "cispo/chunked",
        "cross_entropy/chunked",
        "dro",
        "gspo",
    ],
)
def test_a_fixed_seed_step_matches_the_recorded_numbers(
    golden: dict[str, Any], fresh: dict[str, Any], case: str
) -> None:
    want, got = golden["cases"][case], fresh[case]
    if golden["environment"] == environment():
        assert got == want  # every float, and every adapter tensor's bytes
        return
    got, want = dict(got), dict(want)
    got.pop("weights_sha256")
    want.pop("weights_sha256")
    _close(got, want, case)
