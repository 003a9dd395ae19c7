"""Batched concurrent sampling through the API vs one-at-a-time and vs raw ``generate``.

For each built-in model (``localsession/tiny``, ``localsession/small``), one workload: 32
prompts, each ``sample(num_samples=4)`` at T = 1 with ``max_tokens`` new tokens. Measured in
one process, after a warm-up of every path:

- **concurrent**: the 32 ``SamplingClient.sample`` calls issued back to back, then every
  ``result()`` awaited (the scheduler batches them into shared decode steps);
- **one-at-a-time**: the same 32 calls, each awaited before the next is issued;
- **raw generate**: one ``model.generate`` call over the same 32 left-padded prompts with
  ``num_return_sequences=4`` on the plain ``transformers`` model (no API, no LoRA wrapper).

Throughput is generated tokens per second. Targets (issue "RL"): concurrent ≥ 5× the
one-at-a-time throughput, and ≥ 0.8× the raw ``generate`` throughput. Medians over the runs.

Run: python bench/bench_sampling.py [--smoke] [--max-tokens 64] [--runs 3] [--models tiny small]
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from tqdm import tqdm  # noqa: E402

from bench.common import Row, bench_args, emit  # noqa: E402
from bench.raw_loop import batched_generate  # noqa: E402
from localsession import SamplingClient, SamplingParams, ServiceClient  # noqa: E402
from localsession.engine.builtin import EOS_ID, PAD_ID, build_builtin  # noqa: E402
from localsession.runtime.service import ServiceConfig  # noqa: E402
from localsession.wiring import build_service

N_PROMPTS = 32
NUM_SAMPLES = 4
ROLE = "arn:aws:iam::000000000000:role/bench"


def prompts() -> list[list[int]]:
    """32 byte-level prompts of varied length (BOS + text)."""
    return [[257, *f"Q{i}: what is {i} + {3 * i % 17}? A:".encode()] for i in range(N_PROMPTS)]


def median_of(fn: Callable[[], int], runs: int) -> tuple[float, int]:
    """(median seconds, tokens of the last run) over ``runs`` calls of ``fn``."""
    times, tokens = [], 0
    for _ in range(runs):
        started = time.perf_counter()
        tokens = fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times), tokens


def api_paths(sc: SamplingClient, max_tokens: int) -> tuple[Callable[[], int], Callable[[], int]]:
    """(concurrent, one-at-a-time) workloads through the public API; each returns tokens."""

    def params(i: int) -> SamplingParams:
        return SamplingParams(max_tokens=max_tokens, temperature=1.0, seed=1000 + i)

    def concurrent() -> int:
        futures = [
            sc.sample(p, num_samples=NUM_SAMPLES, sampling_params=params(i))
            for i, p in enumerate(prompts())
        ]
        return sum(len(s.tokens) for f in futures for s in f.result(timeout=600).sequences)

    def sequential() -> int:
        total = 0
        for i, p in enumerate(prompts()):
            out = sc.sample(p, num_samples=NUM_SAMPLES, sampling_params=params(i))
            total += sum(len(s.tokens) for s in out.result(timeout=600).sequences)
        return total

    return concurrent, sequential


def raw_generate(name: str, max_tokens: int) -> Callable[[], int]:
    """One ``generate`` call over the whole workload on the plain base model."""
    model, _ = build_builtin(name)
    return batched_generate(model, prompts(), PAD_ID, EOS_ID, max_tokens, NUM_SAMPLES)


def bench_model(name: str, max_tokens: int, runs: int, home: Path) -> list[Row]:
    """The two rows (vs one-at-a-time, vs raw generate) of one model."""
    service = build_service(ServiceConfig(home=home, max_sessions=2))
    client = ServiceClient("us-west-2", role_arn=ROLE, backend=service, strict=False)
    tc = client.create_lora_training_client(name, rank=8, alpha=16)
    sc = tc.create_sampling_client()
    concurrent, sequential = api_paths(sc, max_tokens)
    generate = raw_generate(name, max_tokens)
    for warm in (concurrent, sequential, generate):
        warm()
    t_conc, n_conc = median_of(concurrent, runs)
    t_seq, n_seq = median_of(sequential, max(1, runs - 1))
    t_gen, n_gen = median_of(generate, runs)
    tc.stop()
    service.close()
    short = name.split("/")[-1]
    ours = n_conc / t_conc
    out = []
    for label, base, target in (
        ("concurrent vs one-at-a-time", n_seq / t_seq, 5.0),
        ("concurrent vs raw generate", n_gen / t_gen, 0.8),
    ):
        ratio = ours / base
        out.append(
            Row(
                f"sampling 32×4, {short}: {label} (tok/s)",
                ours,
                "tok/s",
                f"≥ {target:g}×",
                ratio >= target,
                base,
                ratio,
            )
        )
    return out


def collect(
    smoke: bool = False,
    max_tokens: int = 64,
    runs: int = 3,
    models: tuple[str, ...] = ("tiny", "small"),
) -> list[Row]:
    """Every row (``smoke``: tiny only, 4 new tokens, one repetition)."""
    if smoke:
        max_tokens, runs, models = 4, 1, ("tiny",)
    rows: list[Row] = []
    with tempfile.TemporaryDirectory() as home:
        for short in tqdm(models, desc="bench_sampling", unit="model", disable=smoke):
            rows += bench_model(f"localsession/{short}", max_tokens, runs, Path(home))
    return rows


def main() -> None:
    parser = bench_args(__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--models", nargs="+", default=["tiny", "small"])
    args = parser.parse_args()
    rows = collect(args.smoke, args.max_tokens, args.runs, tuple(args.models))
    emit(rows, args, "sampling: batched API vs one-at-a-time and vs raw generate")


if __name__ == "__main__":
    main()
