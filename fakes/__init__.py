"""Test doubles for unit-testing training loops written against the training-session SDK.

``FakeServiceClient`` is a drop-in ``ServiceClient`` whose sessions run localsession's own
runtime (futures, sequence order, errors and limits are the real ones) over a fake engine: a
bigram model over 259 byte tokens that is instant, deterministic and exact (losses,
gradients and optimizer steps are real numbers). By default the engine is pure Python and
torch is never imported (:mod:`fakes.light`); ``FakeServiceClient(numerics=True)`` runs the
torch bigram engine with a LoRA pair (:mod:`fakes.engine`), still without transformers, peft
or ``torch._dynamo``. On top of it a test can script samples (``fake.script``), inject faults
(``fake.fail_next``, ``fake.throttle_next``, ...), read a log of every call (``fake.calls``)
and drive a manual clock (``fake.advance()``). A pytest plugin with ready fixtures:
``pytest -p fakes.pytest_plugin``; a usage guide: ``fakes/README.md``.
"""

from __future__ import annotations

from fakes.calls import Call, CallLog
from fakes.client import FakeServiceClient
from fakes.fake_service import FakeService
from fakes.script import Completion, PromptInfo, Script
from fakes.tokenizer import ByteTokenizer
from localsession.runtime.faults import Faults

__all__ = [
    "ByteTokenizer",
    "Call",
    "CallLog",
    "Completion",
    "FakeService",
    "FakeServiceClient",
    "Faults",
    "PromptInfo",
    "Script",
]
