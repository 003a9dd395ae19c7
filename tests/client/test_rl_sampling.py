"""Sampling fidelity for RL through the public API: the trainer reproduces the sampler's
logprobs (ratio 1 at step 0), the temperature relation, and batching that never changes a
request's result (checked while recording the batches the engine actually ran)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from localsession import (
    Datum,
    ModelInput,
    SampledSequence,
    SamplingParams,
    ServiceClient,
    TensorData,
    TrainingClient,
)
from localsession.port import Admit
from localsession.runtime.service import Service

MODEL = "localsession/tiny"
PROMPT = [257, *b"Tell me a story:"]


@pytest.fixture
def tc(relaxed: ServiceClient) -> Iterator[TrainingClient]:
    with relaxed.create_lora_training_client(MODEL, rank=4, alpha=8) as client:
        yield client


def rl_datum(
    seq: SampledSequence, temperature: float | None, targets: list[int] | None = None
) -> Datum:
    """prompt + completion as one datum scoring the completion (prompt weights 0)."""
    tokens = PROMPT + seq.tokens
    n, k = len(tokens) - 1, len(PROMPT) - 1
    assert seq.logprobs is not None
    inputs: dict[str, Any] = {
        "target_tokens": TensorData(data=targets or tokens[1:], dtype="int64"),
        "weights": TensorData(data=[0.0] * k + [1.0] * len(seq.tokens)),
        "logprobs": TensorData(data=[0.0] * k + list(seq.logprobs)),
        "advantages": TensorData(data=[1.0] * n),
    }
    if temperature is not None:
        inputs["temperature"] = TensorData(data=[temperature] * n)
    return Datum(model_input=ModelInput.from_ints(tokens[:-1]), loss_fn_inputs=inputs)


def completion_logprobs(out: Any, seqs: list[SampledSequence]) -> list[list[float]]:
    return [o["logprobs"]["data"][len(PROMPT) - 1 :] for o in out.loss_fn_outputs][: len(seqs)]


@pytest.mark.parametrize("temperature", [0.7, 1.0])
def test_ratio_is_one_at_step_zero(tc: TrainingClient, temperature: float) -> None:
    sc = tc.create_sampling_client()
    params = SamplingParams(max_tokens=24, temperature=temperature, seed=5)
    seqs = sc.sample(PROMPT, num_samples=4, sampling_params=params).result(timeout=60).sequences
    datums = [rl_datum(s, temperature) for s in seqs]
    out = tc.forward(datums, "ppo").result(timeout=60)
    worst = max(
        abs(a - b)
        for lp, s in zip(completion_logprobs(out, seqs), seqs, strict=True)
        for a, b in zip(lp, s.logprobs or [], strict=True)
    )
    assert worst < 1e-4
    assert abs(out.metrics["actor/ppo_kl"]) < 1e-4
    assert out.metrics["actor/pg_clipfrac"] == 0.0
    n_tokens = sum(len(s.tokens) for s in seqs)
    # −Σ w·r·A with r = 1, A = 1, reported as the mean over the 4 datums
    assert out.metrics["loss"] == pytest.approx(-n_tokens / 4, rel=1e-4)


def test_without_temperature_input_the_ratio_is_not_one(tc: TrainingClient) -> None:
    """The check above can fail: scoring T = 0.7 samples at T = 1 gives other logprobs."""
    sc = tc.create_sampling_client()
    params = SamplingParams(max_tokens=24, temperature=0.7, seed=5)
    (seq,) = sc.sample(PROMPT, sampling_params=params).result(timeout=60).sequences
    out = tc.forward([rl_datum(seq, None)], "ppo").result(timeout=60)
    lp = completion_logprobs(out, [seq])[0]
    assert max(abs(a - b) for a, b in zip(lp, seq.logprobs or [], strict=True)) > 1e-2


def test_temperature_relation_on_sampled_positions(tc: TrainingClient) -> None:
    """log p_T(i) − log p_T(j) = (log p_1(i) − log p_1(j)) / T, i sampled, j another token."""
    temperature = 0.6
    sc = tc.create_sampling_client()
    params = SamplingParams(max_tokens=20, temperature=temperature, seed=9)
    (seq,) = sc.sample(PROMPT, sampling_params=params).result(timeout=60).sequences
    tokens = PROMPT + seq.tokens
    alt = tokens[1 : len(PROMPT)] + [(t + 101) % 256 for t in seq.tokens]
    batch = [
        rl_datum(seq, temperature),
        rl_datum(seq, temperature, alt),
        rl_datum(seq, 1.0),
        rl_datum(seq, 1.0, alt),
    ]
    out = tc.forward(batch, "cross_entropy").result(timeout=60)
    lp_t_i, lp_t_j, lp_1_i, lp_1_j = completion_logprobs(out, [seq] * 4)
    assert lp_t_i == pytest.approx(seq.logprobs, abs=1e-4)  # sampler reports p_T
    for a, b, c, d in zip(lp_t_i, lp_t_j, lp_1_i, lp_1_j, strict=True):
        assert a - b == pytest.approx((c - d) / temperature, abs=1e-4)
    assert any(
        abs((a - b) - (c - d)) > 0.1
        for a, b, c, d in zip(lp_t_i, lp_t_j, lp_1_i, lp_1_j, strict=True)
    )  # T really matters here


def record_batches(service: Service, tc: TrainingClient, monkeypatch: Any) -> list[int]:
    """Patch the session's engine to record the request count of every sample batch: the
    requests it started with plus those offered to it while it ran (continuous batching:
    each joiner is checked, and one refused by the check still counts as offered)."""
    engine = service.session(tc.training_session_name).engine
    assert engine is not None
    sizes: list[int] = []
    original = engine.sample
    active = threading.Lock()

    def sample(weights: str | None, requests: list[Any], admit: Admit | None = None) -> list[Any]:
        assert active.acquire(blocking=False), "two generations ran at once"
        batch = len(sizes)
        sizes.append(len(requests))

        def counted(check: Callable[[Any], Any]) -> list[Any]:
            assert admit is not None

            def offered(request: Any) -> Any:
                sizes[batch] += 1
                return check(request)

            return admit(offered)

        try:
            return original(weights, requests, admit=None if admit is None else counted)
        finally:
            active.release()

    monkeypatch.setattr(engine, "sample", sample)
    return sizes


def test_concurrent_requests_share_one_batch_without_changing_results(
    service: Service, tc: TrainingClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    sc = tc.create_sampling_client()

    def params(i: int) -> SamplingParams:
        return SamplingParams(max_tokens=16 + i % 5, temperature=0.9, seed=100 + i)

    prompts = [[257, *f"prompt {i}{'!' * (i % 7)}".encode()] for i in range(32)]
    target = 13
    sizes = record_batches(service, tc, monkeypatch)
    alone = sc.sample(prompts[target], num_samples=4, sampling_params=params(target))
    alone_seqs = alone.result(timeout=60).sequences
    assert sizes == [1]
    futures = [
        sc.sample(p, num_samples=4, sampling_params=params(i)) for i, p in enumerate(prompts)
    ]
    results = [f.result(timeout=120) for f in futures]
    assert sum(sizes[1:]) == 32
    assert max(sizes[1:]) >= 16, f"concurrent requests were not batched: {sizes}"
    for a, b in zip(alone_seqs, results[target].sequences, strict=True):
        assert a.tokens == b.tokens and a.stop_reason == b.stop_reason
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-5)


def test_a_bad_request_fails_alone(
    service: Service, tc: TrainingClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    sc = tc.create_sampling_client()
    params = SamplingParams(max_tokens=8, seed=3)
    expected = sc.sample(PROMPT, sampling_params=params).result(timeout=60).sequences[0].tokens
    sizes = record_batches(service, tc, monkeypatch)
    good = [sc.sample(PROMPT, sampling_params=params) for _ in range(3)]
    bad = sc.sample([257, 300], sampling_params=params)  # 300 is outside the vocabulary
    with pytest.raises(Exception, match="300"):
        bad.result(timeout=60)
    assert [f.result(timeout=60).sequences[0].tokens for f in good] == [expected] * 3
    # they shared a batch: the bad one in it (then each reruns alone), or refused as it joined
    assert max(sizes) == 4, sizes
