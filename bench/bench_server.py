"""The HTTP server under the unmodified SDK vs the in-process clients, in one process.

Two rows (issue "`localsession serve`"):

- **HTTP latency:** from the moment a training op finishes on the server to the moment the
  SDK's ``result()`` returns it. The server runs on a thread of this process, so both instants
  are read from the same monotonic clock. Without the server's holds this is up to the SDK's
  2 s poll quantum (docs/wire.md#6); target ≤ 50 ms (median and max are printed).
- **HTTP step:** the wall time of one GRPO step (sample K per prompt, ppo forward_backward,
  optim_step, refresh the sampler) through the SDK over HTTP vs the same step through the
  in-process clients on the same service, one of each per round, back to back; the ratio is
  the median of the rounds' ratios. Target ≤ 1.3×.

Run: python bench/bench_server.py [--smoke] [--runs 10]
"""

from __future__ import annotations

import logging
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import localsession as ls  # noqa: E402
from bench.common import Row, bench_args, emit  # noqa: E402
from localsession import cpu_threads  # noqa: E402
from localsession.mocking.hooks import scoped_environ  # noqa: E402
from localsession.runtime.service import Service, ServiceConfig  # noqa: E402
from localsession.server.endpoints import client_env  # noqa: E402
from localsession.server.hosting import ServerThread  # noqa: E402
from localsession.wiring import build_service

ROLE = "arn:aws:iam::123456789012:role/bench"
GROUP = "arn:aws:sagemaker:us-west-2:123456789012:model-package-group/bench"
MODEL = "localsession-tiny"
PROMPTS = [[257, *b"Q: 1+1=? A: "], [257, *b"Q: 2+3=? A: "]]


def _latest_finish(service: Service, session: str) -> float:
    ops = service.session(session).ops.values()
    return max(op.finished_at or 0.0 for op in ops)


def http_latency_ms(service: Service, sdk: Any, ts: Any, runs: int, repeat: int = 4) -> list[float]:
    """Completion-to-``result()`` latencies (ms) of ``runs`` forward_backward calls."""
    tokens = list(range(1, 257)) * repeat  # a forward_backward that runs ~100 ms, polled
    batch = [
        ts.Datum(
            model_input=ts.ModelInput.from_ints(tokens[:-1]),
            loss_fn_inputs={"target_tokens": tokens[1:], "weights": [1.0] * (len(tokens) - 1)},
        )
    ] * 4
    latencies = []
    with sdk.create_lora_training_client(base_model=MODEL, rank=8) as tc:
        tc.forward_backward(batch, "cross_entropy").result()  # warm
        for _ in range(runs):
            future = tc.forward_backward(batch, "cross_entropy")
            future.result()
            returned = time.monotonic()
            latencies.append((returned - _latest_finish(service, tc.training_session_name)) * 1e3)
    return latencies


class GrpoLoop:
    """One GRPO step at a time (sample K per prompt, ppo forward_backward, optim_step,
    refresh the sampler) through ``client``'s own training session; close it after."""

    def __init__(self, client: Any, ts: Any) -> None:
        self.ts = ts
        self.params = ts.SamplingParams(max_tokens=512, temperature=1.0, seed=3, stop=["\n", "."])
        self.tc = client.create_lora_training_client(base_model=MODEL, rank=8)
        self.sampler = self.tc.save_weights_and_get_sampling_client()

    def step(self) -> float:
        """Wall seconds of one step."""
        ts = self.ts
        started = time.perf_counter()
        futures = [
            self.sampler.sample(
                prompt=ts.ModelInput.from_ints(p), num_samples=4, sampling_params=self.params
            )
            for p in PROMPTS
        ]
        datums = []
        for prompt, future in zip(PROMPTS, futures, strict=True):
            for i, seq in enumerate(future.result().sequences):
                n, pad = len(seq.tokens), len(prompt) - 1
                datums.append(
                    ts.Datum(
                        model_input=ts.ModelInput.from_ints(prompt + seq.tokens[:-1]),
                        loss_fn_inputs=dict(
                            target_tokens=[0] * pad + list(seq.tokens),
                            weights=[0.0] * pad + [1.0] * n,
                            logprobs=[0.0] * pad + list(seq.logprobs),
                            advantages=[0.0] * pad + [1.0 if i % 2 else -1.0] * n,
                        ),
                    )
                )
        self.tc.forward_backward(datums, "ppo")
        self.tc.optim_step(ts.AdamParams(learning_rate=1e-4)).result()
        self.sampler = self.tc.save_weights_and_get_sampling_client()
        return time.perf_counter() - started

    def close(self) -> None:
        self.tc.stop()


def paired_grpo_steps(sdk: Any, sdk_ts: Any, local: Any, runs: int) -> tuple[float, float, float]:
    """Median seconds of a GRPO step over HTTP and in-process, and the median of the
    per-round ratios: each round runs one step of each, back to back (after one warm-up
    round), so both sides see the same machine load."""
    over_http, in_process = GrpoLoop(sdk, sdk_ts), GrpoLoop(local, ls)

    def http_step() -> float:
        # The in-process step ran ops on this thread, which keeps its OpenMP team; an SDK in
        # its own process has none, and a kept team slows every kernel the server's threads
        # run (docs/architecture.md, "Who holds CPU threads"): 1.58-1.85x against 1.09-1.19x.
        cpu_threads.release()
        return over_http.step()

    try:
        http_step(), in_process.step()  # warm caches
        pairs = [(http_step(), in_process.step()) for _ in range(runs)]
    finally:
        over_http.close()
        in_process.close()
    return (
        statistics.median(h for h, _ in pairs),
        statistics.median(i for _, i in pairs),
        statistics.median(h / i for h, i in pairs),
    )


def collect(smoke: bool = False, runs: int = 10) -> list[Row]:
    """The HTTP latency and HTTP step rows (``smoke``: short ops, one repetition)."""
    runs = 1 if smoke else runs
    logging.getLogger("sagemaker").setLevel(logging.ERROR)  # the http:// endpoint warning
    with tempfile.TemporaryDirectory() as home:
        service = build_service(ServiceConfig(home=Path(home), max_sessions=8))
        try:
            with ServerThread(service) as url, scoped_environ(client_env(url, "us-west-2")):
                import sagemaker.train.training_session as ts

                sdk = ts.ServiceClient(
                    role_arn=ROLE, model_package_group_arn=GROUP, s3_output_path="s3://b/o"
                )
                local = ls.ServiceClient(
                    role_arn=ROLE, backend=service, model_package_group_arn=GROUP
                )
                latencies = http_latency_ms(service, sdk, ts, runs, repeat=1 if smoke else 4)
                # max_tokens 512 on both sides: the SDK's floor for maxTokens
                over_http, in_process, ratio = paired_grpo_steps(sdk, ts, local, runs)
        finally:
            service.close()
    p50, worst = statistics.median(latencies), max(latencies)
    return [
        Row("HTTP latency p50, completion to result() (ms)", p50, "ms", "≤ 50 ms", p50 <= 50),
        Row("HTTP latency max (ms)", worst, "ms", "info", None),
        Row(
            "HTTP GRPO step, SDK over HTTP vs in-process (s)",
            over_http,
            "s",
            "≤ 1.3×",
            ratio <= 1.3,
            in_process,
            ratio,
        ),
    ]


def main() -> None:
    parser = bench_args(__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    emit(collect(args.smoke, args.runs), args, "localsession serve vs in-process, tiny")


if __name__ == "__main__":
    main()
