"""GRPO by model name through the SageMaker SDK, in the shape of AWS's launch-post loop.

Run as a user would: against ``localsession serve`` with its printed exports pasted into the
environment, or in-process after swapping the import line for ``from localsession import``.
It names the base model as the post does (``openai/gpt-oss-20b``), tokenizes text with the
SDK's own ``get_tokenizer()``, renders prompts with the chat template, samples K answers per
prompt from a fresh sampler each step, normalises rewards within each group, and trains with
``ppo``. Prints one JSON line with what the test checks.
"""

import json
import os
import statistics
import sys

from sagemaker.train.training_session import (
    AdamParams,
    Datum,
    ModelInput,
    SamplingParams,
    ServiceClient,
    TensorData,
)

ROLE_ARN = "arn:aws:iam::123456789012:role/SageMakerTrainingSessionRole"
BASE_MODEL = os.environ.get("GRPO_BASE_MODEL", "openai/gpt-oss-20b")
PROBLEMS = [("What is 2 + 3?", "5"), ("What is 4 + 4?", "8")]
K = 4
STEPS = 2


def reward(text: str, answer: str) -> float:
    return 1.0 if answer in text else sum(c.isdigit() for c in text) / max(1, len(text))


def main() -> None:
    service = ServiceClient(role_arn=ROLE_ARN, s3_output_path="s3://my-bucket/grpo")
    models = service.list_base_models()
    training_client = service.create_lora_training_client(base_model=BASE_MODEL, rank=8)
    tokenizer = training_client.get_tokenizer()
    params = SamplingParams(max_tokens=512, temperature=1.0, seed=3, stop=["\n"])
    losses = []
    for _step in range(STEPS):
        sampler = training_client.save_weights_and_get_sampling_client()
        prompts, futures = [], []
        for question, _ in PROBLEMS:
            text = tokenizer.apply_chat_template(
                [{"role": "user", "content": question}], add_generation_prompt=True, tokenize=False
            )
            prompt = tokenizer.encode(text, add_special_tokens=False)
            prompts.append(prompt)
            futures.append(
                sampler.sample(
                    prompt=ModelInput.from_ints(prompt), num_samples=K, sampling_params=params
                )
            )
        datums = []
        for prompt, future, (_, answer) in zip(prompts, futures, PROBLEMS, strict=True):
            sequences = future.result().sequences
            rewards = [
                reward(tokenizer.decode(s.tokens, skip_special_tokens=True), answer)
                for s in sequences
            ]
            mean, std = statistics.mean(rewards), statistics.pstdev(rewards)
            for seq, r in zip(sequences, rewards, strict=True):
                advantage = (r - mean) / (std + 1e-6)
                tokens = prompt + list(seq.tokens)
                n_prompt = len(prompt) - 1
                datums.append(
                    Datum(
                        model_input=ModelInput.from_ints(tokens[:-1]),
                        loss_fn_inputs={
                            "target_tokens": TensorData(data=tokens[1:], dtype="int64"),
                            "weights": TensorData(data=[0.0] * n_prompt + [1.0] * len(seq.tokens)),
                            "logprobs": TensorData(data=[0.0] * n_prompt + list(seq.logprobs)),
                            "advantages": TensorData(
                                data=[0.0] * n_prompt + [advantage] * len(seq.tokens)
                            ),
                        },
                    )
                )
        result = training_client.forward_backward(datums, loss_fn="ppo").result()
        training_client.optim_step(AdamParams(learning_rate=1e-3)).result()
        losses.append(result.metrics["loss"])
    print(
        json.dumps(
            {
                "models": models,
                "losses": losses,
                "tokenizer": type(tokenizer).__name__,
                "name_or_path": tokenizer.name_or_path,
                "hi": tokenizer.encode("hi"),
                "chat": tokenizer.apply_chat_template(
                    [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True
                ),
            }
        )
    )
    training_client.stop()


if __name__ == "__main__":
    sys.exit(main())
