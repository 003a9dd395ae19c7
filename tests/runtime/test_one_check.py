"""One check of every dialect's commands (``runtime/commands.check``), worded per dialect.

The SageMaker wire is parsed into the same typed commands (``port_commands``) a dialect like
Tinker hands the runtime; both go through ``commands.check``, which raises the fact, and
each dialect words it: the typed entry points in the port's names, the SageMaker wire in its
own (the words its clients and conformance/reference record). Below the entry points the
runtime holds typed commands only: no module of ``runtime/sessions/`` writes a SageMaker key.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest
from testkit import create_request, forward_backward, stub_service

from localsession.port import AdamHyperparams, LossConfig, SampleRequest, TrainingDatum
from localsession.port_commands import (
    ForwardCommand,
    OptimCommand,
    SampleCommand,
    SaveCommand,
    SessionCommand,
)
from localsession.runtime import commands, sagemaker_wire
from localsession.runtime.commands import Fact, Refusal
from localsession.runtime.errors import ServiceError

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def service(tmp_path: Path) -> Any:
    service, _ = stub_service(tmp_path, gap_timeout=600.0, strict=True)
    yield service
    service.close()


def _forward(loss: str = "cross_entropy", config: LossConfig | None = None) -> ForwardCommand:
    return ForwardCommand([TrainingDatum([1], {"target_tokens": [0]})], loss, config)


def _wire(seq: int, kind: str, body: dict[str, Any]) -> dict[str, Any]:
    return {"sequenceNumber": seq, "operationConfig": {kind: body}}


def _sample_wire(**params: Any) -> dict[str, Any]:
    prompt = {"chunks": [{"tokens": [1, 2]}]}
    sample = {"prompt": prompt, "numSamples": 1, "samplingParams": {"maxTokens": 512, **params}}
    return {"operationConfig": {"sample": sample}}


def _refused(call: Any, *args: Any) -> str:
    with pytest.raises(ServiceError) as err:
        call(*args)
    assert err.value.code == "ValidationException"
    return str(err.value.message)


#: (SageMaker request, its typed twin, the SageMaker words, the typed words): one fact each.
TRAINING_CASES = [
    (
        _wire(1, "forwardBackward", {**forward_backward(1)["operationConfig"]["forwardBackward"],
                                     "lossFnConfig": {"clip_high_threshold": 11}}),
        _forward("ppo", LossConfig(clip_high_threshold=11)),
        "forwardBackward.lossFnConfig.clip_high_threshold=11 must be a number in [1.0, 10.0]",
        "loss_fn_config.clip_high_threshold=11 must be a number in [1.0, 10.0]",
    ),
    (
        _wire(1, "optimizerStep", {"adamParamsConfig": {"learningRate": 0.5}}),
        OptimCommand(AdamHyperparams(learning_rate=0.5)),
        "optimizerStep.adamParamsConfig.learningRate=0.5 is outside the service range "
        "[0.0, 0.01]; use a value in range, or run relaxed (strict=False / --relaxed)",
        "adam_params.learning_rate=0.5 is outside the service range [0.0, 0.01]; use a value "
        "in range, or run relaxed (strict=False / --relaxed)",
    ),
    (
        _wire(1, "saveState", {"description": "x" * 1025}),
        SaveCommand(checkpoint=True, description="x" * 1025),
        "saveState.description must be a string of Unicode text (no lone surrogates) of at "
        "most 1024 characters",
        "a package description is Unicode text (no lone surrogates) of at most 1024 characters",
    ),
    (  # JSON's "\ud800": accepted, it made the console's session detail a 500 for good
        _wire(1, "saveWeights", {"description": "ok \ud800"}),
        SaveCommand(checkpoint=False, description="ok \ud800"),
        "saveWeights.description must be a string of Unicode text (no lone surrogates) of at "
        "most 1024 characters",
        "a package description is Unicode text (no lone surrogates) of at most 1024 characters",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("wire", "typed", "sagemaker_words", "typed_words"), TRAINING_CASES)
def test_one_fact_reads_in_each_dialects_words(
    service: Any, wire: dict[str, Any], typed: Any, sagemaker_words: str, typed_words: str
) -> None:
    assert _refused(service.execute_training_operation, "s1", wire) == sagemaker_words
    assert _refused(service.submit_training, "s1", 2, typed) == typed_words


def test_the_lora_rank_and_sampling_facts_in_each_dialects_words(service: Any) -> None:
    big = create_request("big", rank=300)
    assert _refused(service.create_training_session, big) == (
        "LoraConfig.Rank=300 must be an integer in [1, 256]"
    )
    typed = SessionCommand("big", "localsession/tiny", rank=300, alpha=8)
    assert _refused(service.create_session, typed) == "LoRA rank 300 must be an integer in [1, 256]"
    sample = _sample_wire(topP=1.5)
    assert _refused(service.execute_sampling_operation, "s1", sample) == (
        "sample.samplingParams.topP=1.5 must be in [0, 1.0]"
    )
    typed_sample = SampleCommand(SampleRequest(prompt=[1, 2], top_p=1.5))
    assert _refused(service.submit_sample, "s1", typed_sample) == "top_p=1.5 must be in [0, 1]"


def test_every_path_goes_through_the_one_check(
    service: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A planted check that refuses everything refuses every command of both dialects, each
    in its own words: no path judges values by itself."""
    seen: list[str] = []

    def planted(command: Any, strict: bool) -> None:
        seen.append(type(command).__name__)
        raise Refusal(Fact.LOSS_FN, "planted")

    monkeypatch.setattr(commands, "check", planted)
    sm = _refused(service.execute_training_operation, "s1", forward_backward(1))
    assert sm.startswith("forwardBackward.lossFnName 'planted' is not one of")
    typed = _refused(service.submit_training, "s1", 2, _forward())
    assert typed.startswith("loss_fn 'planted' is not one of")
    assert _refused(service.execute_sampling_operation, "s1", _sample_wire()).startswith(
        "sample.lossFnName 'planted'"
    )
    assert _refused(
        service.submit_sample, "s1", SampleCommand(SampleRequest(prompt=[1]))
    ).startswith("loss_fn 'planted'")
    assert _refused(service.create_training_session, create_request("other")).startswith(
        "CreateTrainingSession.lossFnName 'planted'"
    )
    assert seen == [
        "ForwardCommand",
        "ForwardCommand",
        "SampleCommand",
        "SampleCommand",
        "SessionCommand",
    ]


def test_every_fact_has_both_dialects_words() -> None:
    fields = {
        Fact.LOSS_BOUND: "clip_low_threshold",
        Fact.DATUM_INPUT: "weights",
        Fact.ADAM_RANGE: "beta1",
        Fact.ADAM_RATE: "learning_rate",
        Fact.NOT_NEGATIVE: "temperature",
        Fact.TOO_HIGH: "top_p",
    }
    for fact in Fact:
        refusal = Refusal(fact, 7, field=fields.get(fact, ""), low=1, high=9)
        typed, wire = commands.words(refusal), sagemaker_wire.refusal(refusal, "forward")
        assert typed and wire, fact
        if fact not in (Fact.DATUM_TOKENS, Fact.DATUM_INPUT):  # the wire's datums are whole
            assert typed != wire, f"{fact}: the wire says its own field names"


# -- the runtime below its entry points writes no SageMaker key -----------------------------

#: The SageMaker wire's op-body, result and token-accounting keys.
SAGEMAKER_KEYS = frozenset(
    {
        "lossFnName",
        "lossFnConfig",
        "datumList",
        "adamParamsConfig",
        "mergeWeights",
        "loadOptimizer",
        "modelPackageArn",
        "samplingParams",
        "numSamples",
        "operationResult",
        "errorDetails",
        "tokenUsage",
        "trainingTokens",
        "PrefillTokenCount",
        "SampleTokenCount",
        "TrainingTokenCount",
    }
)
TYPED_RUNTIME = ("localsession/runtime/sessions", "localsession/runtime/commands.py")


def sagemaker_keys_written(root: Path, sources: tuple[str, ...] = TYPED_RUNTIME) -> list[str]:
    """``file:line: 'key'`` for each string constant in ``sources`` that is a SageMaker key."""
    found = []
    for source in sources:
        base = root / source
        paths = sorted(base.rglob("*.py")) if base.is_dir() else [base]
        for path in paths:
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Constant) and node.value in SAGEMAKER_KEYS:
                    where = path.relative_to(root).as_posix()
                    found.append(f"{where}:{node.lineno}: {node.value!r}")
    return found


def test_the_typed_runtime_writes_no_sagemaker_key() -> None:
    assert sagemaker_keys_written(ROOT) == [], (
        "the queue, run_op and the check hold typed commands; SageMaker keys are read by "
        "runtime/validate.py and written by runtime/sagemaker_wire.py only"
    )


def test_the_key_rule_finds_a_planted_violation(tmp_path: Path) -> None:
    sessions = tmp_path / "localsession" / "runtime" / "sessions"
    sessions.mkdir(parents=True)
    (tmp_path / "localsession" / "runtime" / "commands.py").write_text("x = 1\n")
    (sessions / "run_op.py").write_text("def f(op):\n    return op.body['datumList']\n")
    assert sagemaker_keys_written(tmp_path) == [
        "localsession/runtime/sessions/run_op.py:2: 'datumList'"
    ]


def test_a_relaxed_session_lifts_the_service_limits_but_not_top_p(tmp_path: Path) -> None:
    """Relaxed, the SageMaker wire's maxTokens floor and temperature ceiling are lifted (the
    check's strict limits); ``top_p`` above 1 is refused in both dialects alike."""
    service, _ = stub_service(tmp_path, strict=False)
    try:
        ok = service.execute_sampling_operation("s1", _sample_wire(maxTokens=3, temperature=3.0))
        assert service.wait_operation("s1", ok["operationId"], 60)
        assert _refused(service.execute_sampling_operation, "s1", _sample_wire(topP=1.5)) == (
            "sample.samplingParams.topP=1.5 must be in [0, 1.0]"
        )
    finally:
        service.close()
