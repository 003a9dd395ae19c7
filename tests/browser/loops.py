"""Two short loops through the unmodified SDKs against one ``serve``: what the console tests
look at (and what docs/console.md's screenshot shows).

Each returns what its loop saw, from the SDK's own results: the losses, the kinds of its
training ops in the order it sent them, and its session's name on the server.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

ROLE = "arn:aws:iam::123456789012:role/R"
GROUP = "arn:aws:sagemaker:us-west-2:123456789012:model-package-group/console"
S3 = "s3://bucket/out"
REGION = "us-west-2"
TEXT = [257, *b"the quick brown fox jumps over the lazy dog"]
STEPS = 3


@dataclass
class Loop:
    """What one loop saw: its session (runtime name), losses, and training ops' kinds."""

    session: str = ""
    losses: list[float] = field(default_factory=list)
    kinds: list[str] = field(default_factory=list)
    samples: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


def sagemaker_loop(steps: int = STEPS) -> Loop:
    """SFT steps, a save for sampling and one sample, through ``sagemaker.train``'s SDK
    (its environment already points at the server)."""
    import sagemaker.train.training_session as ts

    client = ts.ServiceClient(role_arn=ROLE, model_package_group_arn=GROUP, s3_output_path=S3)
    loop = Loop()
    datum = ts.Datum(
        model_input=ts.ModelInput.from_ints(TEXT[:-1]),
        loss_fn_inputs={"target_tokens": TEXT[1:], "weights": [1.0] * (len(TEXT) - 1)},
    )
    tc = client.create_lora_training_client(base_model="localsession-tiny", rank=4)
    loop.session = tc.training_session_name if hasattr(tc, "training_session_name") else ""
    for _ in range(steps):
        fb = tc.forward_backward([datum], "cross_entropy")
        step = tc.optim_step(ts.AdamParams(learning_rate=5e-3))
        loop.losses.append(float(fb.result().metrics["loss"]))
        step.result()
        loop.kinds += ["forwardBackward", "optimizerStep"]
    sampler = tc.save_weights_and_get_sampling_client()
    loop.kinds.append("saveWeights")
    params = ts.SamplingParams(max_tokens=512, temperature=1.0, seed=3, stop=["o"])
    result = sampler.sample(
        prompt=ts.ModelInput.from_ints([257, *b"say: "]), num_samples=2, sampling_params=params
    ).result()
    loop.samples = len(result.sequences)

    def one_more() -> float:  # another step, for the live-update check
        loss = float(tc.forward_backward([datum], "cross_entropy").result().metrics["loss"])
        loop.kinds.append("forwardBackward")
        loop.losses.append(loss)
        return loss

    loop.extra["one_more"] = one_more
    return loop


def tinker_loop(steps: int = STEPS) -> Loop:
    """SFT steps, a checkpoint, and a sample, through the ``tinker`` SDK (TINKER_BASE_URL
    points at the server)."""
    import tinker

    types = tinker.types
    sc = tinker.ServiceClient()
    tc = sc.create_lora_training_client(base_model="localsession/tiny", rank=4, seed=0).result()
    datum = types.Datum(
        model_input=types.ModelInput.from_ints(TEXT[:-1]),
        loss_fn_inputs={"target_tokens": TEXT[1:], "weights": [1.0] * (len(TEXT) - 1)},
    )
    loop = Loop()
    for _ in range(steps):
        fb = tc.forward_backward([datum], "cross_entropy")
        step = tc.optim_step(types.AdamParams(learning_rate=5e-3))
        loop.losses.append(float(fb.result().metrics["loss:sum"]))  # one datum: its loss
        step.result()
        loop.kinds += ["forwardBackward", "optimizerStep"]
    tc.save_state("console-check").result()
    loop.kinds.append("saveState")
    sampler = tc.save_weights_and_get_sampling_client().result()
    loop.kinds.append("saveWeights")
    futures = [
        sampler.sample(
            types.ModelInput.from_ints([257, *b"say: "]),
            1,
            types.SamplingParams(max_tokens=8, temperature=1.0, seed=i),
        )
        for i in range(3)
    ]
    loop.samples = sum(len(f.result().sequences) for f in futures)
    loop.extra["service_client"] = sc
    loop.extra["model_id"] = tc.model_id
    return loop
