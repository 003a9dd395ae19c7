"""SamplingClient through the public API: seeds, streams, stop strings, logprobs, limits."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from botocore.exceptions import ParamValidationError

from localsession import (
    Datum,
    ModelInput,
    ResultMismatchError,
    SamplingClient,
    SamplingParams,
    ServiceClient,
    StopReason,
    TensorData,
    TrainingClient,
    TrainingSessionError,
)

MODEL = "localsession/tiny"
PROMPT = [1, 72, 101, 108, 108, 111, 44, 32]


@pytest.fixture
def tc(relaxed: ServiceClient) -> Iterator[TrainingClient]:
    with relaxed.create_lora_training_client(MODEL, rank=4, alpha=8) as client:
        yield client


def params(**kwargs: object) -> SamplingParams:
    return SamplingParams(max_tokens=kwargs.pop("max_tokens", 12), **kwargs)  # type: ignore[arg-type]


def test_fixed_seed_reproduces_and_streams_differ(tc: TrainingClient) -> None:
    sc = tc.create_sampling_client()
    first = sc.sample(PROMPT, num_samples=3, sampling_params=params(seed=7)).result(timeout=60)
    again = sc.sample(PROMPT, num_samples=3, sampling_params=params(seed=7)).result(timeout=60)
    tokens = [s.tokens for s in first.sequences]
    assert tokens == [s.tokens for s in again.sequences]
    assert len({tuple(t) for t in tokens}) == 3, "sample i uses seed + i, so streams differ"
    for seq in first.sequences:
        assert seq.logprobs is not None and len(seq.logprobs) == len(seq.tokens)
        assert all(lp <= 0.0 for lp in seq.logprobs)
        assert seq.stop_reason in (StopReason.STOP, StopReason.LENGTH)
    # Sample 1 of seed 7 is sample 0 of seed 8.
    shifted = sc.sample(PROMPT, sampling_params=params(seed=8)).result(timeout=60)
    assert shifted.sequences[0].tokens == tokens[1]


def test_stop_string_ends_generation(tc: TrainingClient) -> None:
    sc = tc.create_sampling_client()
    tokenizer = tc.get_tokenizer()
    # Find a character the model emits under a fixed seed, then stop on it.
    free = sc.sample(PROMPT, sampling_params=params(seed=3, max_tokens=24)).result(timeout=60)
    text = tokenizer.decode(free.sequences[0].tokens, skip_special_tokens=True)
    assert text, "the model generated nothing printable"
    stop = text[len(text) // 2]
    stopped = sc.sample(PROMPT, sampling_params=params(seed=3, max_tokens=24, stop=[stop]))
    seq = stopped.result(timeout=60).sequences[0]
    out = tokenizer.decode(seq.tokens, skip_special_tokens=True)
    assert seq.stop_reason == StopReason.STOP
    assert out.endswith(stop) and stop not in out[:-1]
    assert seq.tokens == free.sequences[0].tokens[: len(seq.tokens)]


def test_compute_logprobs_matches_forward(tc: TrainingClient) -> None:
    sc = tc.create_sampling_client()
    logprobs = sc.compute_logprobs(PROMPT).result(timeout=60)
    assert len(logprobs) == len(PROMPT) and logprobs[0] is None
    datum = Datum(
        model_input=ModelInput.from_ints(PROMPT[:-1]),
        loss_fn_inputs={
            "target_tokens": TensorData(data=PROMPT[1:], dtype="int64"),
            "weights": TensorData(data=[1.0] * (len(PROMPT) - 1)),
        },
    )
    # A fresh adapter has B = 0, so the training model equals the base model the sampler uses.
    outputs = tc.forward([datum]).result(timeout=60).loss_fn_outputs
    assert outputs is not None
    forward = outputs[0]["logprobs"]["data"]
    assert logprobs[1:] == pytest.approx(forward, abs=1e-5)
    assert asyncio.run(sc.compute_logprobs_async(PROMPT)) == logprobs


def test_prompt_logprobs(tc: TrainingClient) -> None:
    sc = tc.create_sampling_client()
    out = sc.sample(
        PROMPT, sampling_params=params(seed=1), include_prompt_logprobs=True, topk_prompt_logprobs=3
    ).result(timeout=60)
    reference = sc.compute_logprobs(PROMPT).result(timeout=60)
    assert out.prompt_logprobs is not None and out.prompt_logprobs[0] == 0.0
    assert out.prompt_logprobs[1:] == pytest.approx(reference[1:], abs=1e-5)
    assert out.topk_prompt_logprobs is not None and len(out.topk_prompt_logprobs) == len(PROMPT)
    top = out.topk_prompt_logprobs[1]
    assert len(top) == 3 and top[0].logprob >= top[1].logprob >= top[2].logprob


def test_max_tokens_limit_strict_and_relaxed(client: ServiceClient, tc: TrainingClient) -> None:
    with client.create_lora_training_client(MODEL, rank=4, alpha=8) as strict_tc:
        fut = strict_tc.create_sampling_client().sample(
            PROMPT, sampling_params=params(max_tokens=100)
        )
        with pytest.raises(ParamValidationError, match="maxTokens"):
            fut.result(timeout=60)
    relaxed = tc.create_sampling_client().sample(PROMPT, sampling_params=params(max_tokens=100))
    assert len(relaxed.result(timeout=60).sequences[0].tokens) <= 100


def test_concurrent_requests_are_batched_without_changing_outputs(tc: TrainingClient) -> None:
    sc = tc.create_sampling_client()
    alone = [
        sc.sample(PROMPT[: 3 + i], sampling_params=params(seed=i)).result(timeout=60)
        for i in range(4)
    ]
    together = [sc.sample(PROMPT[: 3 + i], sampling_params=params(seed=i)) for i in range(4)]
    for one, fut in zip(alone, together, strict=True):
        assert fut.result(timeout=60).sequences[0].tokens == one.sequences[0].tokens


def test_owning_and_derived_clients(relaxed: ServiceClient, tc: TrainingClient) -> None:
    derived = tc.create_sampling_client()
    with derived:
        pass
    with pytest.raises(TrainingSessionError, match="client is closed"):
        derived.sample(PROMPT)
    assert tc.forward(
        [
            Datum(
                model_input=ModelInput.from_ints(PROMPT),
                loss_fn_inputs={"target_tokens": PROMPT[1:] + [0], "weights": [1.0] * 8},
            )
        ]
    ).result(timeout=60)  # the training session keeps running
    owner = relaxed.create_sampling_client(base_model=MODEL)
    assert isinstance(owner, SamplingClient)
    name = owner.training_session_name
    owner.stop()
    [summary] = relaxed.list_sessions(name_contains=name)
    assert summary.status is not None and summary.status.value == "Stopped"
    with pytest.raises(ValueError, match="exactly one"):
        relaxed.create_sampling_client()


def test_result_mismatch_is_raised_for_a_wrong_length() -> None:
    from localsession.client.sampling_client import _logprobs_reader

    parse = _logprobs_reader(3)
    with pytest.raises(ResultMismatchError):
        parse({"operationResult": {"computeLogprobs": {"logprobs": [None, -1.0]}}})
