"""Continuous batching in the real sampler: requests admitted into a running batch between
decode steps decode exactly as they do alone (tokens equal, logprobs to float rounding),
whether their prompt is longer than the running context or shorter, and the running
requests are unaffected by the joiners."""

from __future__ import annotations

from collections.abc import Callable

import torch

from localsession.engine.torch_engine import TorchEngine
from localsession.port import EngineInputError, SampleRequest

LONG = [257, *b"A much longer prompt than the running context has so far, by far"]
SHORT = [257, 65]
RUNNING = SampleRequest(
    prompt=[257, *b"Once upon a time"], num_samples=2, max_tokens=20, seed=5, temperature=0.9
)
JOINERS = [
    SampleRequest(prompt=LONG, num_samples=3, max_tokens=12, seed=1, temperature=1.3, top_k=5),
    SampleRequest(prompt=SHORT, num_samples=1, max_tokens=25, seed=2, temperature=0.0),
    SampleRequest(prompt=SHORT, num_samples=2, max_tokens=0, seed=3),
]


def assert_same(alone: dict, joined: dict) -> None:
    for a, b in zip(alone.sequences, joined.sequences, strict=True):
        assert a.tokens == b.tokens and a.stop_reason == b.stop_reason
        torch.testing.assert_close(
            torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-5, rtol=0
        )


def test_admitted_requests_decode_as_alone(tiny_engine: TorchEngine) -> None:
    alone = [tiny_engine.sample(None, [r])[0] for r in [RUNNING, *JOINERS]]
    calls = 0

    def admit(check: Callable[[SampleRequest], SampleRequest]) -> list[SampleRequest]:
        nonlocal calls
        calls += 1
        if calls == 3:  # the long prompt joins after 3 steps (its context is the longer)
            return [check(JOINERS[0])]
        if calls == 15:  # these after 15 (shorter than the running context by then)
            return [check(r) for r in JOINERS[1:]]
        return []

    joined = tiny_engine.sample(None, [RUNNING], admit=admit)
    assert calls > 15 and len(joined) == 4
    for a, b in zip(alone, joined, strict=True):
        assert_same(a, b)
    assert joined[3].sequences[0].tokens == []


def test_admission_check_is_the_engines(tiny_engine: TorchEngine) -> None:
    """``check`` is the engine's own validation: a bad joiner raises there, for the caller
    to fail that job alone."""
    seen: list[str] = []

    def admit(check: Callable[[SampleRequest], SampleRequest]) -> list[SampleRequest]:
        if not seen:
            try:
                check(SampleRequest(prompt=[10**9], max_tokens=2))
            except EngineInputError as exc:
                seen.append(str(exc))
        return []

    out = tiny_engine.sample(None, [SampleRequest(prompt=SHORT, max_tokens=3, seed=1)], admit=admit)
    assert len(out) == 1 and len(out[0].sequences[0].tokens) == 3
    assert seen and "request 0" in seen[0]
