"""The launch post's GRPO loop, written against the real SDK only (no localsession import).

The shape of AWS's launch-post script for the training-session API: a ``ServiceClient``, a
LoRA training client on ``openai/gpt-oss-20b``, the SDK's own tokenizer, K samples per prompt
all in flight before any result is read, group-normalised rewards, ``forward_backward`` with
``importance_sampling``, ``optim_step``, and a fresh sampler every step. Everything the loop
observes is returned, so two runs can be compared value for value.
"""

from __future__ import annotations

from typing import Any

ROLE = "arn:aws:iam::123456789012:role/R"
GROUP = "arn:aws:sagemaker:us-west-2:123456789012:model-package-group/g"
S3 = "s3://bucket/out"
BASE_MODEL = "openai/gpt-oss-20b"
QUESTIONS = ["What is 2 + 3?", "Name a colour."]
#: botocore refuses max_tokens below 512 before sending; stop strings keep samples short.
STOP = [" ", "e", "a", "o", "?"]


def reward(text: str) -> float:
    """A cheap, learnable signal: the share of letters among the completion's characters."""
    return sum(c.isalpha() for c in text) / max(1, len(text))


def grpo(
    base_model: str = BASE_MODEL, steps: int = 2, group: int = 4, concurrent: bool = True
) -> dict[str, Any]:
    """The loop; ``concurrent=False`` waits for each prompt's samples before sending the next
    (one request per sampling batch, so the batch composition cannot vary with timing)."""
    from sagemaker.train.training_session import (
        AdamParams,
        Datum,
        ModelInput,
        SamplingParams,
        ServiceClient,
    )

    service_client = ServiceClient(role_arn=ROLE, model_package_group_arn=GROUP, s3_output_path=S3)
    seen: dict[str, Any] = {"tokens": [], "logprobs": [], "metrics": [], "optim": []}
    with service_client.create_lora_training_client(base_model=base_model, rank=8) as tc:
        tokenizer = tc.get_tokenizer()
        prompts = [tokenizer.encode(q) for q in QUESTIONS]
        seen["prompts"] = prompts
        sampler = tc.save_weights_and_get_sampling_client()
        for step in range(steps):
            params = SamplingParams(max_tokens=512, temperature=1.0, seed=100 + step, stop=STOP)
            futures = []
            for p in prompts:
                futures.append(
                    sampler.sample(
                        prompt=ModelInput.from_ints(p), num_samples=group, sampling_params=params
                    )
                )
                if not concurrent:
                    futures[-1].result()
            datums = []
            for prompt, future in zip(prompts, futures, strict=True):
                sequences = future.result().sequences
                rewards = [reward(tokenizer.decode(s.tokens)) for s in sequences]
                mean = sum(rewards) / len(rewards)
                std = (sum((r - mean) ** 2 for r in rewards) / len(rewards)) ** 0.5
                for seq, r in zip(sequences, rewards, strict=True):
                    seen["tokens"].append(list(seq.tokens))
                    seen["logprobs"].append(list(seq.logprobs))
                    pad = [0.0] * (len(prompt) - 1)
                    n = len(seq.tokens)
                    datums.append(
                        Datum(
                            model_input=ModelInput.from_ints(prompt + seq.tokens[:-1]),
                            loss_fn_inputs={
                                "target_tokens": [0] * (len(prompt) - 1) + list(seq.tokens),
                                "weights": pad + [1.0] * n,
                                "logprobs": pad + list(seq.logprobs),
                                "advantages": pad + [(r - mean) / (std + 1e-6)] * n,
                            },
                        )
                    )
            fb = tc.forward_backward(datums, loss_fn="importance_sampling")
            step_future = tc.optim_step(AdamParams(learning_rate=1e-3))
            seen["metrics"].append(fb.result().metrics)
            seen["optim"].append(step_future.result().metrics)
            sampler = tc.save_weights_and_get_sampling_client()
        seen["arn"] = tc.save_weights_for_sampler().result().model_package_arn.rsplit(":", 1)[1]
    return seen
