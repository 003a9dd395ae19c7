"""Check 5 of bench/gpu_check.py: one step of the unmodified ``tinker`` SDK against the
Tinker dialect of a ``serve`` started in-process, its engine in bfloat16 on the accelerator.

A loopback server (``localsession.mocking.tinker_server.TinkerServer``, the real engine) on
``localsession/small``; through ``tinker.ServiceClient`` one ``forward_backward``
(cross entropy, protobuf + zstd on the wire), one ``optim_step``, then a ``forward`` and a
seeded ``sample`` of 4 sequences from ``save_weights_and_get_sampling_client``. It passes
when every training session the dialect created runs on the accelerator in bf16, the losses
are finite and the forward after the step scores the datum better than the step's own
forward, and each sample has 1..max_tokens tokens with finite logprobs. Without the SDK it
prints a skip line and adds an information row.
"""

from __future__ import annotations

import math
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import Row

MODEL = "localsession/small"
MAX_TOKENS = 16
TOKENS = [1, 5, 9, 13, 17, 21, 25, 29, 33, 37, 41, 45, 49, 53, 57, 61]


def _placements(service: Any) -> list[tuple[str, str]]:
    """(device type, dtype) of every live training session's engine."""
    out = []
    for summary in service.list_training_sessions({}).get("TrainingSessionSummaries", []):
        engine = service.session(summary["TrainingSessionName"]).engine
        if engine is not None:
            out.append((engine.device.type, str(engine.model.get_base_model().dtype)))
    return out


def _step(tinker: Any, service: Any) -> tuple[bool, str, list[tuple[str, str]]]:
    """The SDK step: (losses and samples as expected, a one-line summary, where the
    dialect's engines ran)."""
    types = tinker.types
    sc = tinker.ServiceClient()
    try:
        tc = sc.create_lora_training_client(base_model=MODEL, rank=8, seed=0).result()
        datum = types.Datum(
            model_input=types.ModelInput.from_ints(TOKENS[:-1]),
            loss_fn_inputs={"target_tokens": TOKENS[1:], "weights": [1.0] * (len(TOKENS) - 1)},
        )
        fwd_bwd = tc.forward_backward([datum], "cross_entropy")
        step = tc.optim_step(types.AdamParams(learning_rate=1e-2))
        before = float(fwd_bwd.result().metrics["loss:sum"])
        step.result()
        after = float(tc.forward([datum], "cross_entropy").result().metrics["loss:sum"])
        placements = _placements(service)
        sampler = tc.save_weights_and_get_sampling_client().result()
        params = types.SamplingParams(max_tokens=MAX_TOKENS, seed=1, temperature=1.0)
        prompt = types.ModelInput.from_ints(TOKENS[:4])
        sequences = sampler.sample(prompt, num_samples=4, sampling_params=params).result()
    finally:
        sc.close("success").result()
    seqs = sequences.sequences
    sampled = len(seqs) == 4 and all(
        1 <= len(s.tokens) <= MAX_TOKENS
        and s.logprobs is not None
        and all(math.isfinite(v) for v in s.logprobs)
        for s in seqs
    )
    learned = math.isfinite(before) and math.isfinite(after) and after < before
    summary = (
        f"loss:sum {before:.4f} -> {after:.4f} after one optim_step; "
        f"{len(seqs)} samples of {[len(s.tokens) for s in seqs]} tokens; "
        f"engines {sorted(set(placements))}"
    )
    return learned and sampled, summary, placements


def tinker_step(accel: str, rows: list[Row]) -> bool | None:
    """Run the check on ``accel`` ("cuda", or "cpu" in gpu_check's dry run); append its row.
    None (and an information row) when the tinker SDK is not installed."""
    try:
        import tinker
    except ImportError as exc:
        print(f"tinker dialect: skip: the tinker SDK is not installed ({exc})")
        rows.append(Row("tinker SDK step on serve (skipped: no SDK)", 0.0, "s", "info", None))
        return None
    from localsession.engine.loading import DEVICE_ENV
    from localsession.engine.precision import DTYPE_ENV
    from localsession.mocking.hooks import scoped_environ
    from localsession.mocking.tinker_server import TinkerServer

    os.environ[DEVICE_ENV], os.environ[DTYPE_ENV] = accel, "bf16"
    started = time.perf_counter()
    try:
        with tempfile.TemporaryDirectory() as home:
            server = TinkerServer("torch", home=Path(home))
            try:
                with scoped_environ(server.environment()):
                    ok, summary, placements = _step(tinker, server.service)
            finally:
                server.close()
    finally:
        os.environ.pop(DEVICE_ENV, None)
        os.environ.pop(DTYPE_ENV, None)
    seconds = time.perf_counter() - started
    ok = ok and bool(placements) and set(placements) == {(accel, "torch.bfloat16")}
    print(f"tinker dialect ({MODEL}, bf16 on {accel}): {summary}")
    target = "loss falls, bf16 on the device"
    rows.append(Row("tinker SDK step on serve (s)", seconds, "s", target, ok))
    return ok
