"""The error types a training session raises, and the rule for when a retry may help.

Refusals that the service sends back stay botocore ``ClientError`` subclasses; nothing here
wraps them. What lives here are the failures with no wire error of their own:

* ``OperationError``: an op was accepted, then ended ``Failed`` (or ``Skipped``);
* ``ResultMismatchError``: a result whose length does not fit the request it answers;
* ``ArtifactDeletionError``: S3 objects of a package that could not all be removed.

All three derive from ``TrainingSessionError``, which is also raised on its own for plain
conditions (a closed client, for example). Running out of time raises the built-in
``TimeoutError``, as ``concurrent.futures`` does. Each error pickles with its attributes, so
it can cross a process boundary inside a multiprocessing pool.
"""

from __future__ import annotations

from typing import Any, List, Optional

from botocore.exceptions import ClientError, HTTPClientError
from botocore.exceptions import ConnectionError as _BotoConnectionError

from localsession import vocab


def is_retryable(error: BaseException) -> bool:
    """True when sending the same request again could succeed.

    That is the case for throttling, the 5xx statuses and failures with no response; a
    request the service refused for what it said will be refused again, so it is False.
    """
    if isinstance(error, (_BotoConnectionError, HTTPClientError)):
        return True
    answer = (error.response or {}) if isinstance(error, ClientError) else None
    if answer is None:
        return bool(answer)
    status = (answer.get("ResponseMetadata") or {}).get("HTTPStatusCode")
    # The SDK's retry rule (vocab.is_retryable), plus any failure that never got a response
    # at all (connection refused, read timeout: botocore's connection error family, above).
    code = (answer.get("Error") or {}).get("Code")
    return vocab.is_retryable(code, status if isinstance(status, int) else None)


class TrainingSessionError(Exception):
    """Root of the errors this package defines; raised directly for simple conditions."""


class OperationError(TrainingSessionError):
    """An accepted operation that ended in a failed state; raised when its future resolves.

    ``operation_id`` names the failed op on the service side.
    """

    def __init__(
        self,
        operation_type: str,
        message: str,
        *,
        operation_id: Optional[str] = None,
    ):
        self.operation_type, self.message, self.operation_id = operation_type, message, operation_id
        what = operation_type if not operation_id else f"{operation_type} operation {operation_id}"
        super().__init__(what + " failed: " + str(message))

    def __reduce__(self) -> tuple[Any, ...]:
        # Rebuilt from the attributes: the default would call __init__ with the text alone.
        return _unpickle_operation_error, (
            type(self),
            self.operation_type,
            self.message,
            self.operation_id,
        )


def _unpickle_operation_error(
    klass: type[OperationError], kind: str, text: str, op_id: Optional[str]
) -> OperationError:
    return klass(kind, text, operation_id=op_id)


class ResultMismatchError(TrainingSessionError):
    """A per-token result whose length differs from the sequence that was sent."""

    def __init__(self, operation_type: str, expected: int, received: int):
        self.operation_type, self.expected, self.received = operation_type, expected, received
        text = (
            f"{operation_type} returned {received} values for a {expected}-token sequence. "
            "The result does not belong to this request. Issuing these operations one at a "
            "time avoids it."
        )
        super().__init__(text)

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.operation_type, self.expected, self.received)


#: How many failed keys the message spells out; the attribute keeps them all.
_SHOWN_KEYS = 5


class ArtifactDeletionError(TrainingSessionError):
    """Some S3 objects of a model package could not be deleted; the package was kept."""

    def __init__(self, model_package_arn: str, s3_uri: str, failed_keys: List[str]):
        self.model_package_arn, self.s3_uri = model_package_arn, s3_uri
        self.failed_keys: List[str] = failed_keys
        listed = ", ".join(failed_keys[:_SHOWN_KEYS])
        if len(failed_keys) > _SHOWN_KEYS:
            listed = f"{listed}, ... ({len(failed_keys)} total, see .failed_keys)"
        text = (
            f"Could not delete every object under {s3_uri} for model package {model_package_arn}"
            f": {listed}. The model package was NOT deleted, so it still points at these "
            "objects; retry once the cause is addressed (commonly s3:DeleteObject on that "
            "location)."
        )
        super().__init__(text)

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.model_package_arn, self.s3_uri, self.failed_keys)
