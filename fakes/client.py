"""``FakeServiceClient``: a drop-in ``ServiceClient`` for unit-testing training loops.

It *is* a ``localsession.ServiceClient`` (same methods, same Training and Sampling clients,
same futures and errors) whose backend is a :class:`~fakes.fake_service.FakeService`: the real
runtime with an instant, deterministic bigram model (pure Python by default; on torch with
``numerics=True``). On top it offers the test controls:

- ``fake.script``: what ``sample`` returns (:mod:`fakes.script`);
- ``fake.faults`` (the runtime's :class:`~localsession.runtime.faults.Faults`) and the
  shortcuts :meth:`~FakeServiceClient.fail_next`, :meth:`~FakeServiceClient.throttle_next`,
  :meth:`~FakeServiceClient.fail_saves`, :meth:`~FakeServiceClient.expire_session`,
  :meth:`~FakeServiceClient.mismatch_logprobs_next`;
- ``fake.calls``: the call log and its assertions (:mod:`fakes.calls`);
- ``fake.advance()`` / ``fake.run_until_idle()``: the manual clock (``manual=True``).

Use it as a context manager, or call :meth:`~FakeServiceClient.close`, to release its
threads and its temporary package directory.
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path
from typing import Any

from fakes.calls import Call, CallLog
from fakes.fake_service import FakeService
from fakes.script import Script
from localsession import vocab
from localsession.client.service_client import ServiceClient
from localsession.runtime.faults import Faults

FAKE_ROLE = "arn:aws:iam::000000000000:role/fakes"


def _session_name(session: Any) -> str:
    """A session name from a name, a session ARN, or a Training/Sampling client."""
    name = getattr(session, "training_session_name", session)
    if not isinstance(name, str):
        raise TypeError(f"expected a session name or a client, got {type(session).__name__}")
    return name.rsplit("/", 1)[-1] if name.startswith("arn:") else name


class FakeServiceClient(ServiceClient):
    """A ``ServiceClient`` over the fake engine, with scripts, faults, a log and a clock."""

    def __init__(
        self,
        region: str | None = None,
        *,
        role_arn: str = FAKE_ROLE,
        manual: bool = False,
        strict: bool = True,
        base_models: list[str] | None = None,
        home: Path | None = None,
        max_sessions: int | None = None,
        numerics: bool = False,
        torch_threads: int | None = 1,
        service: FakeService | None = None,
        **service_client_kwargs: Any,
    ) -> None:
        """``manual``: futures resolve only on :meth:`advance` / :meth:`run_until_idle`.
        ``strict``: the service limits (as ``ServiceClient``). ``base_models``: the only names
        sessions may use (default: any name). ``home``: where saved packages go (default: a
        temporary directory removed by :meth:`close`). ``numerics``: run the bigram engine on
        torch (real LoRA tensors and the torch engine's loss code) instead of the light,
        torch-free engine. ``torch_threads`` (numeric fake only): torch's intra-op threads
        while the fake is open (restored by :meth:`close`; None leaves them alone).
        ``service``: share one fake service between several clients (the other settings are
        then the service's)."""
        self.service = service or FakeService(
            manual=manual,
            base_models=base_models,
            home=home,
            max_sessions=max_sessions,
            strict=strict,
            numerics=numerics,
            torch_threads=torch_threads,
        )
        self._owns_service = service is None
        super().__init__(
            region or "us-west-2",  # a test double: no AWS configuration needed
            role_arn=role_arn,
            strict=strict,
            backend=self.service,
            **service_client_kwargs,
        )

    # -- test controls -------------------------------------------------------------------

    @property
    def script(self) -> Script:
        return self.service.script

    @property
    def calls(self) -> CallLog:
        return self.service.calls

    @property
    def faults(self) -> Faults:
        return self.service.faults

    def fail_next(
        self,
        kind: str | Collection[str],
        count: int = 1,
        *,
        at: str = "execution",
        code: str | None = None,
        message: str | None = None,
    ) -> None:
        """Fail the next ``count`` ops of ``kind`` (see ``Faults.fail_next``)."""
        self.faults.fail_next(kind, count, at=at, code=code, message=message)

    def throttle_next(self, count: int = 1) -> None:
        """Throttle the next ``count`` runtime requests (the SDK retries each one)."""
        self.faults.throttle_next(count)

    def fail_saves(self, count: int = 1, *, message: str | None = None) -> None:
        """Make the next ``count`` ``save_state`` / ``save_weights_for_sampler`` ops fail."""
        self.faults.fail_next(
            (vocab.OpKind.SAVE_WEIGHTS, vocab.OpKind.SAVE_STATE), count, message=message
        )

    def expire_session(self, session: Any) -> None:
        """Expire a session now, as its idle timeout would (name, ARN or client)."""
        self.service.expire_session(_session_name(session))

    def mismatch_logprobs_next(self, count: int = 1) -> None:
        """The next ``count`` ``compute_logprobs`` results come back one value short (the SDK
        raises ``ResultMismatchError``)."""
        if type(count) is not int or count < 1:
            raise ValueError(f"count must be an integer >= 1, got {count!r}")
        self.service.knobs.add_truncation(count)

    def engine(self, session: Any) -> Any:
        """The engine behind a session: a ``LightEngine`` (``.row(prev)`` is a live logit
        row) or, with ``numerics=True``, a ``FakeEngine`` (``.table()``: the live table)."""
        return self.service.engine(_session_name(session))

    # -- the clock -----------------------------------------------------------------------

    @property
    def manual(self) -> bool:
        return self.service.manual

    def set_manual(self, manual: bool) -> None:
        """Switch the clock; leaving manual mode releases everything held."""
        self.service.set_manual(manual)

    def advance(self, n: int = 1) -> list[Call]:
        """Let the next ``n`` ops finish and resolve, in submission order."""
        return self.service.advance(n)

    def run_until_idle(self) -> list[Call]:
        """Let every op submitted so far finish and resolve."""
        return self.service.run_until_idle()

    # -- lifetime ------------------------------------------------------------------------

    def close(self) -> None:
        """Stop every session and remove the temporary package directory."""
        if self._owns_service:
            self.service.close()

    def __enter__(self) -> FakeServiceClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
