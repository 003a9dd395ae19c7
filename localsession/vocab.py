"""The service's vocabulary, spelled out once: statuses, op kinds, losses, Adam, error codes,
and the Tinker dialect's own defaults.

Every other module imports these names instead of writing the strings again: session, op
and package statuses, op kinds, loss functions and error codes are ``str`` enums
(:class:`Word`), and ``tests/test_layout.py`` fails on their values written as literals
anywhere else, and on a module binding one of these names to a second name. Nothing here
imports torch or any other heavy package: the runtime, the engines, the fakes and the server
all read it. ``tests/test_vocab.py`` checks each table against botocore's model of the
service (``sagemakertrainingsessionruntime`` and ``sagemaker``) and the Tinker defaults
against the ``tinker`` SDK, so a drift from the real service fails a test instead of a
user's loop.
"""

from __future__ import annotations

from enum import Enum
from typing import Final

# -- words ---------------------------------------------------------------------------------


class Word(str, Enum):
    """A word of the service's vocabulary: a ``str`` that equals, hashes and serialises (json,
    pydantic) as its value, and whose ``str()``, format and ``repr()`` are the value's, so a
    message reads as it did when the word was a plain string. (``class X(str, Enum)``, as
    Python 3.10 has no ``enum.StrEnum``.)"""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)

    def __repr__(self) -> str:
        return repr(str(self.value))


# -- statuses ------------------------------------------------------------------------------


class SessionStatus(Word):
    """``TrainingSessionStatus`` values (the ``sagemaker`` model's enum, in its order)."""

    CREATED = "Created"
    SCHEDULED = "Scheduled"
    RUNNING = "Running"
    BLOCKED = "Blocked"
    STOPPING = "Stopping"
    STOPPED = "Stopped"
    FAILED = "Failed"
    EXPIRED = "Expired"
    DELETING = "Deleting"
    DELETION_FAILED = "DeletionFailed"


SESSION_STATUSES: Final[tuple[SessionStatus, ...]] = tuple(SessionStatus)
_S = SessionStatus
#: Statuses that count against ``max_sessions`` and may still take work.
SESSION_ACTIVE: Final = frozenset({_S.CREATED, _S.SCHEDULED, _S.RUNNING, _S.BLOCKED})
#: Statuses from which StopTrainingSession is refused (the SDK absorbs that refusal).
SESSION_NOT_STOPPABLE: Final = frozenset(
    {_S.STOPPING, _S.STOPPED, _S.FAILED, _S.DELETING, _S.DELETION_FAILED}
)
#: Statuses from which DeleteTrainingSession is accepted.
SESSION_DELETABLE: Final = frozenset({_S.STOPPED, _S.FAILED, _S.EXPIRED, _S.DELETION_FAILED})


class OpStatus(Word):
    """Operation status values of ``Get*OperationResult`` (the runtime model's enum)."""

    PENDING = "Pending"
    IN_PROGRESS = "InProgress"
    COMPLETED = "Completed"
    FAILED = "Failed"
    SKIPPED = "Skipped"


OP_STATUSES: Final[tuple[OpStatus, ...]] = tuple(OpStatus)
OP_TERMINAL: Final = frozenset({OpStatus.COMPLETED, OpStatus.FAILED, OpStatus.SKIPPED})


class PackageStatus(Word):
    """``ModelPackageStatus`` values a local package takes (the ``sagemaker`` model's enum)."""

    PENDING = "Pending"
    IN_PROGRESS = "InProgress"
    COMPLETED = "Completed"
    FAILED = "Failed"
    DELETING = "Deleting"


# -- operation kinds -----------------------------------------------------------------------


class OpKind(Word):
    """Members of the ``operationConfig`` unions of Execute{Training,Sampling}Operation."""

    FORWARD = "forward"
    FORWARD_BACKWARD = "forwardBackward"
    OPTIMIZER_STEP = "optimizerStep"
    SAVE_WEIGHTS = "saveWeights"
    SAVE_STATE = "saveState"
    LOAD_STATE = "loadState"
    SAMPLE = "sample"
    COMPUTE_LOGPROBS = "computeLogprobs"
    LOAD_WEIGHTS_FOR_SAMPLING = "loadWeightsForSampling"


#: Members of the ``operationConfig`` union of ExecuteTrainingOperation.
TRAINING_OPS: Final[tuple[OpKind, ...]] = (
    OpKind.FORWARD,
    OpKind.FORWARD_BACKWARD,
    OpKind.OPTIMIZER_STEP,
    OpKind.SAVE_WEIGHTS,
    OpKind.SAVE_STATE,
    OpKind.LOAD_STATE,
)
#: Members of the ``operationConfig`` union of ExecuteSamplingOperation.
SAMPLING_OPS: Final[tuple[OpKind, ...]] = (
    OpKind.SAMPLE,
    OpKind.COMPUTE_LOGPROBS,
    OpKind.LOAD_WEIGHTS_FOR_SAMPLING,
)
OP_KINDS: Final[tuple[OpKind, ...]] = tuple(OpKind)

#: Wire op kind -> the SDK method that sends it (one method per kind).
METHOD_OF_KIND: Final[dict[str, str]] = {
    OpKind.FORWARD: "forward",
    OpKind.FORWARD_BACKWARD: "forward_backward",
    OpKind.OPTIMIZER_STEP: "optim_step",
    OpKind.SAVE_WEIGHTS: "save_weights_for_sampler",
    OpKind.SAVE_STATE: "save_state",
    OpKind.LOAD_STATE: "load_state",
    OpKind.SAMPLE: "sample",
    OpKind.COMPUTE_LOGPROBS: "compute_logprobs",
    OpKind.LOAD_WEIGHTS_FOR_SAMPLING: "load_weights_for_sampling",
}
#: SDK method name (and a few spellings people use) -> the wire op kind it sends.
KIND_OF_METHOD: Final[dict[str, str]] = {
    **{method: kind for kind, method in METHOD_OF_KIND.items()},
    "optimStep": OpKind.OPTIMIZER_STEP,
    "load_state_with_optimizer": OpKind.LOAD_STATE,
}

# -- losses --------------------------------------------------------------------------------


class LossFunction(Word):
    """``lossFnName`` values (the runtime model's enum)."""

    CROSS_ENTROPY = "cross_entropy"
    IMPORTANCE_SAMPLING = "importance_sampling"
    PPO = "ppo"
    CISPO = "cispo"


LOSS_FUNCTIONS: Final[tuple[LossFunction, ...]] = tuple(LossFunction)
RL_LOSSES: Final[tuple[LossFunction, ...]] = (
    LossFunction.IMPORTANCE_SAMPLING,
    LossFunction.PPO,
    LossFunction.CISPO,
)
#: The ``loss_fn_inputs`` keys the service supports; others are rejected.
LOSS_INPUT_KEYS: Final[tuple[str, ...]] = (
    "target_tokens",
    "weights",
    "advantages",
    "logprobs",
    "ref_log_prob",
    "temperature",
)
#: The keys each loss needs in every datum.
REQUIRED_INPUT_KEYS: Final[dict[str, tuple[str, ...]]] = {
    LossFunction.CROSS_ENTROPY: ("target_tokens", "weights"),
    LossFunction.IMPORTANCE_SAMPLING: ("target_tokens", "weights", "logprobs", "advantages"),
    LossFunction.PPO: ("target_tokens", "weights", "logprobs", "advantages"),
    LossFunction.CISPO: ("target_tokens", "weights", "logprobs", "advantages"),
}
#: ``lossFnConfig`` keys and the closed range each must lie in (docs/semantics.md#1).
LOSS_CONFIG_RANGES: Final[dict[str, tuple[float, float]]] = {
    "clip_low_threshold": (0.0, 1.0),
    "clip_high_threshold": (1.0, 10.0),
}
LOSS_CONFIG_KEYS: Final[tuple[str, ...]] = tuple(LOSS_CONFIG_RANGES)
#: Default absolute ratio bounds (low, high) per loss (docs/semantics.md#1); only ppo and
#: cispo clip.
DEFAULT_CLIP: Final[dict[str, tuple[float, float]]] = {
    LossFunction.CROSS_ENTROPY: (0.0, 10.0),
    LossFunction.IMPORTANCE_SAMPLING: (0.0, 10.0),
    LossFunction.PPO: (0.8, 1.2),
    LossFunction.CISPO: (0.0, 4.0),
}

# -- metrics -------------------------------------------------------------------------------


class Metric(Word):
    """The metric names users read in a result's ``metrics``: numerics, the engine and the
    fakes write them, both dialects serialise them (Tinker as ``name:reduction``, with the
    reduction each states in :data:`METRIC_REDUCTIONS`)."""

    #: forward / forward_backward: the per-datum mean of each datum's summed loss
    LOSS = "loss"
    #: the policy-gradient loss (the same value; also per datum)
    PG_LOSS = "actor/pg_loss"
    #: the norm of the gradients accumulated so far (forward_backward)
    ACTOR_GRAD_NORM = "actor/grad_norm"
    #: ppo / cispo: the weighted fraction of clipped ratios
    PG_CLIPFRAC = "actor/pg_clipfrac"
    #: RL losses: the weighted mean of ``sampling logprob - logprob``
    PPO_KL = "actor/ppo_kl"
    #: with ``ref_log_prob``: the weighted mean of ``logprob - ref``
    KL_REF = "actor/kl_ref"
    #: tokens in the batch
    GLOBAL_TOKEN_NUM = "global_token_num"
    #: model FLOPs of the pass, the device's peak FLOP/s, and their utilisation
    ESTIMATED_FLOPS = "estimated_flops"
    PROMISED_FLOPS = "promised_flops"
    MFU = "mfu"
    #: optim_step: the step's learning rate, gradient norm and updated parameter count
    LEARNING_RATE = "learning_rate"
    GRAD_NORM = "grad_norm"
    NUM_PARAMS_UPDATED = "num_params_updated"
    #: a custom loss: the cross-entropy surrogate's loss, beside the user's ``loss``
    SURROGATE_LOSS = "surrogate_loss"

    @property
    def reduction(self) -> str:
        """How Tinker reduces it over a batch (its ``name:reduction`` suffix)."""
        return METRIC_REDUCTIONS[self]

    @property
    def tinker_name(self) -> str:
        """The name the Tinker dialect reports it under: ``global_token_num:sum``."""
        return f"{self.value}:{self.reduction}"


#: Each metric's Tinker reduction: counts and FLOP figures add up over a batch (``sum``),
#: everything else is a mean; Tinker's ``loss:sum`` is the sum of the datums' elementwise
#: losses (server/tinker/results.py), so ``loss`` itself is a sum there.
METRIC_REDUCTIONS: Final[dict[Metric, str]] = {
    **dict.fromkeys(Metric, "mean"),
    Metric.LOSS: "sum",
    Metric.GLOBAL_TOKEN_NUM: "sum",
    Metric.ESTIMATED_FLOPS: "sum",
    Metric.PROMISED_FLOPS: "sum",
}
#: Metrics the Tinker dialect leaves out: its own ``loss:sum`` replaces both losses.
TINKER_OMITTED_METRICS: Final[frozenset[Metric]] = frozenset({Metric.LOSS, Metric.PG_LOSS})

# -- LoRA ----------------------------------------------------------------------------------

#: The LoRA ranks a session accepts (both dialects: ``LoraConfig.Rank``, ``lora_config.rank``).
LORA_RANK_MIN: Final = 1
LORA_RANK_MAX: Final = 256

# -- AdamW ---------------------------------------------------------------------------------

#: Wire keys of ``AdamParamsConfig`` -> the SDK's ``AdamParams`` field names.
ADAM_WIRE_KEYS: Final[dict[str, str]] = {
    "learningRate": "learning_rate",
    "beta1": "beta1",
    "beta2": "beta2",
    "eps": "eps",
    "weightDecay": "weight_decay",
    "gradClipNorm": "grad_clip_norm",
    "loraPlusLrRatio": "lora_plus_lr_ratio",
}
#: Wire key -> (minimum, maximum) the service accepts (its model's ranges).
ADAM_RANGES: Final[dict[str, tuple[float, float]]] = {
    "learningRate": (0.0, 0.01),
    "beta1": (0.0, 0.999999),
    "beta2": (0.0, 0.999999),
    "eps": (1e-16, 0.01),
    "weightDecay": (0.0, 1.0),
    "gradClipNorm": (0.0, 100.0),
    "loraPlusLrRatio": (1.0, 100.0),
}
ADAM_REQUIRED: Final[tuple[str, ...]] = ("learningRate",)
#: The SDK's ``AdamParams`` defaults, by wire key (``gradClipNorm``/``loraPlusLrRatio``:
#: off unless given).
ADAM_DEFAULTS: Final[dict[str, float]] = {
    "learningRate": 1e-4,
    "beta1": 0.9,
    "beta2": 0.999,
    "eps": 1e-8,
    "weightDecay": 0.01,
}

# -- errors --------------------------------------------------------------------------------


class ErrorCode(Word):
    """The error codes, each spelled once (both APIs share ``ValidationException``)."""

    VALIDATION = "ValidationException"
    NOT_FOUND = "ResourceNotFoundException"  # the runtime API's
    CONFLICT = "ConflictException"
    THROTTLING = "ThrottlingException"
    INTERNAL = "InternalServerException"
    CP_NOT_FOUND = "ResourceNotFound"  # the control plane's
    CP_IN_USE = "ResourceInUse"
    CP_LIMIT_EXCEEDED = "ResourceLimitExceeded"


#: "No such resource", as either API says it.
NOT_FOUND_CODES: Final[tuple[ErrorCode, ...]] = (ErrorCode.CP_NOT_FOUND, ErrorCode.NOT_FOUND)

#: Runtime (rest-json) error codes -> HTTP status.
RUNTIME_ERRORS: Final[dict[str, int]] = {
    ErrorCode.VALIDATION: 400,
    ErrorCode.NOT_FOUND: 404,
    ErrorCode.CONFLICT: 409,
    ErrorCode.THROTTLING: 429,
    ErrorCode.INTERNAL: 500,
}
#: Control-plane (json 1.1) error codes -> HTTP status (client faults are all 400).
CONTROL_PLANE_ERRORS: Final[dict[str, int]] = {
    ErrorCode.VALIDATION: 400,
    ErrorCode.CP_NOT_FOUND: 400,
    ErrorCode.CP_IN_USE: 400,
    ErrorCode.CP_LIMIT_EXCEEDED: 400,
}
#: What the SDK retries: these codes, and these HTTP statuses whatever the code.
RETRYABLE_CODES: Final = frozenset({ErrorCode.THROTTLING, ErrorCode.INTERNAL})
RETRYABLE_STATUSES: Final = frozenset({429, 500, 502, 503, 504})
#: Attempts the SDK makes at a submit refused with a retryable error before giving up (its
#: default ``max_transient_poll_errors``).
SDK_SUBMIT_ATTEMPTS: Final = 150


def is_retryable(code: str | None, http_status: int | None) -> bool:
    """Whether the SDK retries a refusal with this code and status."""
    return code in RETRYABLE_CODES or http_status in RETRYABLE_STATUSES


# -- names ---------------------------------------------------------------------------------

#: The model-package group a session saves into when none is given.
DEFAULT_GROUP: Final = "sagemaker-default"

# -- the Tinker dialect's defaults ---------------------------------------------------------


class TinkerLoss(Word):
    """The ``LossFnType`` values the Tinker SDK names beyond the runtime's losses."""

    DRO = "dro"
    GSPO = "gspo"
    STABLE_REINFORCE = "stable_reinforce"
    CUSTOM = "custom"


#: Every loss the Tinker SDK can name (its ``LossFnType``, in its order).
TINKER_LOSSES: Final[tuple[str, ...]] = (*LOSS_FUNCTIONS, *TinkerLoss)
#: The Tinker losses the dialect runs: the runtime's, and ``dro``, ``gspo`` and
#: ``stable_reinforce`` over them (tinker/dro.py, tinker/sequence_plans.py).
TINKER_RUN_LOSSES: Final[tuple[str, ...]] = (
    *LOSS_FUNCTIONS,
    TinkerLoss.DRO,
    TinkerLoss.GSPO,
    TinkerLoss.STABLE_REINFORCE,
)
#: ``dro``'s penalty when ``loss_fn_config`` has no ``beta`` (numerics/dro_loss.py; the
#: value of the SDK docs' example, which give no default).
TINKER_DRO_BETA: Final = 0.05
#: LoRA rank of a model whose ``lora_config`` gives none (the SDK's default rank).
TINKER_LORA_RANK: Final = 32
#: LoRA alpha of every Tinker model (Tinker's API has no alpha; docs/tinker.md).
TINKER_LORA_ALPHA: Final = 32
#: What a sampling request without ``max_tokens`` generates.
TINKER_MAX_TOKENS: Final = 512
#: The SDK's ``SamplingParams`` defaults for a request that leaves them out (top_k -1: no cut).
TINKER_TEMPERATURE: Final = 1.0
TINKER_TOP_P: Final = 1.0
TINKER_TOP_K: Final = -1
#: The SDK's ``AdamParams`` defaults, by its field names (``grad_clip_norm`` 0: no clipping).
TINKER_ADAM_DEFAULTS: Final[dict[str, float]] = {
    "learning_rate": 1e-4,
    "beta1": 0.9,
    "beta2": 0.95,
    "eps": 1e-12,
    "weight_decay": 0.0,
    "grad_clip_norm": 0.0,
}
#: The rows a list request (training runs, checkpoints) without ``limit`` answers.
TINKER_PAGE_LIMIT: Final = 20
#: Seconds without a heartbeat or request before a Tinker session expires (the SDK beats
#: every 10 s and warns after 120 s without an answer; ``serve --heartbeat-timeout``).
TINKER_HEARTBEAT_TIMEOUT_S: Final = 120.0
#: Seconds a request that needs a fresh session's engine (a create-via-load, a hidden
#: sampler) waits for it to come up.
TINKER_START_WAIT_S: Final = 600.0
