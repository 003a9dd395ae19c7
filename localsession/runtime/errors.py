"""Service errors: the codes and HTTP statuses the real service answers with.

The runtime raises :class:`ServiceError` for a request it refuses outright. Front ends turn it
into what their callers expect: the in-process clients into ``botocore.exceptions.ClientError``
(exactly what the SDK raises for the same refusal), the HTTP server into a JSON error body.

Control-plane codes (json 1.1, HTTP 400 for client faults): ``ValidationException``,
``ResourceNotFound``, ``ResourceInUse``, ``ResourceLimitExceeded``.
Runtime codes (rest-json): ``ValidationException`` 400, ``ResourceNotFoundException`` 404,
``ConflictException`` 409, ``ThrottlingException`` 429, ``InternalServerException`` 500.
"""

from __future__ import annotations


class ServiceError(Exception):
    """A request the service refused, with its wire error code and HTTP status."""

    def __init__(self, code: str, message: str, http_status: int = 400) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.http_status = http_status

    def __repr__(self) -> str:
        return f"ServiceError({self.code!r}, {self.message!r}, {self.http_status})"


def validation(message: str) -> ServiceError:
    return ServiceError("ValidationException", message, 400)


def not_found(message: str, *, runtime: bool) -> ServiceError:
    """Control plane says ``ResourceNotFound`` (400); the runtime ``...Exception`` (404)."""
    if runtime:
        return ServiceError("ResourceNotFoundException", message, 404)
    return ServiceError("ResourceNotFound", message, 400)


def conflict(message: str) -> ServiceError:
    return ServiceError("ConflictException", message, 409)


def resource_in_use(message: str) -> ServiceError:
    return ServiceError("ResourceInUse", message, 400)


def limit_exceeded(message: str) -> ServiceError:
    return ServiceError("ResourceLimitExceeded", message, 400)


def throttling(message: str) -> ServiceError:
    return ServiceError("ThrottlingException", message, 429)
