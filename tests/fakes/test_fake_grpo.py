"""A user's GRPO loop, unit-tested the way the fakes are meant for.

The loop below is what a user writes against the SDK: sample a group per problem, reward
each completion, centre the rewards into advantages, ``forward_backward("ppo")``,
``optim_step``, then refresh the sampler with the new weights. The tests script the
completions and assert the loop's own logic (rewards, advantages, the datums it builds, the
order of its calls) against values worked out by hand.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from fakes import FakeServiceClient
from localsession.types import AdamParams, Datum, ModelInput, SamplingParams

# -- the user's loop -----------------------------------------------------------------------


def reward(completion: str, answer: str) -> float:
    return 1.0 if completion.strip() == answer else 0.0


def centred(rewards: list[float]) -> list[float]:
    mean = sum(rewards) / len(rewards)
    return [r - mean for r in rewards]


def grpo_step(
    tc: Any, sampler: Any, problems: list[tuple[str, str]], group: int
) -> tuple[Any, dict[str, Any]]:
    tok = tc.get_tokenizer()
    params = SamplingParams(max_tokens=512, temperature=1.0)
    futures = [
        sampler.sample(
            ModelInput.from_ints(tok.encode(q)), num_samples=group, sampling_params=params
        )
        for q, _ in problems
    ]
    datums, rewards = [], []
    for (question, answer), future in zip(problems, futures, strict=True):
        sequences = future.result().sequences
        group_rewards = [
            reward(tok.decode(s.tokens, skip_special_tokens=True), answer) for s in sequences
        ]
        rewards.append(group_rewards)
        prompt = tok.encode(question)
        for seq, advantage in zip(sequences, centred(group_rewards), strict=True):
            if advantage == 0.0:
                continue  # no signal in this completion
            tokens = prompt + seq.tokens
            n = len(prompt) - 1  # prompt positions predicting prompt tokens
            datums.append(
                Datum(
                    model_input=ModelInput.from_ints(tokens[:-1]),
                    loss_fn_inputs={
                        "target_tokens": tokens[1:],
                        "weights": [0.0] * n + [1.0] * len(seq.tokens),
                        "logprobs": [0.0] * n + list(seq.logprobs or []),
                        "advantages": [0.0] * n + [advantage] * len(seq.tokens),
                    },
                )
            )
    metrics: dict[str, Any] = {"rewards": rewards, "datums": len(datums)}
    if datums:
        fb = tc.forward_backward(datums, "ppo")
        step = tc.optim_step(AdamParams(learning_rate=1e-2))
        metrics.update(fb.result().metrics)
        step.result()
    return tc.save_weights_and_get_sampling_client(), metrics


# -- tests ---------------------------------------------------------------------------------

PROBLEMS = [("2+3=", "5"), ("4+4=", "8")]


@pytest.fixture(scope="module", autouse=True)
def warm_process() -> None:
    """Pay the one-time costs (torch kernels, botocore's service model) before timing."""
    with FakeServiceClient() as fake:
        tc = fake.create_lora_training_client("fakes/bigram", rank=8)
        grpo_step(tc, tc.create_sampling_client(), PROBLEMS[:1], group=2)


@pytest.fixture
def fake() -> Iterator[FakeServiceClient]:
    with FakeServiceClient() as client:
        client.script.on_prompt("2+3=", "5", "six", "5", "x")
        client.script.on_prompt("4+4=", "8")  # always right: no learning signal
        yield client


def test_one_step_rewards_advantages_and_loss(fake: FakeServiceClient) -> None:
    tc = fake.create_lora_training_client("fakes/bigram", rank=8)
    started = time.perf_counter()
    _, metrics = grpo_step(tc, tc.create_sampling_client(), PROBLEMS, group=4)
    assert time.perf_counter() - started < 1.0

    assert metrics["rewards"] == [[1.0, 0.0, 1.0, 0.0], [1.0, 1.0, 1.0, 1.0]]
    assert metrics["datums"] == 4  # the all-correct group is skipped
    fb_call = fake.calls.of("forward_backward")[0]
    datums = fb_call.request["operationConfig"]["forwardBackward"]["datumList"]
    per_datum = [
        sorted(set(d["lossFnInputs"]["advantages"]["data"][len("2+3=") :])) for d in datums
    ]
    assert per_datum == [[0.5], [-0.5], [0.5], [-0.5]]
    # Scripted logprobs come from the sampled (base) weights, which the trainer also starts
    # from: every ratio is 1, so ppo's loss is -sum(A) over completion tokens. Completion
    # lengths with <eos>: "5" 2, "six" 4, "5" 2, "x" 2 -> -(0.5*2 - 0.5*4 + 0.5*2 - 0.5*2),
    # reported as the mean over the 4 datums.
    assert metrics["loss"] == pytest.approx(1.0 / 4, abs=1e-4)
    assert metrics["actor/ppo_kl"] == pytest.approx(0.0, abs=1e-5)
    assert metrics["actor/pg_clipfrac"] == 0.0
    assert fake.calls.methods() == [
        "sample",
        "sample",
        "forward_backward",
        "optim_step",
        "save_weights_for_sampler",
        "load_weights_for_sampling",
    ]


def test_two_steps_refresh_the_sampler(fake: FakeServiceClient) -> None:
    tc = fake.create_lora_training_client("fakes/bigram", rank=8)
    sampler = tc.create_sampling_client()
    started = time.perf_counter()
    for _ in range(2):
        sampler, metrics = grpo_step(tc, sampler, PROBLEMS, group=4)
        # the refreshed sampler scores with the trained weights: still on-policy
        assert metrics["actor/ppo_kl"] == pytest.approx(0.0, abs=1e-5)
    assert time.perf_counter() - started < 1.0
    second_samples = fake.calls.of("sample")[2:]
    saved = fake.calls.of("save_weights_for_sampler")[0].result
    assert saved is not None
    assert {c.args["model_package_arn"] for c in second_samples} == {saved["modelPackageArn"]}
    fake.calls.assert_all_succeeded()
    fake.calls.assert_optim_step_after_each_forward_backward()
    fake.calls.assert_no_stale_samples()


def test_a_loop_that_forgets_to_refresh_is_caught(fake: FakeServiceClient) -> None:
    tc = fake.create_lora_training_client("fakes/bigram", rank=8)
    stale = tc.save_weights_and_get_sampling_client()  # bound to the weights of step 0
    for _ in range(2):
        _, metrics = grpo_step(tc, stale, PROBLEMS, group=4)  # bug: keeps the old sampler
    # Off-policy now: the second step's ratios are not 1, so ppo's loss left -sum(A) = 1.
    assert abs(metrics["loss"] - 1.0) > 1e-2
    with pytest.raises(AssertionError, match="stale weights"):
        fake.calls.assert_no_stale_samples()
    fake.calls.assert_no_stale_samples(max_lag=1)


def test_a_loop_that_never_steps_is_caught(fake: FakeServiceClient) -> None:
    tc = fake.create_lora_training_client("fakes/bigram", rank=8)
    datum = Datum(
        model_input=ModelInput.from_ints([257, 1, 2]),
        loss_fn_inputs={"target_tokens": [1, 2, 258], "weights": [1.0, 1.0, 1.0]},
    )
    tc.forward_backward([datum], "cross_entropy").result()
    with pytest.raises(AssertionError, match="no optim_step after it"):
        fake.calls.assert_optim_step_after_each_forward_backward()
