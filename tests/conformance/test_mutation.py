"""``localsession conformance --selfcheck`` (conformance/mutation.py): the score line, a
defect of each dialect caught by its named test with the spec point it checks, an unknown
defect refused; the full run (every defect) in the integration tier; and the plugin's hint
when many tests skip for undeclared capabilities."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import pytest
from _runs import ROOT, env

from conformance.mutation import run_selfcheck, spec_of
from conformance.plugin import capability_hint


def _skip(reason: str) -> SimpleNamespace:
    return SimpleNamespace(longrepr=("file.py", 1, f"Skipped: {reason}"))


def test_a_defect_of_each_dialect_is_caught_by_its_named_test() -> None:
    pytest.importorskip("tinker")
    lines: list[str] = []
    assert run_selfcheck(["no_elementwise_loss", "lr_doubled"], lines.append) == 0
    text = "\n".join(lines)
    assert "caught sagemaker no_elementwise_loss" in text
    assert "by test_losses.py::test_cross_entropy_closed_form" in text
    assert "caught tinker    lr_doubled" in text
    assert "by test_tinker_optimizer.py::test_adamw_steps_follow_the_closed_form" in text
    assert "an element moved" in text  # the failure's own message, naming lr * F
    assert lines[-1] == "selfcheck: 2/2 planted defects caught (no --capabilities)"


def test_an_unknown_defect_is_refused_with_the_known_ones() -> None:
    lines: list[str] = []
    assert run_selfcheck(["no_such_defect"], lines.append) == 2
    assert "no planted defect no_such_defect; known: " in lines[0] and "lr_doubled" in lines[0]


def test_spec_of_reads_the_test_docstring() -> None:
    spec = spec_of("tinker", "test_tinker_optimizer.py::test_the_adapter_has_the_requested_rank[2]")
    assert spec.startswith("lora_config.py ``LoraConfig.rank``")


def test_the_hint_appears_when_many_tests_skip_for_undeclared_capabilities() -> None:
    undeclared = _skip("backend tinker does not declare capability 'lora.zero_init'")
    hint = capability_hint([undeclared] * 31, ran=80)  # the fakes with --capabilities=none
    assert hint is not None and "--capabilities=all" in hint and "31 tests skipped" in hint
    assert capability_hint([undeclared] * 4, ran=4) is None  # too few to matter
    assert capability_hint([undeclared] * 10, ran=90) is None  # a tenth
    surface = _skip("backend x does not declare capability 'surface.sagemaker' (SageMaker-only)")
    assert capability_hint([surface] * 50, ran=3) is None  # another surface's tests


@pytest.mark.integration
@pytest.mark.slow
def test_every_planted_defect_is_caught() -> None:
    """The whole mutation run through the CLI (about 3 minutes on 2 idle cores)."""
    pytest.importorskip("tinker")
    done = subprocess.run(
        [sys.executable, "-m", "localsession", "conformance", "--selfcheck"],
        cwd=ROOT, env={**env(), "PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
        timeout=3600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-5000:]
    last = done.stdout.strip().splitlines()[-1]
    caught, planted = last.split()[1].split("/")
    assert caught == planted and int(planted) >= 30, last
