"""The service's vocabulary, spelled out once: statuses, op kinds, losses, Adam, error codes.

Every other module imports these names instead of writing the strings again. Nothing here
imports torch or any other heavy package: the runtime, the engines, the fakes and the server
all read it. ``tests/test_vocab.py`` checks each table against botocore's model of the
service (``sagemakertrainingsessionruntime`` and ``sagemaker``), so a drift from the real
service fails a test instead of a user's loop.
"""

from __future__ import annotations

from typing import Final

# -- statuses ------------------------------------------------------------------------------

#: ``TrainingSessionStatus`` values (the ``sagemaker`` model's enum, in its order).
SESSION_CREATED: Final = "Created"
SESSION_SCHEDULED: Final = "Scheduled"
SESSION_RUNNING: Final = "Running"
SESSION_BLOCKED: Final = "Blocked"
SESSION_STOPPING: Final = "Stopping"
SESSION_STOPPED: Final = "Stopped"
SESSION_FAILED: Final = "Failed"
SESSION_EXPIRED: Final = "Expired"
SESSION_DELETING: Final = "Deleting"
SESSION_DELETION_FAILED: Final = "DeletionFailed"
SESSION_STATUSES: Final[tuple[str, ...]] = (
    SESSION_CREATED,
    SESSION_SCHEDULED,
    SESSION_RUNNING,
    SESSION_BLOCKED,
    SESSION_STOPPING,
    SESSION_STOPPED,
    SESSION_FAILED,
    SESSION_EXPIRED,
    SESSION_DELETING,
    SESSION_DELETION_FAILED,
)

#: Operation status values of ``Get*OperationResult`` (the runtime model's enum).
OP_PENDING: Final = "Pending"
OP_IN_PROGRESS: Final = "InProgress"
OP_COMPLETED: Final = "Completed"
OP_FAILED: Final = "Failed"
OP_SKIPPED: Final = "Skipped"
OP_STATUSES: Final[tuple[str, ...]] = (
    OP_PENDING,
    OP_IN_PROGRESS,
    OP_COMPLETED,
    OP_FAILED,
    OP_SKIPPED,
)
OP_TERMINAL: Final = frozenset({OP_COMPLETED, OP_FAILED, OP_SKIPPED})

# -- operation kinds -----------------------------------------------------------------------

#: Members of the ``operationConfig`` union of ExecuteTrainingOperation.
TRAINING_OPS: Final[tuple[str, ...]] = (
    "forward",
    "forwardBackward",
    "optimizerStep",
    "saveWeights",
    "saveState",
    "loadState",
)
#: Members of the ``operationConfig`` union of ExecuteSamplingOperation.
SAMPLING_OPS: Final[tuple[str, ...]] = ("sample", "computeLogprobs", "loadWeightsForSampling")
OP_KINDS: Final[tuple[str, ...]] = TRAINING_OPS + SAMPLING_OPS

#: Wire op kind -> the SDK method that sends it (one method per kind).
METHOD_OF_KIND: Final[dict[str, str]] = {
    "forward": "forward",
    "forwardBackward": "forward_backward",
    "optimizerStep": "optim_step",
    "saveWeights": "save_weights_for_sampler",
    "saveState": "save_state",
    "loadState": "load_state",
    "sample": "sample",
    "computeLogprobs": "compute_logprobs",
    "loadWeightsForSampling": "load_weights_for_sampling",
}
#: SDK method name (and a few spellings people use) -> the wire op kind it sends.
KIND_OF_METHOD: Final[dict[str, str]] = {
    **{method: kind for kind, method in METHOD_OF_KIND.items()},
    "optimStep": "optimizerStep",
    "load_state_with_optimizer": "loadState",
}

# -- losses --------------------------------------------------------------------------------

#: ``lossFnName`` values (the runtime model's enum).
LOSS_FUNCTIONS: Final[tuple[str, ...]] = ("cross_entropy", "importance_sampling", "ppo", "cispo")
RL_LOSSES: Final[tuple[str, ...]] = ("importance_sampling", "ppo", "cispo")
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
    "cross_entropy": ("target_tokens", "weights"),
    "importance_sampling": ("target_tokens", "weights", "logprobs", "advantages"),
    "ppo": ("target_tokens", "weights", "logprobs", "advantages"),
    "cispo": ("target_tokens", "weights", "logprobs", "advantages"),
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
    "cross_entropy": (0.0, 10.0),
    "importance_sampling": (0.0, 10.0),
    "ppo": (0.8, 1.2),
    "cispo": (0.0, 4.0),
}

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

#: The error codes, each spelled once (both APIs share ``ValidationException``).
VALIDATION: Final = "ValidationException"
NOT_FOUND: Final = "ResourceNotFoundException"  # the runtime API's
CONFLICT: Final = "ConflictException"
THROTTLING: Final = "ThrottlingException"
INTERNAL: Final = "InternalServerException"
CP_NOT_FOUND: Final = "ResourceNotFound"  # the control plane's
CP_IN_USE: Final = "ResourceInUse"
CP_LIMIT_EXCEEDED: Final = "ResourceLimitExceeded"
#: "No such resource", as either API says it.
NOT_FOUND_CODES: Final[tuple[str, ...]] = (CP_NOT_FOUND, NOT_FOUND)

#: Runtime (rest-json) error codes -> HTTP status.
RUNTIME_ERRORS: Final[dict[str, int]] = {
    VALIDATION: 400,
    NOT_FOUND: 404,
    CONFLICT: 409,
    THROTTLING: 429,
    INTERNAL: 500,
}
#: Control-plane (json 1.1) error codes -> HTTP status (client faults are all 400).
CONTROL_PLANE_ERRORS: Final[dict[str, int]] = {
    VALIDATION: 400,
    CP_NOT_FOUND: 400,
    CP_IN_USE: 400,
    CP_LIMIT_EXCEEDED: 400,
}
#: What the SDK retries: these codes, and these HTTP statuses whatever the code.
RETRYABLE_CODES: Final = frozenset({THROTTLING, INTERNAL})
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
