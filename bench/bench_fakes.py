"""How fast the fakes are: cold start in a fresh interpreter, and per-op time once warm.

Cold (each in a new ``python -c``, best of ``--cold-runs``): ``import fakes``; import + a
session + the first ``forward_backward`` result; the same plus the first ``optim_step``
(building the torch optimizer imports ``torch._dynamo``, so it is reported on its own).
Warm (median over ``--runs``, one process): the submit + ``result()`` round trip of
``forward_backward``, ``optim_step``, a scripted ``sample``, an unscripted ``sample`` and
``compute_logprobs``. Targets (issue "fakes"): cold import + first op under 3 s; warm ops
under 5 ms each. There is no baseline to divide by, so it prints times and pass/miss.

Run: python bench/bench_fakes.py [--smoke] [--runs 200] [--cold-runs 3]
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bench.common import Row, bench_args, emit  # noqa: E402

COLD = """
import json, time
t0 = time.perf_counter()
import fakes
t1 = time.perf_counter()
from localsession.types import AdamParams, Datum, ModelInput
fake = fakes.FakeServiceClient()
tc = fake.create_lora_training_client("fakes/bigram", rank=8)
ids = [257, 104, 105]
datum = Datum(model_input=ModelInput.from_ints(ids),
              loss_fn_inputs={"target_tokens": ids[1:] + [258], "weights": [1.0] * 3})
tc.forward_backward([datum], "cross_entropy").result()
t2 = time.perf_counter()
tc.optim_step(AdamParams(learning_rate=1e-4)).result()
t3 = time.perf_counter()
fake.close()
print(json.dumps({"import": t1 - t0, "first_fb": t2 - t0, "first_step": t3 - t0}))
"""


def cold(runs: int) -> dict[str, float]:
    """Best-of-``runs`` cold timings (s), each in a fresh interpreter run from the repo."""
    best: dict[str, float] = {}
    for _ in range(runs):
        out = subprocess.run(
            [sys.executable, "-c", COLD], capture_output=True, text=True, check=True, cwd=ROOT
        )
        for key, value in json.loads(out.stdout.strip().splitlines()[-1]).items():
            best[key] = min(best.get(key, float("inf")), value)
    return best


def median_ms(fn: Callable[[], object], runs: int) -> float:
    """Median milliseconds of ``runs`` calls, after one warm-up call."""
    fn()
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        fn()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def warm(runs: int) -> dict[str, float]:
    """Median ms of each warm op's submit + ``result()`` round trip."""
    import fakes
    from localsession.types import AdamParams, Datum, ModelInput, SamplingParams

    with fakes.FakeServiceClient() as fake:
        tc = fake.create_lora_training_client("fakes/bigram", rank=8)
        sampler = tc.create_sampling_client()
        ids = tc.get_tokenizer().encode("What is 2+3?")
        datum = Datum(
            model_input=ModelInput.from_ints(ids),
            loss_fn_inputs={"target_tokens": ids[1:] + [258], "weights": [1.0] * len(ids)},
        )
        prompt, other = ModelInput.from_ints(ids), ModelInput.from_ints(ids[:-1])
        fake.script.on_prompt("What is 2+3?", "5")
        params = SamplingParams(max_tokens=512)
        step = AdamParams(learning_rate=1e-4)
        return {
            "forward_backward": median_ms(
                lambda: tc.forward_backward([datum], "cross_entropy").result(), runs
            ),
            "optim_step": median_ms(lambda: tc.optim_step(step).result(), runs),
            "sample (scripted)": median_ms(
                lambda: sampler.sample(prompt, sampling_params=params).result(), runs
            ),
            "sample (model)": median_ms(
                lambda: sampler.sample(other, sampling_params=params).result(), runs
            ),
            "compute_logprobs": median_ms(lambda: sampler.compute_logprobs(prompt).result(), runs),
        }


def collect(smoke: bool = False, runs: int = 200, cold_runs: int = 3) -> list[Row]:
    """The cold-start and warm-op rows (``smoke``: one cold run, a few warm ones)."""
    if smoke:
        runs, cold_runs = 3, 1
    c = cold(cold_runs)
    rows = [
        Row("fakes cold: import fakes (ms)", c["import"] * 1000, "ms", "< 3000 ms",
            c["import"] < 3.0),
        Row("fakes cold: import + first forward_backward (ms)", c["first_fb"] * 1000, "ms",
            "< 3000 ms", c["first_fb"] < 3.0),
        Row("fakes cold: ... + first optim_step (ms)", c["first_step"] * 1000, "ms",
            "< 3000 ms", c["first_step"] < 3.0),
    ]
    rows += [
        Row(f"fakes warm: {name} (ms)", ms, "ms", "< 5 ms", ms < 5.0)
        for name, ms in warm(runs).items()
    ]
    return rows


def main() -> None:
    parser = bench_args(__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--cold-runs", type=int, default=3)
    args = parser.parse_args()
    emit(collect(args.smoke, args.runs, args.cold_runs), args, "fakes: cold start and warm ops")


if __name__ == "__main__":
    main()
