"""The plumbing every example shares: options, the service client, datums, sampling, scoring.

Only the public client API is used. ``open_service`` passes ``strict=False`` (localsession's
relaxed mode, which lifts the service's ``max_tokens >= 512`` floor so that short answers
sample quickly) only when the client class accepts it; on the real SDK it is left out and
``max_tokens`` is raised to the service minimum, with generation still ending at EOS or a stop
string, so the same example runs there unchanged.
"""

from __future__ import annotations

import argparse
import inspect
import os
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from localsession import Datum, ModelInput, SampledSequence, SamplingParams, TensorData
from localsession.cli_parser import SuggestingParser

ROLE_ARN = "arn:aws:iam::000000000000:role/localsession-examples"
SERVICE_MIN_MAX_TOKENS = 512  # docs/wire.md#10


def parse_args(
    description: str | None,
    *,
    steps: int | None,
    smoke_steps: int,
    base_model: str = "localsession/tiny",
    argv: Sequence[str] | None = None,
    extra: Callable[[argparse.ArgumentParser], None] | None = None,
) -> argparse.Namespace:
    """``--steps --seed --base-model --smoke --run-dir`` plus the example's own options.

    ``steps=None`` leaves ``args.steps`` None when not given (the example picks a default)."""
    rest = (description or "").strip().split("\n\n", 1)[1:]  # the docstring's details
    parser = SuggestingParser(description=_first_paragraph(description), epilog="".join(rest))
    chosen = steps if steps is not None else "set by the task, see below"
    parser.add_argument(
        "--steps",
        type=int,
        default=None,
        help=f"training steps (default: {chosen}; {smoke_steps} with --smoke)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed for data order and sampling")
    parser.add_argument(
        "--base-model", default=base_model, help="a model id, a model directory or a .gguf file"
    )
    parser.add_argument("--smoke", action="store_true", help="a few tiny steps, for CI")
    parser.add_argument("--run-dir", type=Path, default=None, help="default runs/<name>-<time>")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.add_argument(
        "--keep-packages",
        action="store_true",
        help="keep the run's model packages (RUN_DIR/localsession-home); deleted at exit otherwise",
    )
    if extra is not None:
        extra(parser)
    args = parser.parse_args(argv)
    if args.steps is None:
        args.steps = smoke_steps if args.smoke else steps
    return args


def _first_paragraph(text: str | None) -> str:
    """An example's docstring up to its first blank line: its whole first paragraph."""
    paragraph = (text or "").strip().split("\n\n")[0]
    return " ".join(line.strip() for line in paragraph.splitlines())


#: The run directory of the run in progress (for the message after Ctrl-C).
_current_run: list[Path] = []


def run_main(main: Callable[[], Any]) -> None:
    """Run an example's ``main``; Ctrl-C ends it with one line, not a traceback. The metrics
    of every finished step are already in ``RUN_DIR/metrics.jsonl`` (written step by step)."""
    import sys

    try:
        main()
    except KeyboardInterrupt:
        where = f"{_current_run[-1]}/metrics.jsonl" if _current_run else "the run directory"
        print(f"\ninterrupted: the finished steps' metrics are in {where}", file=sys.stderr)
        raise SystemExit(130) from None


def run_dir_for(args: argparse.Namespace, name: str) -> Path:
    """The run directory: ``--run-dir``, else ``runs/<name>-<YYYYmmdd-HHMMSS>``."""
    path = args.run_dir or Path("runs") / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}"
    path.mkdir(parents=True, exist_ok=True)
    _current_run.append(path)
    # Keep this run's model packages with the run (a localsession setting; ignored elsewhere),
    # and delete them when the run ends unless --keep-packages (a GRPO run saves every step).
    home = path.resolve() / "localsession-home"
    if "LOCALSESSION_HOME" not in os.environ:
        os.environ["LOCALSESSION_HOME"] = str(home)
        if not getattr(args, "keep_packages", False):
            import atexit
            import shutil

            atexit.register(shutil.rmtree, home, ignore_errors=True)
    return path


@dataclass
class Service:
    """A service client plus whether short generations are allowed (relaxed mode)."""

    client: Any
    relaxed: bool

    def params(
        self, max_tokens: int, *, temperature: float, seed: int | None, stop: list[str] | None
    ) -> SamplingParams:
        """Sampling params; ``max_tokens`` rises to the service minimum where it applies."""
        limit = max_tokens if self.relaxed else max(max_tokens, SERVICE_MIN_MAX_TOKENS)
        return SamplingParams(max_tokens=limit, temperature=temperature, seed=seed, stop=stop)


def open_service(service_client_cls: Any, **kwargs: Any) -> Service:
    """A ``ServiceClient`` in relaxed mode where the class has it (localsession), else plain."""
    relaxed = "strict" in inspect.signature(service_client_cls).parameters
    kwargs.setdefault("region", "us-west-2")  # the SDK refuses to guess one
    if relaxed:
        kwargs["strict"] = False
    return Service(service_client_cls(role_arn=ROLE_ARN, **kwargs), relaxed)


# -- chat rendering and datums --------------------------------------------------------------


def chat_prompt(tokenizer: Any, messages: list[dict[str, str]]) -> list[int]:
    """Token ids of ``messages`` plus the assistant header, in the model's chat template."""
    ids: list[int] = tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, tokenize=True, return_dict=False
    )
    return list(ids)


def completion_ids(tokenizer: Any, text: str) -> list[int]:
    """``text`` as an assistant turn ends in the chat template: the bytes, then EOS."""
    return list(tokenizer.encode(text, add_special_tokens=False)) + [tokenizer.eos_token_id]


def sft_datum(prompt: list[int], completion: list[int], weight: float = 1.0) -> Datum:
    """Next-token datum over prompt + completion; prompt tokens weigh 0."""
    tokens = prompt + completion
    weights = [0.0] * (len(prompt) - 1) + [weight] * len(completion)
    return Datum(
        model_input=ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={
            "target_tokens": TensorData(data=tokens[1:], dtype="int64"),
            "weights": TensorData(data=weights),
        },
    )


def rl_datum(
    prompt: list[int],
    completion: list[int],
    logprobs: Sequence[float],
    advantages: Sequence[float],
    temperature: float = 1.0,
) -> Datum:
    """Datum for ppo / cispo / importance_sampling: the sampler's logprobs and per-token
    advantages over the completion; the prompt positions weigh 0.

    The sampler reports tempered logprobs, so a temperature other than 1 is passed along as
    the ``temperature`` input: the trainer then scores with the same tempered distribution
    and the ratio is exactly 1 before the first update (docs/semantics.md#1)."""
    assert len(logprobs) == len(completion) == len(advantages)
    tokens = prompt + completion
    pad = [0.0] * (len(prompt) - 1)
    inputs = {
        "target_tokens": TensorData(data=tokens[1:], dtype="int64"),
        "weights": TensorData(data=pad + [1.0] * len(completion)),
        "logprobs": TensorData(data=pad + [float(x) for x in logprobs]),
        "advantages": TensorData(data=pad + [float(x) for x in advantages]),
    }
    if temperature != 1.0:
        inputs["temperature"] = TensorData(data=[float(temperature)] * (len(tokens) - 1))
    return Datum(model_input=ModelInput.from_ints(tokens[:-1]), loss_fn_inputs=inputs)


def group_advantages(rewards: Sequence[float]) -> list[float]:
    """GRPO: reward minus the group mean, over the group's standard deviation."""
    mean, std = statistics.fmean(rewards), statistics.pstdev(rewards)
    return [(r - mean) / (std + 1e-6) for r in rewards]


def is_builtin(base_model: str) -> bool:
    """True for localsession's built-in random-init models (byte tokenizer, no pretraining)."""
    return base_model.startswith("localsession/")


def decode(tokenizer: Any, seq: SampledSequence) -> str:
    return str(tokenizer.decode(seq.tokens, skip_special_tokens=True))


def sample_tokens(response: Any) -> int:
    return sum(len(s.tokens) for s in response.sequences)


def weighted_tokens(batch: Sequence[Datum]) -> float:
    """Σ weights: what a summed loss counts, to report it per token."""
    total = 0.0
    for d in batch:
        assert d.loss_fn_inputs is not None
        total += sum(d.loss_fn_inputs["weights"].data)
    return total


def loss_per_token(loss: float, batch: Sequence[Datum]) -> float:
    """A batch's loss per weighted token, from its reported ``loss`` (the mean over datums of
    each datum's summed loss, as the service reports it)."""
    return loss * len(batch) / weighted_tokens(batch)


def batch_tokens(batch: Sequence[Datum]) -> int:
    return sum(d.model_input.length for d in batch if d.model_input is not None)


def progress(iterable: Any, *, desc: str, quiet: bool, total: int | None = None) -> Any:
    """A tqdm progress bar (or the bare iterable with ``--quiet``)."""
    if quiet:
        return iterable
    from tqdm import tqdm

    return tqdm(iterable, desc=desc, total=total, unit="step", dynamic_ncols=True)


def write_summary(run_dir: Path, summary: dict[str, Any]) -> None:
    """``summary.json``: the before/after numbers the example's docstring quotes."""
    import json

    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")


def flat_values(value: Any) -> list[float]:
    """A wire TensorData dict (``{"data": ...}``), TensorData, or list, as a flat list."""
    data = value.get("data") if isinstance(value, dict) else getattr(value, "data", value)
    out: list[float] = []
    for item in data:
        out.extend(flat_values(item) if isinstance(item, list) else [float(item)])
    return out


def completion_logprob_sums(training_client: Any, batch: Sequence[Datum]) -> list[float]:
    """Per datum, Σ weight·logprob under the current weights (``forward``, no gradient)."""
    outputs = training_client.forward(list(batch), "cross_entropy").result().loss_fn_outputs
    sums = []
    for datum, out in zip(batch, outputs or [], strict=True):
        assert datum.loss_fn_inputs is not None
        weights = datum.loss_fn_inputs["weights"].data
        sums.append(
            sum(w * lp for w, lp in zip(weights, flat_values(out["logprobs"]), strict=True))
        )
    return sums
