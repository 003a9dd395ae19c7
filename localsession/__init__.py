"""localsession: Amazon SageMaker's training-session API on one machine, with no cloud account.

The same 36 public names as ``sagemaker.train.training_session`` (sagemaker-train 1.27.0), so a
training loop changes one import line::

    from localsession import AdamParams, Datum, ModelInput, ServiceClient, TensorData

    svc = ServiceClient("us-west-2", role_arn="arn:aws:iam::000000000000:role/local")
    tc = svc.create_lora_training_client("localsession/tiny", rank=8, alpha=16)

Importing this package does not import torch; a session loads its model when it starts.
"""

from __future__ import annotations

from localsession.client.sampling_client import SamplingClient
from localsession.client.service_client import (
    DEFAULT_MODEL_PACKAGE_GROUP_NAME,
    DEFAULT_SESSION_NAME_PREFIX,
    ServiceClient,
)
from localsession.client.training_client import TrainingClient
from localsession.exceptions import (
    ArtifactDeletionError,
    OperationError,
    ResultMismatchError,
    TrainingSessionError,
    is_retryable,
)
from localsession.futures import APIFuture, RequestStatus
from localsession.mocking import mock as mock  # not in __all__: the SDK has no such name
from localsession.types import (
    AdamParams,
    Datum,
    EncodedTextChunk,
    ForwardBackwardOutput,
    LoadStateResponse,
    LossFunction,
    ModelInput,
    ModelInputChunk,
    ModelPackageDeletion,
    ModelPackageInfo,
    ModelPackageKind,
    OptimStepResponse,
    SampledSequence,
    SampleResponse,
    SamplingParams,
    SaveStateResponse,
    SaveWeightsResponse,
    SessionStatus,
    StopReason,
    TensorData,
    TensorDtype,
    TokenLogprob,
    TrainingSessionSummary,
    VpcConfig,
)

__all__ = [
    "ServiceClient",
    "TrainingClient",
    "SamplingClient",
    "APIFuture",
    "RequestStatus",
    "DEFAULT_MODEL_PACKAGE_GROUP_NAME",
    "DEFAULT_SESSION_NAME_PREFIX",
    "AdamParams",
    "Datum",
    "EncodedTextChunk",
    "ForwardBackwardOutput",
    "LoadStateResponse",
    "LossFunction",
    "ModelInput",
    "ModelInputChunk",
    "ModelPackageDeletion",
    "ModelPackageInfo",
    "ModelPackageKind",
    "OptimStepResponse",
    "SampledSequence",
    "SampleResponse",
    "SamplingParams",
    "SaveStateResponse",
    "SaveWeightsResponse",
    "SessionStatus",
    "TrainingSessionSummary",
    "StopReason",
    "TensorData",
    "TensorDtype",
    "TokenLogprob",
    "VpcConfig",
    "ArtifactDeletionError",
    "OperationError",
    "ResultMismatchError",
    "TrainingSessionError",
    "is_retryable",
]
