"""A stateful model check: hypothesis drives the clients (forward_backward, optim_step,
save, load, sample, stop) and checks the invariants against a model of what must hold:
sequence order, snapshot isolation, and no state change on a failed op.

The ``conformance`` hypothesis profile (default) runs a few short programs; the slow
``test_stateful_large`` runs many more. test_stateful.py imports this module inside its
tests, so collecting the suite (on a Tinker backend, where they are skipped) never needs
hypothesis.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from conformance.adapter import Backend
from conformance.suite._kit import TEXT_A, TEXT_B, TEXT_C, adam, logprobs, result, rl, sft

TEXTS = [TEXT_A, TEXT_B, TEXT_C]
SMALL = settings(
    max_examples=3,
    stateful_step_count=8,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=True,
)
LARGE = settings(SMALL, max_examples=25, stateful_step_count=20)


class ClientMachine(RuleBasedStateMachine):
    """The model: the weights are identified by the sequence of updates applied so far;
    ``probe`` (forward logprobs of TEXT_A) must be a function of that identity."""

    backend: Backend
    service_client: Any

    def __init__(self) -> None:
        super().__init__()
        b = self.backend
        self.ts = b.ts
        self.tc = self.service_client.create_lora_training_client(
            b.base_model, rank=b.limits.rank, alpha=2 * b.limits.rank
        )
        self.history: tuple[str, ...] = ()  # updates applied, as the model sees them
        self.pending = False  # gradient accumulated since the last step
        self.probes: dict[tuple[str, ...], list[float]] = {}
        self.saved: dict[str, tuple[tuple[str, ...], list[float]]] = {}
        self.samplers: list[tuple[Any, list[float | None]]] = []
        self.stopped = False
        self.seq = 0

    def _probe(self) -> list[float]:
        out = result(self.tc.forward([sft(self.ts, TEXT_A)], "cross_entropy"), self.backend)
        self.seq += 1
        return logprobs(out)[0]

    def _check_probe(self) -> list[float]:
        lp = self._probe()
        seen = self.probes.setdefault(self.history, lp)
        assert lp == pytest.approx(seen, abs=1e-5), (self.history, lp, seen)
        return lp

    @precondition(lambda self: not self.stopped)
    @rule(text=st.sampled_from(TEXTS))
    def forward_backward(self, text: tuple[int, ...]) -> None:
        result(self.tc.forward_backward([sft(self.ts, text)], "cross_entropy"), self.backend)
        self.seq += 1
        self.pending = True
        self.history += (f"fb{TEXTS.index(text)}",)

    @precondition(lambda self: not self.stopped)
    @rule()
    def optim_step(self) -> None:
        result(self.tc.optim_step(adam(self.ts, self.backend)), self.backend)
        self.seq += 1
        if self.pending:
            self.history += ("step",)
        self.pending = False
        # a step without gradient changes nothing: the history (and the probe) stay

    @precondition(lambda self: not self.stopped and not self.pending)
    @rule()
    def failing_op(self) -> None:
        """A forward_backward the service must fail (one datum of two is bad), then a step:
        nothing may change, not even by the valid datum's gradient."""
        n, m = len(TEXT_A), len(TEXT_B)
        good = rl(self.ts, TEXT_A, logprobs=[-1.0] * n, advantages=[1.0] * n)
        bad = rl(self.ts, TEXT_B, logprobs=[-1.0] * m, advantages=[1.0] * (m + 2))
        with pytest.raises(self.ts.OperationError):
            result(self.tc.forward_backward([good, bad], "ppo"), self.backend)
        self.seq += 1
        self.optim_step()
        self._check_probe()

    @precondition(lambda self: not self.stopped and not self.pending)
    @rule()
    def save(self) -> None:
        lp = self._check_probe()
        arn = result(self.tc.save_state(), self.backend).model_package_arn
        self.seq += 1
        self.saved[arn] = (self.history, lp)

    @precondition(lambda self: not self.stopped and bool(self.saved))
    @rule(data=st.data())
    def load(self, data: st.DataObject) -> None:
        arn = data.draw(st.sampled_from(sorted(self.saved)))
        result(self.tc.load_state(arn), self.backend)
        self.seq += 1
        history, lp = self.saved[arn]
        # the weights are the saved ones; the optimizer starts afresh (a new history)
        self.history = history + (f"load:{arn}",)
        self.probes.setdefault(self.history, lp)
        self.pending = False

    @precondition(lambda self: not self.stopped and not self.pending)
    @rule()
    def sample(self) -> None:
        sampler = self.tc.save_weights_and_get_sampling_client()
        self.seq += 1
        scored = result(sampler.compute_logprobs(list(TEXT_A)), self.backend)
        self.samplers.append((sampler, scored))
        self.forward_backward(TEXT_A)  # train on: the sampler must keep its snapshot
        self.optim_step()

    @precondition(lambda self: not self.stopped)
    @rule()
    def probe(self) -> None:
        if not self.pending:
            self._check_probe()
        else:
            self._probe()

    @precondition(lambda self: not self.stopped)
    @rule()
    def stop(self) -> None:
        self.tc.stop()
        self.stopped = True
        with pytest.raises(self.ts.TrainingSessionError):
            self.tc.optim_step(adam(self.ts, self.backend))
        self.seq += 1  # a refused call still takes a number (docs/wire.md#5)

    @precondition(lambda self: self.stopped)
    @rule(text=st.sampled_from(TEXTS))
    def closed_client_refuses(self, text: tuple[int, ...]) -> None:
        with pytest.raises(self.ts.TrainingSessionError):
            self.tc.forward([sft(self.ts, text)], "cross_entropy")
        self.seq += 1  # a refused call still takes a number (docs/wire.md#5)

    @invariant()
    def sequence_numbers_follow_calls(self) -> None:
        assert self.tc.current_sequence_number == self.seq

    @invariant()
    def samplers_see_their_snapshot(self) -> None:
        if self.stopped or not self.samplers:
            return
        sampler, scored = self.samplers[-1]
        assert result(sampler.compute_logprobs(list(TEXT_A)), self.backend) == scored

    def teardown(self) -> None:
        if not self.stopped:
            self.tc.stop()


def run(backend: Backend, service_client: Any, profile: str) -> None:
    """Run the machine with the ``small`` or ``large`` settings."""
    ClientMachine.backend = backend
    ClientMachine.service_client = service_client
    ClientMachine.TestCase.settings = {"small": SMALL, "large": LARGE}[profile]
    ClientMachine.TestCase().runTest()
