"""``localsession.mock()``: run the unmodified SageMaker SDK and boto3 against an in-process
localsession service, with no server and no sockets (moto's model, for training sessions).

Importing this package imports only the standard library; the server, botocore and (for
the engines) torch are imported when a mock starts. See ``docs/mock.md``.
"""

from __future__ import annotations

from localsession.mocking.core import Mock, mock

__all__ = ["Mock", "mock"]
