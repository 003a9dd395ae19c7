"""Synchronous request checks: what the service refuses with a 400 before queueing an op.

Structure (unions, required members, types, patterns, enums) is always checked. Service limits
(docs/wire.md#10: learning-rate ceiling, maxTokens floor, numSamples, ...) are checked in
strict mode only; ``strict=False`` lifts them (docs/semantics.md#4). Semantic problems the real
service only finds while running an op (missing loss keys, length mismatches) are left to the
engine, which fails the op instead (docs/semantics.md#4, rule 1).

Every message names the offending field and the fix.

Parse once: a ``forward``/``forwardBackward`` body leaves here with its ``datumList`` as
:class:`~localsession.port.TrainingDatum` values (tokens concatenated, inputs flattened) and
its ``lossFnConfig`` as a :class:`~localsession.port.LossConfig`; an ``optimizerStep`` body
with its ``adamParamsConfig`` as :class:`~localsession.port.AdamHyperparams`. No engine reads
a wire request again.
"""

from __future__ import annotations

import math
import re
from typing import Any, TypeGuard

from localsession import vocab
from localsession.port import AdamHyperparams, LossConfig
from localsession.runtime import members
from localsession.runtime.errors import ServiceError, validation
from localsession.runtime.members import known_members
from localsession.runtime.packages.registry import group_name, parse_arn
from localsession.runtime.wire_datums import is_int, model_input_tokens
from localsession.runtime.wire_datums_fast import training_datums

_TOKEN_RE = re.compile(r"^[a-zA-Z0-9-]{1,128}\Z")
_SESSION_NAME_RE = re.compile(r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}\Z")

#: (wire key, minimum, maximum, required) for AdamParamsConfig, per the service model.
_ADAM_RANGES: tuple[tuple[str, float, float, bool], ...] = tuple(
    (key, lo, hi, key in vocab.ADAM_REQUIRED) for key, (lo, hi) in vocab.ADAM_RANGES.items()
)

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


def lora_and_base_model(request: dict[str, Any]) -> tuple[int, int, str]:
    """A CreateTrainingSession's LoRA rank and alpha and its ``BaseModelArn``, checked."""
    lora = request.get("LoraConfig") or {}
    rank, alpha = lora.get("Rank"), lora.get("Alpha")
    if not isinstance(rank, int) or not vocab.LORA_RANK_MIN <= rank <= vocab.LORA_RANK_MAX:
        raise validation(
            f"LoraConfig.Rank={rank!r} must be an integer in "
            f"[{vocab.LORA_RANK_MIN}, {vocab.LORA_RANK_MAX}]"
        )
    if not isinstance(alpha, int) or alpha < 1:
        raise validation(f"LoraConfig.Alpha={alpha!r} must be an integer >= 1")
    base_model = (request.get("ModelConfig") or {}).get("BaseModelArn")
    if not isinstance(base_model, str) or not base_model:
        raise validation("ModelConfig.BaseModelArn is required")
    return rank, alpha, base_model


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


def _loss_fn_config(config: Any, op: str) -> LossConfig | None:
    """Clip bounds only, each a number in its range (docs/semantics.md#1); as the port's value."""
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
        lo, hi = vocab.LOSS_CONFIG_RANGES[key]
        if not _is_number(value) or not lo <= value <= hi:
            raise validation(f"{op}.lossFnConfig.{key}={value!r} must be a number in [{lo}, {hi}]")
    return LossConfig(**{key: float(value) for key, value in config.items()})


def _loss_body(body: dict[str, Any], op: str) -> dict[str, Any]:
    """Check a forward(_backward) body's structure; the body with its datums and its
    ``lossFnConfig`` (when given) as port values."""
    known_members(body, op, op)
    loss_fn = body.get("lossFnName")
    if loss_fn not in vocab.LOSS_FUNCTIONS:
        raise validation(
            f"{op}.lossFnName {loss_fn!r} is not one of {', '.join(vocab.LOSS_FUNCTIONS)}"
        )
    parsed = {**body}
    if "lossFnConfig" in body:
        parsed["lossFnConfig"] = _loss_fn_config(body["lossFnConfig"], op)
    parsed["datumList"] = training_datums(body.get("datumList"), op)
    return parsed


def _adam(body: dict[str, Any], strict: bool) -> AdamHyperparams:
    """Check an optimizerStep body; its ``adamParamsConfig`` as the port's value (the SDK's
    defaults for keys left out)."""
    known_members(body, vocab.OpKind.OPTIMIZER_STEP, vocab.OpKind.OPTIMIZER_STEP)
    params = body.get("adamParamsConfig")
    if not isinstance(params, dict):
        raise validation("optimizerStep.adamParamsConfig is required (learningRate at least)")
    known = {key for key, *_ in _ADAM_RANGES}
    for key in params:
        if key not in known:
            raise validation(f"optimizerStep.adamParamsConfig has unknown member {key!r}")
    out: dict[str, float] = {}
    for key, lo, hi, required in _ADAM_RANGES:
        value = params.get(key)
        if value is None:
            if required:
                raise validation(f"optimizerStep.adamParamsConfig.{key} is required")
            continue
        if not _is_number(value):
            raise validation(f"optimizerStep.adamParamsConfig.{key} must be a finite number")
        if strict and not lo <= value <= hi:
            raise validation(
                f"optimizerStep.adamParamsConfig.{key}={value} is outside the service range "
                f"[{lo}, {hi}]; use a value in range, or run relaxed (strict=False / --relaxed)"
            )
        if strict and key == "learningRate" and value <= 0:
            raise validation("optimizerStep.adamParamsConfig.learningRate must be greater than 0")
        out[vocab.ADAM_WIRE_KEYS[key]] = float(value)
    return AdamHyperparams(**out)


def training_request(request: Any, strict: bool) -> tuple[int, str, str, dict[str, Any]]:
    """Check an ExecuteTrainingOperation body; return (seq, token, op kind, normalised body)."""
    if not isinstance(request, dict):
        raise validation("the request body must be a JSON object")
    known_members(request, "ExecuteTrainingOperation", "the request")
    seq: Any = request.get("sequenceNumber")
    if not is_int(seq) or seq < 1:
        raise validation(f"sequenceNumber must be an integer >= 1, got {seq!r}")
    token = request.get("clientToken")
    if token is None:
        token = ""
    elif not isinstance(token, str) or not _TOKEN_RE.match(token):
        raise validation("clientToken must be 1-128 letters, digits or hyphens")
    kind, body = one_member(request.get("operationConfig"), vocab.TRAINING_OPS, "operationConfig")
    if kind in (vocab.OpKind.FORWARD, vocab.OpKind.FORWARD_BACKWARD):
        body = _loss_body(body, kind)
    elif kind == vocab.OpKind.OPTIMIZER_STEP:
        body = {"adamParamsConfig": _adam(body, strict)}
    elif kind in (vocab.OpKind.SAVE_WEIGHTS, vocab.OpKind.SAVE_STATE, vocab.OpKind.LOAD_STATE):
        known_members(body, kind, kind)
    if kind in (vocab.OpKind.SAVE_WEIGHTS, vocab.OpKind.SAVE_STATE):
        optional_str(body.get("description"), f"{kind}.description", 1024)
        if kind == vocab.OpKind.SAVE_WEIGHTS and not isinstance(
            body.get("mergeWeights", False), bool
        ):
            raise validation("saveWeights.mergeWeights must be true or false")
    elif kind == vocab.OpKind.LOAD_STATE:
        parse_arn(body.get("modelPackageArn"))
        if not isinstance(body.get("loadOptimizer"), bool):
            raise validation("loadState.loadOptimizer is required: true or false")
    return seq, token, kind, body


def _sampling_params(params: Any, strict: bool) -> dict[str, Any]:
    if not isinstance(params, dict):
        raise validation("sample.samplingParams is required (maxTokens at least)")
    allowed = ("maxTokens", "temperature", "topP", "topK", "seed", "stop")
    for key in params:
        if key not in allowed:
            raise validation(f"sample.samplingParams has unknown member {key!r}")
    max_tokens: Any = params.get("maxTokens")
    if not is_int(max_tokens) or max_tokens < 1:
        raise validation("sample.samplingParams.maxTokens must be a positive integer")
    if strict and not 512 <= max_tokens <= 131072:
        raise validation(
            f"sample.samplingParams.maxTokens={max_tokens} is outside the service range "
            "[512, 131072]; run relaxed (strict=False / --relaxed) for shorter generations"
        )
    for key, hi in (("temperature", 2.0), ("topP", 1.0)):
        value = params.get(key)
        if value is None:
            continue
        if not _is_number(value) or value < 0 or (strict and value > hi):
            raise validation(f"sample.samplingParams.{key}={value!r} must be in [0, {hi}]")
    for key in ("topK", "seed"):
        value = params.get(key)
        if value is not None and not is_int(value):
            raise validation(f"sample.samplingParams.{key} must be an integer")
    top_k: Any = params.get("topK")
    if top_k is not None and top_k < 1 and top_k != -1:
        raise validation("sample.samplingParams.topK must be >= 1, or -1 to disable it")
    stop = params.get("stop")
    if stop is not None and (
        not isinstance(stop, list) or not all(isinstance(s, str) and s for s in stop)
    ):
        raise validation("sample.samplingParams.stop must be a list of non-empty strings")
    return params


def sampling_request(request: Any, strict: bool) -> tuple[str, dict[str, Any], list[int]]:
    """Check an ExecuteSamplingOperation body; return (op kind, body, prompt tokens)."""
    if not isinstance(request, dict):
        raise validation("the request body must be a JSON object")
    known_members(request, "ExecuteSamplingOperation", "the request")
    kind, body = one_member(request.get("operationConfig"), vocab.SAMPLING_OPS, "operationConfig")
    known_members(body, kind, kind)
    if kind == vocab.OpKind.LOAD_WEIGHTS_FOR_SAMPLING:
        parse_arn(body.get("modelPackageArn"))
        return kind, body, []
    tokens = model_input_tokens(body.get("prompt"), f"{kind}.prompt")
    if kind == vocab.OpKind.SAMPLE:
        n: Any = body.get("numSamples")
        if not is_int(n) or n < 1 or (strict and n > 1000):
            raise validation(f"sample.numSamples={n!r} must be an integer in [1, 1000]")
        _sampling_params(body.get("samplingParams"), strict)
        k: Any = body.get("topkPromptLogprobs")
        if k is not None and (not is_int(k) or k < 0):
            raise validation("sample.topkPromptLogprobs must be an integer >= 0")
        if not isinstance(body.get("includePromptLogprobs", False), bool):
            raise validation("sample.includePromptLogprobs must be true or false")
    if body.get("modelPackageArn") is not None:
        parse_arn(body["modelPackageArn"])
    return kind, body, tokens


def optional_str(value: Any, field: str, max_len: int) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > max_len:
        raise validation(f"{field} must be a string of at most {max_len} characters")
    return value


__all__ = ["ServiceError", "training_request", "sampling_request", "session_name"]
