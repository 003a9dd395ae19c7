"""Errors: how each thing that goes wrong inside localsession reaches the user.

The runtime raises :class:`ServiceError` for a request it refuses outright; an engine raises
``EngineInputError`` for inputs it cannot run; anything else an op raises is a bug. Each has
one way out, the one the real service would show the SDK::

    raised inside                   in-process client             over HTTP (server)
    -----------------------------   ---------------------------   ---------------------------
    ServiceError(code, status)      botocore ClientError of the   status + body per protocol:
      at a request                  modelled class for ``code``   control plane (json 1.1)
                                    (client/backend.py)           {"__type": code, "message"},
                                                                  runtime (rest-json)
                                                                  x-amzn-ErrorType: code,
                                                                  {"message"} (server/wire.py)
    EngineInputError, a package     the op ends Failed, errorDetails = the message:
      that does not fit, or a       future.result() raises OperationError (both paths)
      ServiceError while an op
      runs
    any other exception while an    the op ends Failed, errorDetails = "Internal error while
      op runs                       <action>: <repr>" (logged with its traceback)
    a model that fails to load      the session ends Failed, ErrorDetails says why; the SDK's
                                    wait for Running raises
    a request botocore's model      ParamValidationError at result(), before anything is sent
      refuses (client side)         (client/backend.py check_params; the SDK does the same)

The codes and their HTTP statuses (:data:`localsession.vocab.RUNTIME_ERRORS`,
:data:`localsession.vocab.CONTROL_PLANE_ERRORS`):

    code                          status   raised for
    ---------------------------   ------   -------------------------------------------------
    ValidationException           400      malformed request, value out of range, reused
                                           sequence number, a session in the wrong status
    ResourceNotFound              400      control plane: unknown session or package
    ResourceNotFoundException     404      runtime: unknown session or operation
    ConflictException             409      runtime call while the session is not Running
                                           or Blocked
    ResourceInUse                 400      a session name already taken
    ResourceLimitExceeded         400      more active sessions than ``max_sessions``
    ThrottlingException           429      too many queued ops (the SDK retries)
    InternalServerException       500      injected faults (the SDK retries)
"""

from __future__ import annotations

from localsession import vocab


class ServiceError(Exception):
    """A request the service refused, with its wire error code and HTTP status."""

    def __init__(self, code: str, message: str, http_status: int = 400) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.http_status = http_status

    def __repr__(self) -> str:
        return f"ServiceError({self.code!r}, {self.message!r}, {self.http_status})"


def _runtime(code: str, message: str) -> ServiceError:
    return ServiceError(code, message, vocab.RUNTIME_ERRORS[code])


def _control(code: str, message: str) -> ServiceError:
    return ServiceError(code, message, vocab.CONTROL_PLANE_ERRORS[code])


def validation(message: str) -> ServiceError:
    return _runtime(vocab.ErrorCode.VALIDATION, message)


def not_found(message: str, *, runtime: bool) -> ServiceError:
    """Control plane says ``ResourceNotFound`` (400); the runtime ``...Exception`` (404)."""
    if runtime:
        return _runtime(vocab.ErrorCode.NOT_FOUND, message)
    return _control(vocab.ErrorCode.CP_NOT_FOUND, message)


def conflict(message: str) -> ServiceError:
    return _runtime(vocab.ErrorCode.CONFLICT, message)


def resource_in_use(message: str) -> ServiceError:
    return _control(vocab.ErrorCode.CP_IN_USE, message)


def limit_exceeded(message: str) -> ServiceError:
    return _control(vocab.ErrorCode.CP_LIMIT_EXCEEDED, message)


def throttling(message: str) -> ServiceError:
    return _runtime(vocab.ErrorCode.THROTTLING, message)


def op_error_details(exc: BaseException, action: str, expected: tuple[type, ...] = ()) -> str:
    """An op's ``errorDetails`` for ``exc``, raised while ``action`` (rows 2-3 of the table):
    the message of a refusal or of an ``expected`` (input) error, else an internal error."""
    if isinstance(exc, ServiceError):
        return exc.message
    if isinstance(exc, expected):
        return str(exc)
    return f"Internal error while {action}: {exc!r}"
