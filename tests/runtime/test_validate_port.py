"""Parse once: the runtime turns ``lossFnConfig`` and ``adamParamsConfig`` into the port's typed
values (``LossConfig``, ``AdamHyperparams``) with one structural check and one set of messages,
and an engine receives those values, never the wire dicts."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import pytest
from testkit import forward_backward, stub_service

from localsession import vocab
from localsession.port import AdamHyperparams, EngineInputError, LossConfig, TrainingDatum
from localsession.port_commands import ForwardCommand, OptimCommand, TrainingCommand
from localsession.runtime import validate
from localsession.runtime.errors import ServiceError


def fb_request(config: Any = None, *, given: bool = True) -> dict[str, Any]:
    request = forward_backward(1, 7, loss="ppo")
    if given:
        request["operationConfig"]["forwardBackward"]["lossFnConfig"] = config
    return request


def step_request(params: Any) -> dict[str, Any]:
    return {"sequenceNumber": 1, "operationConfig": {"optimizerStep": {"adamParamsConfig": params}}}


def _forward(parsed: tuple[int, str, TrainingCommand]) -> ForwardCommand:
    command = parsed[2]
    assert isinstance(command, ForwardCommand)
    return command


def refusal(request: dict[str, Any], strict: bool = True) -> str:
    with pytest.raises(ServiceError) as err:
        validate.training_request(request, strict)
    assert err.value.code == vocab.ErrorCode.VALIDATION
    return err.value.message


def test_port_fields_are_the_vocabulary() -> None:
    assert tuple(f.name for f in dataclasses.fields(LossConfig)) == vocab.LOSS_CONFIG_KEYS
    fields = tuple(f.name for f in dataclasses.fields(AdamHyperparams))
    assert fields == tuple(vocab.ADAM_WIRE_KEYS.values())
    defaults = {f.name: f.default for f in dataclasses.fields(AdamHyperparams)}
    for wire, value in vocab.ADAM_DEFAULTS.items():
        assert defaults[vocab.ADAM_WIRE_KEYS[wire]] == value


def test_loss_config_leaves_the_runtime_typed() -> None:
    _, _, command = validate.training_request(
        fb_request({"clip_low_threshold": 0, "clip_high_threshold": 10}), True
    )
    assert isinstance(command, ForwardCommand) and command.kind == "forwardBackward"
    config = command.loss_config
    assert config is not None
    assert config == LossConfig(clip_low_threshold=0.0, clip_high_threshold=10.0)
    assert type(config.clip_low_threshold) is float and type(config.clip_high_threshold) is float
    assert config.bounds("ppo") == (0.0, 10.0)
    assert all(isinstance(d, TrainingDatum) for d in command.datums)
    half = _forward(validate.training_request(fb_request({"clip_high_threshold": 1.5}), True))
    assert half.loss_config is not None
    assert half.loss_config.bounds("ppo") == (0.8, 1.5)  # the loss's default low
    assert half.loss_config.bounds("cispo") == (0.0, 1.5)
    assert _forward(validate.training_request(fb_request(None), True)).loss_config is None
    assert _forward(validate.training_request(fb_request(given=False), True)).loss_config is None


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"clip_low_threshold": 1.5}, "clip_low_threshold=1.5 must be a number in [0.0, 1.0]"),
        ({"clip_low_threshold": -0.1}, "clip_low_threshold=-0.1 must be a number in [0.0, 1.0]"),
        ({"clip_high_threshold": 0.9}, "clip_high_threshold=0.9 must be a number in [1.0, 10.0]"),
        ({"clip_high_threshold": 11}, "clip_high_threshold=11 must be a number in [1.0, 10.0]"),
        ({"clip_high_threshold": True}, "clip_high_threshold=True must be a number in [1.0, 10.0]"),
        ({"clip_high_threshold": "2"}, "clip_high_threshold='2' must be a number in [1.0, 10.0]"),
        (
            {"clip_high_threshold": math.nan},
            "clip_high_threshold=nan must be a number in [1.0, 10.0]",
        ),
    ],
)
def test_loss_config_out_of_range_refused(config: dict[str, Any], message: str) -> None:
    assert refusal(fb_request(config)) == f"forwardBackward.lossFnConfig.{message}"


def test_loss_config_shape_refused_naming_the_keys() -> None:
    assert refusal(fb_request({"epsilon": 0.2})) == (
        "forwardBackward.lossFnConfig has unknown key 'epsilon'; the keys are "
        "clip_low_threshold and clip_high_threshold"
    )
    assert refusal(fb_request([0.8])) == (
        "forwardBackward.lossFnConfig must be an object like {'clip_low_threshold': 0.8}"
    )


def test_adam_params_leave_the_runtime_typed() -> None:
    wire = {
        "learningRate": 1e-4,
        "beta1": 0.8,
        "beta2": 0.9,
        "eps": 1e-7,
        "weightDecay": 0,
        "gradClipNorm": 1,
        "loraPlusLrRatio": 8,
    }
    _, _, command = validate.training_request(step_request(wire), True)
    assert isinstance(command, OptimCommand) and command.kind == "optimizerStep"
    hp = command.adam
    assert hp == AdamHyperparams(1e-4, 0.8, 0.9, 1e-7, 0.0, 1.0, 8.0)
    assert all(type(getattr(hp, f.name)) is float for f in dataclasses.fields(hp))
    only_lr = validate.training_request(step_request({"learningRate": 0.005}), True)[2]
    assert only_lr == OptimCommand(AdamHyperparams(learning_rate=0.005))  # SDK defaults


@pytest.mark.parametrize(
    ("params", "strict", "message"),
    [
        (None, False, "optimizerStep.adamParamsConfig is required (learningRate at least)"),
        ({}, False, "optimizerStep.adamParamsConfig.learningRate is required"),
        (
            {"learningRate": 1e-4, "momentum": 0.9},
            False,
            "optimizerStep.adamParamsConfig has unknown member 'momentum'",
        ),
        (
            {"learningRate": True},
            False,
            "optimizerStep.adamParamsConfig.learningRate must be a finite number",
        ),
        (
            {"learningRate": math.inf},
            False,
            "optimizerStep.adamParamsConfig.learningRate must be a finite number",
        ),
        (
            {"learningRate": 1e-4, "beta2": 1.0},
            True,
            "optimizerStep.adamParamsConfig.beta2=1.0 is outside the service range "
            "[0.0, 0.999999]; use a value in range, or run relaxed (strict=False / --relaxed)",
        ),
        (
            {"learningRate": 0},
            True,
            "optimizerStep.adamParamsConfig.learningRate must be greater than 0",
        ),
    ],
)
def test_adam_params_refused(params: Any, strict: bool, message: str) -> None:
    assert refusal(step_request(params), strict) == message


def test_relaxed_adam_params_reach_the_engine_which_judges_them() -> None:
    """Relaxed, the service range is lifted; what AdamW cannot run with fails in the engine."""
    command = validate.training_request(step_request({"learningRate": -1, "eps": 0}), False)[2]
    assert isinstance(command, OptimCommand)
    with pytest.raises(EngineInputError) as err:
        command.adam.check()
    assert str(err.value) == (
        "adam_params: `learningRate` must be >= 0, got -1.0; `eps` must be > 0, got 0.0"
    )


def test_the_engine_receives_port_values(tmp_path: Path) -> None:
    service, engines = stub_service(tmp_path)
    try:
        ops = [
            fb_request({"clip_low_threshold": 0.5}),
            forward_backward(2, 8),
            {**step_request({"learningRate": 0.002, "gradClipNorm": 2}), "sequenceNumber": 3},
        ]
        ops[0]["clientToken"] = "token-1"
        for request in ops:
            op = service.execute_training_operation("s1", request)["operationId"]
            assert service.wait_operation("s1", op, 10)
        assert engines[0].received == [
            LossConfig(clip_low_threshold=0.5),
            None,
            AdamHyperparams(learning_rate=0.002, grad_clip_norm=2.0),
        ]
    finally:
        service.close()
