"""A GRPO step driven by the ``tinker`` SDK vs by the SageMaker SDK, both over HTTP.

One server (a thread of this process) serves both dialects over one service. Each step:
sample 4 completions for each of 2 chat prompts (seeded, max_tokens 512: the SageMaker SDK
allows no less; stopping at the turn's end ``<|im_end|>``, a stop string on both sides,
which the runtime maps to that special token's id), build ppo datums with
group-normalised rewards, one
``forward_backward`` + ``optim_step`` (the same AdamW settings on both sides: the two SDKs'
``AdamParams`` defaults differ), then a fresh sampler from saved weights. The two
clients run the same prompts and seeds on sessions of the same rank and LoRA seed,
alternating step by step (common.interleaved), so both see the same machine load.

The two prompts are sampled one after the other, not concurrently: concurrent requests join
one decode batch at whatever step each arrives, and a batch's shape changes the float
rounding of every logit, so a seeded draw near a token boundary can flip and a 512-token
sample then diverges (docs/semantics.md#3, "Batching"). Sampled alone, a request gives the
same tokens in both loops, the datums and weights stay equal, and both loops do the same
work. The "same samples" row checks that; when it fails the timing row fails too, because
its two numbers timed different work. Target: tinker ≤ 1.15× the SageMaker SDK (issue 27).

Run: python bench/bench_tinker.py [--smoke] [--runs 5] [--model NAME]
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bench.common import Row, bench_args, emit, interleaved, median  # noqa: E402
from localsession.mocking.hooks import scoped_environ  # noqa: E402
from localsession.mocking.tinker_server import API_KEY  # noqa: E402
from localsession.runtime.service import ServiceConfig  # noqa: E402
from localsession.server.endpoints import client_env  # noqa: E402
from localsession.server.hosting import ServerThread  # noqa: E402
from localsession.wiring import build_service, server_catalog  # noqa: E402

ROLE = "arn:aws:iam::123456789012:role/bench"
GROUP = "arn:aws:sagemaker:us-west-2:123456789012:model-package-group/bench"
MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"
SMOKE_MODEL = "localsession/tiny"
#: Both clients stop at the chat turn's end, as a stop string (the same rule on both sides).
STOP = ["<|im_end|>"]
#: AdamW settings both clients send in full (Tinker's defaults: beta2 0.95, eps 1e-12;
#: SageMaker's: beta2 0.999, eps 1e-8, weight decay 0.01).
ADAM = {"learning_rate": 1e-4, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "weight_decay": 0.0}
QUESTIONS = [
    "Compute 27 + 82. Reply with the result only.",
    "Compute 13 + 9. Reply with the result only.",
]


def _prompts(tokenizer: Any) -> list[list[int]]:
    texts = [
        tokenizer.apply_chat_template(
            [{"role": "user", "content": q}], add_generation_prompt=True, tokenize=False
        )
        for q in QUESTIONS
    ]
    return [list(tokenizer.encode(t, add_special_tokens=False)) for t in texts]


def _datums(make: Callable[..., Any], prompt: list[int], sequences: list[Any]) -> list[Any]:
    """ppo datums for one group; reward = shorter than the group's mean length."""
    lengths = [len(s.tokens) for s in sequences]
    mean = sum(lengths) / len(lengths)
    out = []
    for seq in sequences:
        adv = 1.0 if len(seq.tokens) < mean else -1.0
        n, pad = len(seq.tokens), len(prompt) - 1
        out.append(
            make(
                prompt + list(seq.tokens[:-1]),
                {
                    "target_tokens": [0] * pad + list(seq.tokens),
                    "weights": [0.0] * pad + [1.0] * n,
                    "logprobs": [0.0] * pad + list(seq.logprobs),
                    "advantages": [0.0] * pad + [adv] * n,
                },
            )
        )
    return out


class Loop:
    """One client's GRPO loop, a step per call (the sampler is refreshed each step)."""

    def __init__(self, tc: Any, ts: Any, params: Any, prompts: list[list[int]], tinker: bool):
        self.tc, self.ts, self.params, self.prompts, self.tinker = tc, ts, params, prompts, tinker
        self.sampler = self._fresh_sampler()
        #: Every sampled sequence's tokens, in order (the two loops must match).
        self.sampled: list[list[int]] = []

    def _datum(self, tokens: list[int], inputs: dict[str, list[Any]]) -> Any:
        return self.ts.Datum(
            model_input=self.ts.ModelInput.from_ints(tokens), loss_fn_inputs=inputs
        )

    def step(self) -> None:
        datums = []
        for prompt in self.prompts:  # one at a time: see the module docstring
            future = self.sampler.sample(
                prompt=self.ts.ModelInput.from_ints(prompt),
                num_samples=4,
                sampling_params=self.params,
            )
            sequences = list(future.result().sequences)
            self.sampled += [list(s.tokens) for s in sequences]
            datums += _datums(self._datum, prompt, sequences)
        fwd = self.tc.forward_backward(datums, "ppo")
        adam = self.ts.AdamParams(**ADAM)
        self.tc.optim_step(adam).result()
        fwd.result()
        self.sampler = self._fresh_sampler()

    def _fresh_sampler(self) -> Any:
        """A sampler on the weights just saved (tinker returns a future of it, as of 0.38)."""
        sampler = self.tc.save_weights_and_get_sampling_client()
        return sampler.result() if self.tinker else sampler


def collect(smoke: bool = False, runs: int = 5, model: str | None = None) -> list[Row]:
    """The paired GRPO steps; ``smoke``: one run on the built-in tiny model (the test suite's
    check that the script runs, not a measurement), unless ``model`` names another."""
    runs = 1 if smoke else runs
    model = model or (SMOKE_MODEL if smoke else MODEL)
    logging.getLogger("sagemaker").setLevel(logging.ERROR)
    with tempfile.TemporaryDirectory() as home:
        service = build_service(
            ServiceConfig(home=Path(home), max_sessions=8, strict=False),
            catalog=server_catalog(Path(home), {}),
        )
        try:
            with ServerThread(service) as url, contextlib.ExitStack() as stack:
                env = {**client_env(url, "us-west-2"), "TINKER_BASE_URL": url}
                env.update({"TINKER_API_KEY": API_KEY, "HF_HUB_CACHE": str(service.hub_cache)})
                stack.enter_context(scoped_environ(env))
                import sagemaker.train.training_session as sm
                import tinker

                sc = tinker.ServiceClient()
                ttc = sc.create_lora_training_client(  # the SageMaker session's LoRA targets
                    base_model=model, rank=8, seed=0, train_unembed=False
                ).result()
                prompts = _prompts(ttc.get_tokenizer())
                sdk = sm.ServiceClient(
                    role_arn=ROLE, model_package_group_arn=GROUP, s3_output_path="s3://b/o"
                )
                stc = sdk.create_lora_training_client(model, rank=8, alpha=32)
                loops = {
                    "tinker": Loop(
                        ttc,
                        tinker.types,
                        tinker.types.SamplingParams(max_tokens=512, seed=3, stop=STOP),
                        prompts,
                        True,
                    ),
                    "sagemaker": Loop(
                        stc,
                        sm,
                        sm.SamplingParams(max_tokens=512, seed=3, stop=STOP),
                        prompts,
                        False,
                    ),
                }
                times = interleaved({k: v.step for k, v in loops.items()}, runs, warmup=1)
                sc.close("success").result()
        finally:
            service.close()
    t, s = median(times["tinker"]), median(times["sagemaker"])
    ratio = t / s
    tinker_samples, sagemaker_samples = loops["tinker"].sampled, loops["sagemaker"].sampled
    same = tinker_samples == sagemaker_samples
    return [
        Row(
            f"GRPO step over HTTP, tinker SDK vs SageMaker SDK, {model.split('/')[-1]} (s)",
            t,
            "s",
            "≤ 1.15×",
            same and ratio <= 1.15,
            s,
            ratio,
        ),
        Row(
            "same samples in both loops (sampled tokens, tinker / SageMaker)",
            sum(map(len, tinker_samples)),
            "tok",
            "identical",
            same,
            sum(map(len, sagemaker_samples)),
        ),
    ]


def main() -> None:
    parser = bench_args(__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument(
        "--model", default=None, help=f"default: {MODEL} ({SMOKE_MODEL} with --smoke)"
    )
    args = parser.parse_args()
    emit(collect(args.smoke, args.runs, args.model), args, "GRPO step: tinker SDK vs SageMaker SDK")


if __name__ == "__main__":
    main()
