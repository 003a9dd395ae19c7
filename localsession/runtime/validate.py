"""Synchronous request checks: what the service refuses with a 400 before queueing an op.

Structure (unions, required members, types, patterns, enums) is always checked. Service limits
(docs/wire.md#10: learning-rate ceiling, maxTokens floor, numSamples, ...) are checked in
strict mode only; ``strict=False`` lifts them (docs/semantics.md#4). Semantic problems the real
service only finds while running an op (missing loss keys, length mismatches) are left to the
engine, which fails the op instead (docs/semantics.md#4, rule 1).

Every message names the offending field and the fix.

Parse once: the SageMaker wire's requests leave here as the typed commands every dialect
hands the runtime (``port_commands``): a ``forward``/``forwardBackward`` as a
``ForwardCommand`` of :class:`~localsession.port.TrainingDatum` values (tokens concatenated,
inputs flattened) with its ``lossFnConfig`` as a :class:`~localsession.port.LossConfig`, an
``optimizerStep`` as an ``OptimCommand`` of :class:`~localsession.port.AdamHyperparams`, a
``sample`` as a ``SampleCommand``, a CreateTrainingSession as a ``SessionCommand``. This
module checks the wire's structure (members, types); the values (ranges, limits) are judged
by the one check of every dialect's commands (``commands.check``), whose refusals are worded
here in the wire's field names (``sagemaker_wire.refusal``). No engine reads a wire request
again.
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Any, TypeGuard

from localsession import vocab
from localsession.port import AdamHyperparams, LossConfig, SampleRequest
from localsession.port_commands import (
    ForwardCommand,
    LoadCommand,
    OptimCommand,
    SampleCommand,
    SaveCommand,
    SessionCommand,
    TrainingCommand,
)
from localsession.runtime import commands, members, sagemaker_wire
from localsession.runtime.commands import Fact, Refusal
from localsession.runtime.errors import ServiceError, validation
from localsession.runtime.members import known_members
from localsession.runtime.packages.registry import group_name, parse_arn
from localsession.runtime.wire_datums import is_int, model_input_tokens
from localsession.runtime.wire_datums_fast import training_datums

_TOKEN_RE = re.compile(r"^[a-zA-Z0-9-]{1,128}\Z")
_SESSION_NAME_RE = re.compile(r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}\Z")

#: The members each request structure may carry (botocore's model; see runtime/members.py).
#: Anything else is refused, as botocore refuses it client-side; only the open maps and
#: documents (``lossFnInputs`` keys, ``lossFnConfig``, ``data``) are free.
MEMBERS = members.MEMBERS


def list_sessions_request(request: dict[str, Any]) -> None:
    """ListTrainingSessions filters: ``NameContains`` pattern and ``StatusEquals`` enum."""
    contains = request.get("NameContains")
    if contains is not None and (
        not isinstance(contains, str) or not re.fullmatch(r"[a-zA-Z0-9-]{1,63}", contains)
    ):
        raise validation("NameContains must be 1-63 letters, digits and hyphens")
    status = request.get("StatusEquals")
    if status is not None and status not in vocab.SESSION_STATUSES:
        raise validation(f"StatusEquals must be one of {', '.join(vocab.SESSION_STATUSES)}")


def create_request(request: dict[str, Any], *, check_members: bool = True) -> None:
    """CreateTrainingSession's members (unless ``check_members`` is False) and the group it
    will save into (the name and LoRA checks are the service's own)."""
    if check_members:
        known_members(request, "CreateTrainingSession", "CreateTrainingSession")
    for key in ("LoraConfig", "ModelConfig", "OutputConfig", "VpcConfig"):
        if key in request and not isinstance(request[key], dict):
            raise validation(f"{key} must be an object")
    lora = request.get("LoraConfig") or {}
    for key in ("Rank", "Alpha"):
        if not is_int(lora.get(key)):
            raise validation(f"LoraConfig.{key}={lora.get(key)!r} must be an integer")
    group = request.get("ModelPackageGroupArn")
    if group is not None:
        if not isinstance(group, str):
            raise validation("ModelPackageGroupArn must be a model-package-group ARN")
        group_name(group, field="ModelPackageGroupArn")


def session_command(
    request: dict[str, Any], name: str, *, strict: bool | None, region: str | None
) -> SessionCommand:
    """A CreateTrainingSession (its members checked by :func:`create_request`) as the typed
    command, its LoRA and base model checked (``commands.check``, in the wire's words)."""
    lora = request.get("LoraConfig") or {}
    command = SessionCommand(
        name=name,
        base_model=(request.get("ModelConfig") or {}).get("BaseModelArn"),  # type: ignore[arg-type]
        rank=lora.get("Rank"),  # type: ignore[arg-type]  # the check's to judge
        alpha=lora.get("Alpha"),  # type: ignore[arg-type]
        strict=strict,
        region=region,
        details=session_details(request),
    )
    _checked(command, False, "CreateTrainingSession")
    return command


#: The CreateTrainingSession members a session keeps and DescribeTrainingSession reports.
SESSION_DETAIL_KEYS = (
    "ModelPackageGroupArn",
    "RoleArn",
    "LoraConfig",
    "ModelConfig",
    "OutputConfig",
    "VpcConfig",
    "Tags",
)


def session_details(request: dict[str, Any]) -> dict[str, Any]:
    """The members of a CreateTrainingSession request that its session keeps."""
    return {key: request[key] for key in SESSION_DETAIL_KEYS if key in request}


def _is_number(value: Any) -> TypeGuard[float]:
    return (isinstance(value, (int, float)) and not isinstance(value, bool)) and math.isfinite(
        value
    )


def session_name(name: Any, *, field: str = "TrainingSessionName") -> str:
    if not isinstance(name, str) or not _SESSION_NAME_RE.match(name):
        raise validation(
            f"{field} {name!r} is invalid: use 1-63 letters, digits and single hyphens, "
            "starting and ending with a letter or digit"
        )
    return name


def one_member(config: Any, allowed: tuple[str, ...], field: str) -> tuple[str, dict[str, Any]]:
    """Return the single member of a tagged union, refusing zero, several or unknown ones."""
    if not isinstance(config, dict) or not config:
        raise validation(f"{field} must be an object with exactly one of: {', '.join(allowed)}")
    members = [k for k, v in config.items() if v is not None]
    unknown = [k for k in members if k not in allowed]
    if unknown:
        raise validation(
            f"{field} has unsupported member {unknown[0]!r}; this server supports: "
            f"{', '.join(allowed)}"
        )
    if len(members) != 1:
        raise validation(f"{field} must set exactly one of {', '.join(allowed)}, got {members}")
    body = config[members[0]]
    if not isinstance(body, dict):
        raise validation(f"{field}.{members[0]} must be an object")
    return members[0], body


def _checked(command: Any, strict: bool, kind: str) -> None:
    """The one check of every dialect's commands (``commands.check``), a refusal in the
    wire's words (``sagemaker_wire.refusal``)."""
    try:
        commands.check(command, strict)
    except commands.Refusal as refusal:
        raise validation(sagemaker_wire.refusal(refusal, kind)) from None


def _refused(fact: commands.Refusal, kind: str) -> ServiceError:
    """A value the wire's structure refuses, in the words the check's fact would have."""
    return validation(sagemaker_wire.refusal(fact, kind))


def _loss_fn_config(config: Any, op: str) -> LossConfig | None:
    """Clip bounds only, each a number (ranges: the check); as the port's value."""
    if config is None:
        return None
    if not isinstance(config, dict):
        raise validation(f"{op}.lossFnConfig must be an object like {{'clip_low_threshold': 0.8}}")
    for key, value in config.items():
        if key not in vocab.LOSS_CONFIG_RANGES:
            raise validation(
                f"{op}.lossFnConfig has unknown key {key!r}; the keys are "
                + " and ".join(vocab.LOSS_CONFIG_RANGES)
            )
        if not _is_number(value):
            lo, hi = vocab.LOSS_CONFIG_RANGES[key]
            raise _refused(Refusal(Fact.LOSS_BOUND, value, field=key, low=lo, high=hi), op)
    return LossConfig(**config)  # the numbers as sent, so a refusal quotes them so


def _adam(body: dict[str, Any]) -> AdamHyperparams:
    """An optimizerStep body's structure; its ``adamParamsConfig`` as the port's value (the
    SDK's defaults for keys left out; ranges: the check)."""
    params = body.get("adamParamsConfig")
    if not isinstance(params, dict):
        raise validation("optimizerStep.adamParamsConfig is required (learningRate at least)")
    for key in params:
        if key not in vocab.ADAM_WIRE_KEYS:
            raise validation(f"optimizerStep.adamParamsConfig has unknown member {key!r}")
    given: dict[str, Any] = {}
    for key, port in vocab.ADAM_WIRE_KEYS.items():
        value = params.get(key)
        if value is None:
            if key in vocab.ADAM_REQUIRED:
                raise validation(f"optimizerStep.adamParamsConfig.{key} is required")
            continue
        if not _is_number(value):
            raise validation(f"optimizerStep.adamParamsConfig.{key} must be a finite number")
        given[port] = value
    return AdamHyperparams(**given)


def _floats(command: TrainingCommand) -> TrainingCommand:
    """A checked command with its wire numbers as floats (the values an engine reads): the
    ints a request gave (``"weightDecay": 0``) become floats; floats are kept as they are."""
    if isinstance(command, OptimCommand):
        ints = {k: float(v) for k, v in vars(command.adam).items() if type(v) is int}
        return OptimCommand(dataclasses.replace(command.adam, **ints)) if ints else command
    if isinstance(command, ForwardCommand) and command.loss_config is not None:
        ints = {k: float(v) for k, v in vars(command.loss_config).items() if type(v) is int}
        if ints:
            return dataclasses.replace(
                command, loss_config=dataclasses.replace(command.loss_config, **ints)
            )
    return command


def _training_command(kind: str, body: dict[str, Any]) -> TrainingCommand:
    """One ``operationConfig`` member's structure, parsed into its typed command."""
    known_members(body, kind, kind)
    if kind in (vocab.OpKind.FORWARD, vocab.OpKind.FORWARD_BACKWARD):
        config = _loss_fn_config(body.get("lossFnConfig"), kind)
        return ForwardCommand(
            datums=training_datums(body.get("datumList"), kind),
            loss_fn=body.get("lossFnName"),  # type: ignore[arg-type]  # the check's to judge
            loss_config=config,
            backward=kind == vocab.OpKind.FORWARD_BACKWARD,
        )
    if kind == vocab.OpKind.OPTIMIZER_STEP:
        return OptimCommand(_adam(body))
    if kind == vocab.OpKind.LOAD_STATE:
        parse_arn(body.get("modelPackageArn"))
        if not isinstance(body.get("loadOptimizer"), bool):
            raise validation("loadState.loadOptimizer is required: true or false")
        return LoadCommand(body["modelPackageArn"], body["loadOptimizer"])
    description = body.get("description")
    if description is not None and not isinstance(description, str):
        raise _refused(Refusal(Fact.DESCRIPTION, description, high=commands.DESCRIPTION_MAX), kind)
    merge = body.get("mergeWeights", False)
    if kind == vocab.OpKind.SAVE_WEIGHTS and not isinstance(merge, bool):
        raise validation("saveWeights.mergeWeights must be true or false")
    checkpoint = kind == vocab.OpKind.SAVE_STATE
    return SaveCommand(checkpoint, description, merge_weights=not checkpoint and merge)


def training_request(request: Any, strict: bool) -> tuple[int, str, TrainingCommand]:
    """An ExecuteTrainingOperation body parsed and checked: (seq, token, typed command)."""
    if not isinstance(request, dict):
        raise validation("the request body must be a JSON object")
    known_members(request, "ExecuteTrainingOperation", "the request")
    seq = commands.sequence_number(request.get("sequenceNumber"))
    token = request.get("clientToken")
    if token is None:
        token = ""
    elif not isinstance(token, str) or not _TOKEN_RE.match(token):
        raise validation("clientToken must be 1-128 letters, digits or hyphens")
    kind, body = one_member(request.get("operationConfig"), vocab.TRAINING_OPS, "operationConfig")
    command = _training_command(kind, body)
    _checked(command, strict, kind)
    return seq, token, _floats(command)


def _sample_command(body: dict[str, Any], tokens: list[int]) -> SampleCommand:
    """A ``sample`` member's structure, parsed into its typed command (values: the check)."""
    params = body.get("samplingParams")
    if not isinstance(params, dict):
        raise validation("sample.samplingParams is required (maxTokens at least)")
    for key in params:
        if key not in ("maxTokens", "temperature", "topP", "topK", "seed", "stop"):
            raise validation(f"sample.samplingParams has unknown member {key!r}")
    for port, key in (("temperature", "temperature"), ("top_p", "topP")):
        if params.get(key) is not None and not _is_number(params[key]):
            raise _refused(Refusal(Fact.NOT_NEGATIVE, params[key], field=port), vocab.OpKind.SAMPLE)
    stop = params.get("stop")
    if stop is not None and not isinstance(stop, list):
        raise _refused(Refusal(Fact.STOP, stop), vocab.OpKind.SAMPLE)
    if not isinstance(body.get("includePromptLogprobs", False), bool):
        raise validation("sample.includePromptLogprobs must be true or false")
    given = {key: params.get(key) for key in ("temperature", "topP", "topK")}
    request = SampleRequest(
        prompt=tokens,
        num_samples=body.get("numSamples"),  # type: ignore[arg-type]  # the check's to judge
        max_tokens=params.get("maxTokens"),  # type: ignore[arg-type]
        temperature=1.0 if given["temperature"] is None else given["temperature"],
        top_p=1.0 if given["topP"] is None else given["topP"],
        top_k=-1 if given["topK"] is None else given["topK"],
        stop=tuple(stop or ()),
        include_prompt_logprobs=bool(body.get("includePromptLogprobs")),
        topk_prompt_logprobs=body.get("topkPromptLogprobs"),
    )
    return SampleCommand(request, params.get("seed"), body.get("modelPackageArn"))


def sampling_request(
    request: Any, strict: bool
) -> tuple[str, SampleCommand | None, list[int], str | None]:
    """An ExecuteSamplingOperation body parsed and checked: (op kind, the typed command of
    a ``sample``, the prompt tokens, the model package ARN given)."""
    if not isinstance(request, dict):
        raise validation("the request body must be a JSON object")
    known_members(request, "ExecuteSamplingOperation", "the request")
    kind, body = one_member(request.get("operationConfig"), vocab.SAMPLING_OPS, "operationConfig")
    known_members(body, kind, kind)
    arn = body.get("modelPackageArn")
    if kind == vocab.OpKind.LOAD_WEIGHTS_FOR_SAMPLING:
        parse_arn(arn)
        return kind, None, [], arn
    tokens = model_input_tokens(body.get("prompt"), f"{kind}.prompt")
    command = None
    if kind == vocab.OpKind.SAMPLE:
        command = _sample_command(body, tokens)
        _checked(command, strict, kind)
    elif arn is not None:
        parse_arn(arn)
    return kind, command, tokens, arn


__all__ = ["ServiceError", "training_request", "sampling_request", "session_name"]
