"""The one check of every dialect's typed commands (``port_commands``), and its typed words.

Both dialects hand the runtime ``port_commands`` values: the SageMaker wire is parsed into
them by ``validate.py``, the Tinker wire by ``server/tinker/``. :func:`check` judges a
command's values once for both (LoRA rank and alpha, loss name and clip bounds, Adam's
service ranges in strict sessions, a package description's length, the sampling parameters
and their strict limits); structure is each parse's (a typed forward's datums:
:func:`checked`). It raises :class:`Refusal`, the fact (which field,
the value, the bounds it broke), not a sentence: each dialect words the fact in its own
field names. :func:`words` is the typed entry points' wording (the port's field names,
what the Tinker dialect passes on); the SageMaker wire's is ``sagemaker_wire.refusal``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum, auto
from typing import Any

from localsession import vocab
from localsession.engine_options import EngineOptions
from localsession.port import EngineSpec, LossConfig, SampleRequest, TrainingDatum
from localsession.port_commands import (
    ForwardCommand,
    LoadCommand,
    OptimCommand,
    SampleCommand,
    SaveCommand,
    SessionCommand,
    TrainingCommand,
)
from localsession.runtime.errors import ServiceError, validation
from localsession.runtime.models.catalog import ModelCatalog
from localsession.runtime.packages.registry import parse_arn

#: A package description's longest length (the service model's).
DESCRIPTION_MAX = 1024
#: A strict session's sampling limits (docs/wire.md#10): maxTokens, numSamples, and the
#: highest temperature (a relaxed session lifts them; top_p's 1 always holds).
STRICT_MAX_TOKENS = (512, 131072)
STRICT_NUM_SAMPLES = 1000
STRICT_TEMPERATURE = 2.0


class Fact(Enum):
    """What a refused command broke (each dialect words it: :func:`words`,
    ``sagemaker_wire.refusal``)."""

    LORA_RANK = auto()  # value outside [low, high]
    LORA_ALPHA = auto()  # value not an integer >= 1
    BASE_MODEL = auto()  # missing
    LOSS_FN = auto()  # value not a loss name
    LOSS_BOUND = auto()  # field's value outside [low, high]
    NO_DATUMS = auto()
    DATUM_TOKENS = auto()  # datum ``index``'s tokens not ids
    DATUM_INPUT = auto()  # datum ``index``'s input ``field`` not a list
    ADAM_RANGE = auto()  # field's value outside the service range [low, high]
    ADAM_RATE = auto()  # learning rate not > 0 (strict)
    DESCRIPTION = auto()  # longer than ``high`` characters, or not Unicode text
    PROMPT = auto()  # no token ids, or not ids
    NUM_SAMPLES = auto()  # not an integer in [1, high] (high None: no ceiling)
    MAX_TOKENS = auto()  # not a positive integer
    MAX_TOKENS_STRICT = auto()  # outside the strict range [low, high]
    NOT_NEGATIVE = auto()  # field (temperature, top_p) not a number >= 0
    TOO_HIGH = auto()  # field (temperature, top_p) above ``high``
    TOP_K = auto()  # not an integer >= 1 or -1
    STOP = auto()  # a stop string empty, not a string, or not Unicode text
    TOPK_PROMPT = auto()  # not an integer >= 0
    SEED = auto()  # not an integer


@dataclass
class Refusal(Exception):
    """A command value the runtime refuses: the ``fact``, the port's ``field`` name where
    the fact is about one of several, the ``value`` given, its ``low``/``high`` bounds and
    the datum ``index``. Worded by the dialect that sent the command."""

    fact: Fact
    value: Any = None
    field: str = ""
    low: float | None = None
    high: float | None = None
    index: int = 0


def check(command: TrainingCommand | SessionCommand | SampleCommand, strict: bool) -> None:
    """Raise :class:`Refusal` for the first value of ``command`` the runtime refuses;
    ``strict``: the session applies the service's limits (docs/semantics.md#4)."""
    match command:
        case SessionCommand():
            _lora(command)
        case ForwardCommand():
            if command.loss_fn not in vocab.LOSS_FUNCTIONS:
                raise Refusal(Fact.LOSS_FN, command.loss_fn)
            if command.loss_config is not None:
                _bounds(command.loss_config)
        case OptimCommand():
            if strict:
                _adam_in_range(command)
        case SaveCommand():
            text = command.description
            if text is not None and (len(text) > DESCRIPTION_MAX or not _unicode(text)):
                raise Refusal(Fact.DESCRIPTION, text, high=DESCRIPTION_MAX)
        case LoadCommand():
            parse_arn(command.package_arn)  # its own words: the ARN's form, for both
        case SampleCommand():
            _sample(command.request, strict)
            if command.seed is not None and type(command.seed) is not int:
                raise Refusal(Fact.SEED, command.seed)
            if command.package_arn is not None:
                parse_arn(command.package_arn)
        case _:
            raise TypeError(f"not a command: {type(command).__name__}")


def words(refusal: Refusal) -> str:
    """A refusal in the port's field names (the typed entry points' wording)."""
    r, value = refusal, refusal.value
    match r.fact:
        case Fact.LORA_RANK:
            return f"LoRA rank {value!r} must be an integer in [{r.low}, {r.high}]"
        case Fact.LORA_ALPHA:
            return f"LoRA alpha {value!r} must be an integer >= 1"
        case Fact.BASE_MODEL:
            return "the base model is required"
        case Fact.LOSS_FN:
            return f"loss_fn {value!r} is not one of {', '.join(vocab.LOSS_FUNCTIONS)}"
        case Fact.LOSS_BOUND:
            return f"loss_fn_config.{r.field}={value!r} must be a number in [{r.low}, {r.high}]"
        case Fact.NO_DATUMS:
            return f"{value}: give at least one datum"
        case Fact.DATUM_TOKENS:
            return f"{value}: datum {r.index}: tokens must be a list of token ids (ints >= 0)"
        case Fact.DATUM_INPUT:
            return f"{value}: datum {r.index}: loss_fn_inputs[{r.field!r}] must be a list"
        case Fact.ADAM_RANGE:
            return (
                f"adam_params.{r.field}={value} is outside the service range [{r.low}, "
                f"{r.high}]; use a value in range, or run relaxed (strict=False / --relaxed)"
            )
        case Fact.ADAM_RATE:
            return "adam_params.learning_rate must be greater than 0"
        case Fact.DESCRIPTION:
            return (
                f"a package description is Unicode text (no lone surrogates) of at most "
                f"{DESCRIPTION_MAX} characters"
            )
        case Fact.PROMPT:
            return "prompt must hold at least one token id (ints >= 0)"
        case Fact.NUM_SAMPLES:
            top = "" if r.high is None else f" <= {r.high:g}"
            return f"num_samples={value!r} must be an integer >= 1{top}"
        case Fact.MAX_TOKENS:
            return f"max_tokens={value!r} must be a positive integer"
        case Fact.MAX_TOKENS_STRICT:
            return f"max_tokens={value!r} must be in [{r.low:g}, {r.high:g}] in a strict session"
        case Fact.NOT_NEGATIVE:
            return f"{r.field}={value!r} must be a number >= 0"
        case Fact.TOO_HIGH:
            return f"{r.field}={value} must be in [0, {r.high:g}]"
        case Fact.TOP_K:
            return "top_k must be an integer >= 1, or -1 to disable it"
        case Fact.STOP:
            return "stop strings must be non-empty Unicode text (no lone surrogates)"
        case Fact.TOPK_PROMPT:
            return "topk_prompt_logprobs must be an integer >= 0"
        case Fact.SEED:
            return f"seed={value!r} must be an integer"
    raise AssertionError(r.fact)  # pragma: no cover - every fact is worded above


def checked(command: TrainingCommand | SessionCommand | SampleCommand, strict: bool) -> None:
    """What the typed entry points check: :func:`check`, and a forward's datums' structure
    (tokens are ids, inputs are lists: what the SageMaker wire's own parse,
    ``wire_datums.py``, checks member by member); a refusal raised as the
    ValidationException they answer (in the port's field names, :func:`words`)."""
    try:
        check(command, strict)
        if isinstance(command, ForwardCommand):
            _datums(command.datums, command.kind)
    except Refusal as refusal:
        raise validation(words(refusal)) from None


def engine_spec(
    command: SessionCommand,
    catalog: ModelCatalog,
    any_path: bool,
    options: EngineOptions | None = None,
) -> EngineSpec:
    """What a session command asks an engine for: its LoRA (checked) on its base model,
    resolved through ``catalog`` (a model it does not list is refused unless ``any_path``,
    the service's ``local_model_paths``), run with the service's engine ``options``."""
    checked(command, strict=False)
    base_model = command.base_model
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
        rank=command.rank,
        alpha=command.alpha,
        seed=command.seed,
        train_unembed=command.train_unembed,
        model=resolved,
        options=options if options is not None else EngineOptions(),
    )


def sequence_number(seq: Any) -> int:
    """A training op's sequence number: an integer >= 1 (the same words for both dialects)."""
    if type(seq) is not int or seq < 1:
        raise validation(f"sequenceNumber must be an integer >= 1, got {seq!r}")
    return seq


def _lora(command: SessionCommand) -> None:
    rank, alpha, low, high = command.rank, command.alpha, vocab.LORA_RANK_MIN, vocab.LORA_RANK_MAX
    if type(rank) is not int or not low <= rank <= high:
        raise Refusal(Fact.LORA_RANK, rank, low=low, high=high)
    if type(alpha) is not int or alpha < 1:
        raise Refusal(Fact.LORA_ALPHA, alpha)
    if not isinstance(command.base_model, str) or not command.base_model:
        raise Refusal(Fact.BASE_MODEL, command.base_model)


def _bounds(config: LossConfig) -> None:
    """Each clip bound given lies in its range (docs/semantics.md#1)."""
    for key, (lo, hi) in vocab.LOSS_CONFIG_RANGES.items():
        value = getattr(config, key)
        if value is not None and not (_number(value) and lo <= value <= hi):
            raise Refusal(Fact.LOSS_BOUND, value, field=key, low=lo, high=hi)


def _datums(datums: list[TrainingDatum], op: str) -> None:
    if not datums:
        raise Refusal(Fact.NO_DATUMS, op)
    for i, datum in enumerate(datums):
        if not isinstance(datum.tokens, list) or not _token_ids(datum.tokens):
            raise Refusal(Fact.DATUM_TOKENS, op, index=i)
        for key, values in datum.loss_fn_inputs.items():
            if not isinstance(values, list):
                raise Refusal(Fact.DATUM_INPUT, op, field=key, index=i)


def _adam_in_range(command: OptimCommand) -> None:
    """The service's Adam ranges, and a learning rate above 0 (strict sessions only)."""
    for wire, port in vocab.ADAM_WIRE_KEYS.items():
        value = getattr(command.adam, port)
        if value is None or wire not in vocab.ADAM_RANGES:
            continue
        lo, hi = vocab.ADAM_RANGES[wire]
        if not lo <= value <= hi:
            raise Refusal(Fact.ADAM_RANGE, value, field=port, low=lo, high=hi)
        if wire == "learningRate" and value <= 0:
            raise Refusal(Fact.ADAM_RATE, value, field=port)


def _sample(request: SampleRequest, strict: bool) -> None:
    """A sample request's values; ``strict`` adds the SageMaker service's limits."""
    if not request.prompt or not _token_ids(request.prompt):
        raise Refusal(Fact.PROMPT, request.prompt)
    n = request.num_samples
    ceiling = STRICT_NUM_SAMPLES if strict else None
    if type(n) is not int or n < 1 or (ceiling is not None and n > ceiling):
        raise Refusal(Fact.NUM_SAMPLES, n, high=ceiling)
    if type(request.max_tokens) is not int or request.max_tokens < 1:
        raise Refusal(Fact.MAX_TOKENS, request.max_tokens)
    lo, hi = STRICT_MAX_TOKENS
    if strict and not lo <= request.max_tokens <= hi:
        raise Refusal(Fact.MAX_TOKENS_STRICT, request.max_tokens, low=lo, high=hi)
    for key, top in (("temperature", STRICT_TEMPERATURE if strict else None), ("top_p", 1.0)):
        value = getattr(request, key)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
            raise Refusal(Fact.NOT_NEGATIVE, value, field=key)
        if top is not None and value > top:
            raise Refusal(Fact.TOO_HIGH, value, field=key, high=top)
    if type(request.top_k) is not int or (request.top_k < 1 and request.top_k != -1):
        raise Refusal(Fact.TOP_K, request.top_k)
    if not all(isinstance(s, str) and s and _unicode(s) for s in request.stop):
        raise Refusal(Fact.STOP, request.stop)
    k = request.topk_prompt_logprobs
    if k is not None and (type(k) is not int or k < 0):
        raise Refusal(Fact.TOPK_PROMPT, k)


def _unicode(text: str) -> bool:
    """Whether ``text`` is valid Unicode: no lone surrogate (JSON's ``"\\ud800"`` decodes to
    one), which no tokenizer encodes."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _number(value: Any) -> bool:
    """A finite int or float, not a bool."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _token_ids(ids: list[Any]) -> bool:
    """Whether every id is an int >= 0 (set(map(type, ...)) and min() run in C)."""
    return not ids or (set(map(type, ids)) <= {int} and min(ids) >= 0)


__all__ = ["Fact", "Refusal", "ServiceError", "check", "checked", "words"]
