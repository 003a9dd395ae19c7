"""Typed commands (``port_commands``) checked and turned into the runtime's op bodies.

The runtime's typed entry points (``Service.submit_training``, ``Service.submit_sample``)
take commands a dialect parsed from its own wire. Their values are checked here as the
SageMaker wire's are in ``validate.py`` (the same messages where the checks agree, naming
the field by its port name), then a training command becomes the normalised op body the
session's queue and ``run_op`` read, the body ``validate.training_request`` makes of the
SageMaker wire.
"""

from __future__ import annotations

import math
from typing import Any

from localsession import vocab
from localsession.engine_options import EngineOptions
from localsession.port import EngineSpec, LossConfig, SampleRequest, TrainingDatum
from localsession.port_commands import (
    ForwardCommand,
    LoadCommand,
    OptimCommand,
    SaveCommand,
    SessionCommand,
    TrainingCommand,
)
from localsession.runtime.errors import validation
from localsession.runtime.models.catalog import ModelCatalog
from localsession.runtime.packages.registry import parse_arn


def lora(command: SessionCommand) -> tuple[int, int, str]:
    """A session command's LoRA rank and alpha (checked) and its base model."""
    rank, alpha = command.rank, command.alpha
    if type(rank) is not int or not vocab.LORA_RANK_MIN <= rank <= vocab.LORA_RANK_MAX:
        raise validation(
            f"LoRA rank {rank!r} must be an integer in "
            f"[{vocab.LORA_RANK_MIN}, {vocab.LORA_RANK_MAX}]"
        )
    if type(alpha) is not int or alpha < 1:
        raise validation(f"LoRA alpha {alpha!r} must be an integer >= 1")
    if not isinstance(command.base_model, str) or not command.base_model:
        raise validation("the base model is required")
    return rank, alpha, command.base_model


def engine_spec(
    command: SessionCommand,
    catalog: ModelCatalog,
    any_path: bool,
    options: EngineOptions | None = None,
) -> EngineSpec:
    """What a session command asks an engine for: its LoRA (checked) on its base model,
    resolved through ``catalog`` (a model it does not list is refused unless ``any_path``,
    the service's ``local_model_paths``), run with the service's engine ``options``."""
    rank, alpha, base_model = lora(command)
    # Sessions and their packages name the model, not the ARN or alias it was asked by.
    model = catalog.canonical_name(base_model)
    if not any_path and model not in {catalog.canonical_name(n) for n in catalog.names()}:
        raise validation(
            f"ModelConfig.BaseModelArn {base_model[:300]!r} is not a model this server "
            "serves; use a Hub content ARN or name from ListHubContents"
        )
    try:
        resolved = catalog.resolve(base_model)
    except ValueError as exc:
        raise validation(str(exc)) from None
    return EngineSpec(
        base_model=model,
        rank=rank,
        alpha=alpha,
        seed=command.seed,
        train_unembed=command.train_unembed,
        model=resolved,
        options=options if options is not None else EngineOptions(),
    )


def sequence_number(seq: Any) -> int:
    """A training op's sequence number: an integer >= 1."""
    if type(seq) is not int or seq < 1:
        raise validation(f"sequenceNumber must be an integer >= 1, got {seq!r}")
    return seq


def _datums(datums: list[TrainingDatum], op: str) -> list[TrainingDatum]:
    if not datums:
        raise validation(f"{op}: give at least one datum")
    for i, datum in enumerate(datums):
        ids = datum.tokens
        if not isinstance(ids, list) or not _token_ids(ids):
            raise validation(f"{op}: datum {i}: tokens must be a list of token ids (ints >= 0)")
        for key, values in datum.loss_fn_inputs.items():
            if not isinstance(values, list):
                raise validation(f"{op}: datum {i}: loss_fn_inputs[{key!r}] must be a list")
    return list(datums)


def _token_ids(ids: list[Any]) -> bool:
    """Whether every id is an int >= 0 (set(map(type, ...)) and min() run in C)."""
    return not ids or (set(map(type, ids)) <= {int} and min(ids) >= 0)


def _adam_in_range(command: OptimCommand) -> None:
    """The service's Adam ranges (strict sessions only, as for the SageMaker wire)."""
    for wire, port in vocab.ADAM_WIRE_KEYS.items():
        value = getattr(command.adam, port)
        if value is None or wire not in vocab.ADAM_RANGES:
            continue
        lo, hi = vocab.ADAM_RANGES[wire]
        if not lo <= value <= hi:
            raise validation(
                f"adam_params.{port}={value} is outside the service range [{lo}, {hi}]; use a "
                "value in range, or run relaxed (strict=False / --relaxed)"
            )


def _bounds_in_range(config: LossConfig) -> None:
    """Each clip bound given lies in its range (docs/semantics.md#1)."""
    for key, (lo, hi) in vocab.LOSS_CONFIG_RANGES.items():
        value = getattr(config, key)
        if value is not None and not (math.isfinite(value) and lo <= value <= hi):
            raise validation(f"loss_fn_config.{key}={value!r} must be a number in [{lo}, {hi}]")


def training_body(command: TrainingCommand, strict: bool) -> tuple[str, dict[str, Any]]:
    """A checked training command as (op kind, normalised op body)."""
    if isinstance(command, ForwardCommand):
        if command.loss_fn not in vocab.LOSS_FUNCTIONS:
            raise validation(
                f"loss_fn {command.loss_fn!r} is not one of {', '.join(vocab.LOSS_FUNCTIONS)}"
            )
        if command.loss_config is not None:
            _bounds_in_range(command.loss_config)
        body: dict[str, Any] = {
            "lossFnName": command.loss_fn,
            "datumList": _datums(command.datums, command.kind),
        }
        if command.loss_config is not None:
            body["lossFnConfig"] = command.loss_config
        return command.kind, body
    if isinstance(command, OptimCommand):
        if strict:
            _adam_in_range(command)
        return command.kind, {"adamParamsConfig": command.adam}
    if isinstance(command, SaveCommand):
        description = command.description
        if description is not None and len(description) > 1024:
            raise validation("a package description holds at most 1024 characters")
        body = {"description": description, "key": command.key}
        if not command.checkpoint:
            body["mergeWeights"] = bool(command.merge_weights)
        return command.kind, body
    if isinstance(command, LoadCommand):
        parse_arn(command.package_arn)
        return command.kind, {
            "modelPackageArn": command.package_arn,
            "loadOptimizer": bool(command.load_optimizer),
        }
    raise TypeError(f"not a training command: {type(command).__name__}")


def check_sample(request: SampleRequest) -> None:
    """A typed sample request's values, as ``validate.sampling_request`` checks a relaxed
    session's wire (the strict limits are the SageMaker service's own)."""
    if not request.prompt or not _token_ids(request.prompt):
        raise validation("prompt must hold at least one token id (ints >= 0)")
    if type(request.num_samples) is not int or request.num_samples < 1:
        raise validation(f"num_samples={request.num_samples!r} must be an integer >= 1")
    if type(request.max_tokens) is not int or request.max_tokens < 1:
        raise validation(f"max_tokens={request.max_tokens!r} must be a positive integer")
    for key in ("temperature", "top_p"):
        value = getattr(request, key)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
            raise validation(f"{key}={value!r} must be a number >= 0")
    if request.top_p > 1:
        raise validation(f"top_p={request.top_p} must be in [0, 1]")
    if type(request.top_k) is not int or (request.top_k < 1 and request.top_k != -1):
        raise validation("top_k must be an integer >= 1, or -1 to disable it")
    if not all(isinstance(s, str) and s for s in request.stop):
        raise validation("stop strings must be non-empty")
    k = request.topk_prompt_logprobs
    if k is not None and (type(k) is not int or k < 0):
        raise validation("topk_prompt_logprobs must be an integer >= 0")


def seed(given: Any) -> int | None:
    """A sample's seed: an integer, or None (the runtime draws one)."""
    if given is not None and type(given) is not int:
        raise validation(f"seed={given!r} must be an integer")
    return given
