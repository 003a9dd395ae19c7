"""SFT in twenty lines: the smallest complete training loop, ready to copy.

Shows: opening a LoRA session, building ``Datum``s with ``target_tokens`` and ``weights``
(prompt tokens weighted 0), pipelining ``forward_backward`` and ``optim_step``, and sampling
from the base model. Change the import to ``sagemaker.train.training_session`` and the model
name to run it on the real service.

Run:    python examples/sft_basic.py
Expect: on 2 CPU cores, about 10 s; the per-token loss falls from ~5.6 (uniform over 259
        byte tokens) by well over half.
"""

from __future__ import annotations

from localsession import AdamParams, Datum, ModelInput, ServiceClient, TensorData

PAIRS = [
    ("Q: 2+2?\nA:", " 4"),
    ("Q: capital of France?\nA:", " Paris"),
    ("Q: opposite of up?\nA:", " down"),
]


def main() -> None:
    svc = ServiceClient("us-west-2", role_arn="arn:aws:iam::000000000000:role/example")
    with svc.create_lora_training_client("localsession/tiny", rank=16, alpha=32) as tc:
        tok = tc.get_tokenizer()
        batch = []
        for prompt, answer in PAIRS:
            p, full = tok.encode(prompt), tok.encode(prompt + answer) + [tok.eos_token_id]
            batch.append(
                Datum(
                    model_input=ModelInput.from_ints(full[:-1]),
                    loss_fn_inputs={
                        "target_tokens": TensorData(data=full[1:], dtype="int64"),
                        "weights": TensorData(
                            data=[0.0] * (len(p) - 1) + [1.0] * (len(full) - len(p))
                        ),
                    },
                )
            )
        # tokens per datum the loss counts (it is reported as a mean over datums)
        n = sum(sum(d.loss_fn_inputs["weights"].data) for d in batch) / len(batch)
        for step in range(100):
            fb = tc.forward_backward(batch, loss_fn="cross_entropy")
            tc.optim_step(AdamParams(learning_rate=5e-3))
            if step % 20 == 0:
                print(f"step {step:3d}  loss/token {fb.result().metrics['loss'] / n:.3f}")
        print("final loss/token", tc.forward(batch).result().metrics["loss"] / n)


if __name__ == "__main__":
    main()
