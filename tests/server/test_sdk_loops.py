"""The unmodified SageMaker SDK, over HTTP, running the loops users run: SFT, GRPO, resume,
model packages, and a differential check against the in-process clients."""

from __future__ import annotations

import logging
import warnings
from typing import Any

import pytest

from localsession import ServiceClient as LocalServiceClient

from .common import GROUP, ROLE, Running

MODEL = "localsession-tiny"  # the built-in tiny model's Hub content name (also accepted)
TEXT = [257, *b"the quick brown fox jumps over the lazy dog"]


def _ts() -> Any:
    import sagemaker.train.training_session as ts

    return ts


def _sft_batch(ts: Any) -> list[Any]:
    return [
        ts.Datum(
            model_input=ts.ModelInput.from_ints(TEXT[:-1]),
            loss_fn_inputs={"target_tokens": TEXT[1:], "weights": [1.0] * (len(TEXT) - 1)},
        )
    ]


def test_sft_loop_loss_falls(sdk: Any) -> None:
    ts = _ts()
    with sdk.create_lora_training_client(base_model=MODEL, rank=8) as tc:
        losses = []
        for _ in range(6):
            fb = tc.forward_backward(_sft_batch(ts), "cross_entropy")
            step = tc.optim_step(ts.AdamParams(learning_rate=5e-3))
            losses.append(fb.result().metrics["loss"])
            step.result()
    assert losses[-1] < 0.8 * losses[0], losses


def _reward(tokens: list[int]) -> float:
    """Reward completions that use many lowercase vowels (a learnable, cheap signal)."""
    return sum(t in set(b"aeiou") for t in tokens) / max(1, len(tokens))


def test_grpo_loop_with_saves(sdk: Any) -> None:
    ts = _ts()
    prompts = [[257, *b"say: "], [257, *b"word: "]]
    # botocore refuses max_tokens < 512 before sending; a stop string keeps samples short.
    params = ts.SamplingParams(max_tokens=512, temperature=1.0, seed=7, stop=["o"])
    k = 4
    with sdk.create_lora_training_client(base_model=MODEL, rank=8) as tc:
        sampler = tc.save_weights_and_get_sampling_client()
        for step in range(2):
            futures = [
                sampler.sample(
                    prompt=ts.ModelInput.from_ints(p), num_samples=k, sampling_params=params
                )
                for p in prompts
            ]  # all submitted before waiting
            datums = []
            for prompt, future in zip(prompts, futures, strict=True):
                sequences = future.result().sequences
                assert len(sequences) == k
                rewards = [_reward(s.tokens) for s in sequences]
                mean = sum(rewards) / k
                std = (sum((r - mean) ** 2 for r in rewards) / k) ** 0.5
                for seq, reward in zip(sequences, rewards, strict=True):
                    assert len(seq.logprobs) == len(seq.tokens)
                    advantage = (reward - mean) / (std + 1e-6)
                    n = len(seq.tokens)
                    datums.append(
                        ts.Datum(
                            model_input=ts.ModelInput.from_ints(prompt + seq.tokens[:-1]),
                            loss_fn_inputs={
                                "target_tokens": [0] * (len(prompt) - 1) + seq.tokens,
                                "weights": [0.0] * (len(prompt) - 1) + [1.0] * n,
                                "logprobs": [0.0] * (len(prompt) - 1) + list(seq.logprobs),
                                "advantages": [0.0] * (len(prompt) - 1) + [advantage] * n,
                            },
                        )
                    )
            fb = tc.forward_backward(datums, loss_fn="ppo")
            tc.optim_step(ts.AdamParams(learning_rate=1e-3)).result()
            metrics = fb.result().metrics
            assert metrics["global_token_num"] > 0
            sampler = tc.save_weights_and_get_sampling_client()
            assert step >= 0
        merged = tc.save_weights_for_sampler(merge_weights=True).result()
        state = tc.save_state().result()
    for arn in (merged.model_package_arn, state.model_package_arn):
        assert arn and arn.startswith("arn:aws:sagemaker:us-west-2:")
        assert ":model-package/g/" in arn


def test_resume_from_state_with_optimizer_and_quiet_exit(
    sdk: Any, caplog: pytest.LogCaptureFixture
) -> None:
    ts = _ts()
    batch = _sft_batch(ts)
    with sdk.create_lora_training_client(base_model=MODEL, rank=8) as tc:
        for _ in range(2):
            tc.forward_backward(batch, "cross_entropy")
            tc.optim_step(ts.AdamParams(learning_rate=5e-3))
        arn = tc.save_state("two steps").result().model_package_arn
        tc.forward_backward(batch, "cross_entropy")
        tc.optim_step(ts.AdamParams(learning_rate=5e-3)).result()
        expected = tc.forward(batch, "cross_entropy").result().metrics["loss"]

    with warnings.catch_warnings(record=True) as caught, caplog.at_level(logging.WARNING):
        warnings.simplefilter("always")
        resumed = sdk.create_training_client_from_state_with_optimizer(arn, rank=8)
        resumed.forward_backward(batch, "cross_entropy")
        resumed.optim_step(ts.AdamParams(learning_rate=5e-3)).result()
        got = resumed.forward(batch, "cross_entropy").result().metrics["loss"]
        resumed.stop()
        resumed.stop()  # a second stop is absorbed by the SDK (docs/wire.md#4 idempotency message)
    # The same third step from the checkpoint lands on the same loss (same optimizer state).
    assert got == pytest.approx(expected, rel=1e-5)
    # the tinker SDK's background telemetry of an earlier test's client (its server gone) is
    # not this loop's noise: only the SageMaker SDK and ours must stay quiet
    noise = [
        r
        for r in caplog.records
        if "http://" not in r.getMessage() and not r.name.startswith("tinker")
    ]
    assert noise == [] and caught == [], (noise, [str(w.message) for w in caught])


def test_model_packages_through_the_sdk(sdk: Any) -> None:
    ts = _ts()
    with sdk.create_lora_training_client(base_model=MODEL, rank=8) as tc:
        weights = tc.save_weights_for_sampler("w").result().model_package_arn
        state = tc.save_state("s").result().model_package_arn
    listed = [p.model_package_arn for p in sdk.list_model_packages(max_results=100)]
    assert listed.index(state) < listed.index(weights)  # newest first
    latest = sdk.get_latest_model_package(kind=ts.ModelPackageKind.CHECKPOINT)
    assert latest.model_package_arn == state
    assert sdk.get_latest_model_package(kind=ts.ModelPackageKind.MODEL).model_package_arn == weights
    sdk.delete_model_package(weights)
    assert weights not in [p.model_package_arn for p in sdk.list_model_packages(max_results=100)]
    sdk.delete_model_package(weights)  # absent: a no-op, as on the real service


def _differential_loop(
    service_client: Any, ts: Any
) -> tuple[list[float], list[list[int]], list[list[float]]]:
    losses: list[float] = []
    tokens: list[list[int]] = []
    logprobs: list[list[float]] = []
    with service_client.create_lora_training_client(base_model=MODEL, rank=4) as tc:
        for _ in range(3):
            fb = tc.forward_backward(_sft_batch(ts), "cross_entropy")
            tc.optim_step(ts.AdamParams(learning_rate=1e-2))
            losses.append(fb.result().metrics["loss"])
        sampler = tc.save_weights_and_get_sampling_client()
        result = sampler.sample(
            prompt=ts.ModelInput.from_ints(TEXT[:5]),
            num_samples=3,
            sampling_params=ts.SamplingParams(max_tokens=512, temperature=0.8, seed=11),
        ).result()
        for seq in result.sequences:
            tokens.append(list(seq.tokens))
            logprobs.append(list(seq.logprobs))
    return losses, tokens, logprobs


def test_differential_in_process_and_http_are_bit_identical(sdk: Any, server: Running) -> None:
    """The same seeded loop, through our clients in-process and through the real SDK over
    HTTP: identical losses, sampled tokens and logprobs (same runtime, exact JSON floats)."""
    import localsession as ls

    local = LocalServiceClient(role_arn=ROLE, backend=server.service, model_package_group_arn=GROUP)
    over_http = _differential_loop(sdk, _ts())
    in_process = _differential_loop(local, ls)
    assert over_http == in_process


def test_base_models_from_the_hub_and_the_tokenizer(sdk: Any, server: Running) -> None:
    """list_base_models() scans the local Hub and reports the ids users type, equal to the
    in-process list; a listed id is a valid base_model."""
    ids = sdk.list_base_models()
    local = LocalServiceClient(role_arn=ROLE, backend=server.service)
    assert ids == local.list_base_models()
    assert {"localsession/tiny", "localsession/small"} <= set(ids)
    assert ids == sorted(ids, key=str.lower)
    with sdk.create_lora_training_client(base_model="localsession/tiny", rank=4) as tc:
        assert tc.get_tokenizer is not None  # the tokenizer by name: test_sdk_by_name.py
