"""``localsession demo``: a short SFT loop that needs nothing but the installed package.

It opens a LoRA session on ``localsession/tiny`` (or ``--model``), fine-tunes it with
``cross_entropy`` on a small chat dataset rendered with the model's chat template (prompt
tokens weighted 0), and prints one summary line: training and held-out loss before and after,
and training tokens per second.

``make demo`` (a source checkout) runs ``examples/grpo_math.py`` directly instead: GRPO on a
real chat model. The demo never loads files from ``examples/`` itself.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass

from tqdm import tqdm

from localsession import AdamParams, Datum, ModelInput, ServiceClient, TensorData, vocab

CHATS = [
    ("What is the capital of France?", "Paris is the capital of France."),
    ("What is 2 + 3?", "2 + 3 = 5."),
    ("Name a primary colour.", "Red is a primary colour."),
    ("What do bees make?", "Bees make honey."),
    ("How many legs does a spider have?", "A spider has eight legs."),
    ("What is the opposite of hot?", "The opposite of hot is cold."),
    ("Which planet is called the red planet?", "Mars is called the red planet."),
    ("What is frozen water called?", "Frozen water is called ice."),
]


@dataclass
class DemoResult:
    loss_before: float
    loss_after: float
    tokens_per_second: float
    steps: int
    seconds: float


def chat_datum(tokenizer: object, question: str, answer: str) -> Datum:
    """One SFT example: the prompt tokens get weight 0, the answer tokens weight 1."""
    prompt = [{"role": "user", "content": question}]
    prompt_ids: list[int] = tokenizer.apply_chat_template(  # type: ignore[attr-defined]
        prompt, add_generation_prompt=True, tokenize=True, return_dict=False
    )
    full_ids: list[int] = tokenizer.apply_chat_template(  # type: ignore[attr-defined]
        prompt + [{"role": "assistant", "content": answer}], tokenize=True, return_dict=False
    )
    weights = [0.0] * (len(prompt_ids) - 1) + [1.0] * (len(full_ids) - len(prompt_ids))
    return Datum(
        model_input=ModelInput.from_ints(full_ids[:-1]),
        loss_fn_inputs={
            "target_tokens": TensorData(data=full_ids[1:], dtype="int64"),
            "weights": TensorData(data=weights),
        },
    )


def per_token_loss(tc: object, batch: list[Datum]) -> float:
    """Mean loss per weighted token, from ``forward`` (no gradient)."""
    out = tc.forward(batch, loss_fn=vocab.LossFunction.CROSS_ENTROPY.value).result()  # type: ignore[attr-defined]
    return (
        float(out.metrics[vocab.Metric.LOSS]) * len(batch) / answer_tokens(batch)
    )  # a per-datum mean


def answer_tokens(batch: list[Datum]) -> float:
    """The number of tokens the loss counts (the weights' sum)."""
    total = 0.0
    for datum in batch:
        assert datum.loss_fn_inputs is not None
        total += sum(datum.loss_fn_inputs["weights"].data)
    return total


def run(
    model: str = "localsession/tiny", steps: int = 60, learning_rate: float = 5e-3
) -> DemoResult:
    service = ServiceClient(
        "us-west-2", role_arn="arn:aws:iam::000000000000:role/localsession-demo"
    )
    print(f"Starting a LoRA session on {model} ...", flush=True)
    with service.create_lora_training_client(model, rank=16, alpha=32) as tc:
        tokenizer = tc.get_tokenizer()
        train = [chat_datum(tokenizer, q, a) for q, a in CHATS[:6]]
        held_out = [chat_datum(tokenizer, q, a) for q, a in CHATS[6:]]
        loss_before = per_token_loss(tc, train)
        held_before = per_token_loss(tc, held_out)
        tokens = sum(len(d.model_input.to_ints()) for d in train if d.model_input is not None)
        started = time.perf_counter()
        bar = tqdm(range(steps), desc="SFT", unit="step")
        for _ in bar:
            fb = tc.forward_backward(train, loss_fn=vocab.LossFunction.CROSS_ENTROPY.value)
            tc.optim_step(AdamParams(learning_rate=learning_rate))
            loss = fb.result().metrics[vocab.Metric.LOSS] * len(train) / answer_tokens(train)
            bar.set_postfix(loss=f"{loss:.3f}")
        seconds = time.perf_counter() - started
        loss_after = per_token_loss(tc, train)
        held_after = per_token_loss(tc, held_out)
    result = DemoResult(loss_before, loss_after, tokens * steps / seconds, steps, seconds)
    print(
        f"SFT on {model}: train loss {loss_before:.3f} -> {loss_after:.3f} "
        f"({100 * (1 - loss_after / loss_before):.0f}% lower) in {steps} steps, "
        f"{seconds:.1f}s, {result.tokens_per_second:,.0f} train tokens/s "
        f"(held-out loss {held_before:.3f} -> {held_after:.3f})"
    )
    return result


def cli(args: argparse.Namespace) -> int:
    """``localsession demo``: the SFT loop. The exit code reports errors, not learning: a
    run whose loss did not fall still exits 0 (its summary line says what happened)."""
    run(args.model, args.steps or 60, args.learning_rate or 5e-3)
    return 0
