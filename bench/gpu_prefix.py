"""Check 6 of bench/gpu_check.py: shared-prefix training (engine/shared_prefix.py) on a
1B-class Llama in bfloat16 with LoRA, shared against unshared.

A Llama-style model built from a ``LlamaConfig`` (random weights, nothing downloaded: hidden
2048, 16 layers, MLP 8192, 32 heads / 8 KV heads, vocabulary 32000: about 1.1B parameters,
Llama-3.2-1B's body) with a rank-32 LoRA on every linear layer, through the engine. The batch
is GRPO-shaped: ``prompts`` prompts of ``prompt_len`` tokens, each with ``group`` completions
of ``completion`` tokens. The same ``forward_backward(cross_entropy)`` + ``optim_step`` runs
with ``LOCALSESSION_SHARED_PREFIX=on`` and ``off``, alternating, ``steps`` times each.

Rows: tokens/s of each (tokens = every datum's tokens, as sent), the engine's ``mfu`` of each
(``estimated_flops`` counts the rows it computed: the packed rows when shared, so MFU is the
hardware's, not the batch's), the speedup (median of per-round ratios), and the shared loss
against the unshared one, a forward of both before any step (bf16: within 2e-2 relative, the
parity check's tolerance). The check fails only on that loss. gpu_check's ``--dry-run`` runs
it on the CPU on a 2-layer model at toy sizes.
"""

from __future__ import annotations

import random
import statistics
import time
from typing import Any

from bench.common import Row
from localsession.port import AdamHyperparams, TrainingDatum

SHARED_ENV = "LOCALSESSION_SHARED_PREFIX"
LOSS_RTOL = 2e-2


def billion_engine(accel: str) -> tuple[Any, Any]:
    """A TorchEngine on the 1B-class model (a 2-layer one off CUDA), bf16 on ``accel``."""
    from bench.gpu_check import llama_engine  # gpu_check imports this module only in main()

    sizes = (128, 256, 2, 8, 4) if accel != "cuda" else (2048, 8192, 16, 32, 8)
    engine, config = llama_engine("gpu-check/llama-1b", accel, sizes)
    return engine, config


def grpo_datums(
    prompts: int, group: int, prompt_len: int, completion: int, vocab: int
) -> list[TrainingDatum]:
    """Cross-entropy datums: each prompt's tokens, then one of ``group`` completions."""
    rng = random.Random(0)
    out = []
    for _ in range(prompts):
        prompt = [rng.randrange(vocab) for _ in range(prompt_len)]
        for _ in range(group):
            row = prompt + [rng.randrange(vocab) for _ in range(completion + 1)]
            out.append(
                TrainingDatum(
                    row[:-1], {"target_tokens": row[1:], "weights": [1.0] * (len(row) - 1)}
                )
            )
    return out


def prefix_check(accel: str, rows: list[Row], steps: int, shape: tuple[int, int, int, int]) -> bool:
    """Run the check on ``accel`` ("cuda", or "cpu" in the dry run); append its rows.
    ``shape``: (prompts, completions per prompt, prompt tokens, completion tokens)."""
    import torch

    engine, config = billion_engine(accel)
    prompts, group, prompt_len, completion = shape
    datums = grpo_datums(prompts, group, prompt_len, completion, config.vocab_size)
    tokens = sum(len(d.tokens) for d in datums)
    params = sum(p.numel() for p in engine.model.parameters()) / 1e9
    adam = AdamHyperparams(learning_rate=1e-5)

    def step(mode: str) -> tuple[float, float, float]:
        engine.retune(shared_prefix_mode=mode)
        if accel == "cuda":
            torch.cuda.synchronize()
        started = time.perf_counter()
        out = engine.forward_backward(datums, "cross_entropy", None, backward=True)
        engine.optim_step(adam)
        if accel == "cuda":
            torch.cuda.synchronize()
        seconds = time.perf_counter() - started
        return seconds, float(out.metrics["loss"]), float(out.metrics["mfu"])

    def forward_loss(mode: str) -> float:
        engine.retune(shared_prefix_mode=mode)
        return float(engine.forward(datums, "cross_entropy", None).metrics["loss"])

    loss_off, loss_on = forward_loss("off"), forward_loss("on")  # the same weights
    distance = abs(loss_on - loss_off) / max(abs(loss_off), 1e-9)
    step("on"), step("off")  # warm-up: kernels, allocator, the probe
    times: dict[str, list[float]] = {"on": [], "off": []}
    mfu: dict[str, list[float]] = {"on": [], "off": []}
    for _ in range(steps):
        for mode in ("on", "off"):
            seconds, _, m = step(mode)
            times[mode].append(seconds)
            mfu[mode].append(m)
    engine.close()
    label = (
        f"{params:.2f}B LoRA bf16, {prompts} prompts × {group} of {prompt_len}+{completion} tokens"
    )
    rate = {m: tokens / statistics.median(t) for m, t in times.items()}
    for mode, name in (("on", "shared"), ("off", "unshared")):
        rows.append(Row(f"prefix {name} train tok/s, {label}", rate[mode], "tok/s", "info", None))
        rows.append(
            Row(
                f"prefix {name} train MFU % (rows computed), {label}",
                100 * statistics.median(mfu[mode]),
                "%",
                "info",
                None,
            )
        )
    speedups = [off / on for on, off in zip(times["on"], times["off"], strict=True)]
    rows.append(
        Row(
            f"prefix shared vs unshared step, {label}",
            rate["on"],
            "tok/s",
            "info",
            None,
            rate["off"],
            statistics.median(speedups),
        )
    )
    ok = distance <= LOSS_RTOL
    rows.append(
        Row(
            f"prefix shared vs unshared forward loss, relative distance, {label}",
            distance,
            "",
            f"≤ {LOSS_RTOL:g}",
            ok,
        )
    )
    print(f"shared prefix: loss {loss_on:.6g} shared, {loss_off:.6g} unshared; {rate}")
    return ok
