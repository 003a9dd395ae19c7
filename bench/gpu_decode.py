"""Checks 7 and 8 of bench/gpu_check.py: decoding against Hugging Face ``generate`` and against
the memory-bandwidth limit, and one GRPO step end to end (issue 56, item 4).

7. **Decode.** On the 0.47B and the 1.1B Llama configs of gpu_check (random weights in bf16,
   LoRA rank 32 on every linear layer), for 1, 8, 64 and 256 streams: ``streams`` prompts of
   ``PROMPT_LEN`` random tokens, each decoded for ``NEW_TOKENS`` tokens at temperature 1 with
   no EOS stop, through the engine's ``sample`` on the base weights, and through ``generate``
   (``do_sample``, full vocabulary, ``min_new_tokens`` = ``max_new_tokens``, so both sides make
   exactly the same number of tokens) on a plain ``LlamaForCausalLM`` holding the very same
   weight tensors. Each side is warmed up at the same stream count first. Rows: tokens/s of
   each and the ratio, ≥ 4× at 64 streams and above; and each side's **fraction of the
   bandwidth limit**: a decode step must read every weight once (the input embedding only at
   the rows it looks up) and every stream's KV cache at its current length, so the steps of
   one call must read :func:`decode_bytes`; at the card's bandwidth that takes
   ``bytes / bandwidth`` seconds, against the decode steps' measured time (a call of
   ``NEW_TOKENS`` tokens less a call of one token: the prefill and the first token are not a
   decode step). Target ≥ 10% at 256 streams on the 0.47B model. The bandwidth comes from
   :data:`BANDWIDTH_GBPS` by device name (vendor data sheets), else from a timed device copy.
8. **GRPO step.** On the 0.47B model, the loop an RL user writes: save the adapter for
   sampling (``save_package``), sample 8 prompts × 8 completions of 512 tokens from it, score
   them (a toy reward: the share of even token ids), group-normalise the advantages, then
   ``forward_backward(importance_sampling)`` + ``optim_step``, end to end. Two steps: the first
   pays every first-time cost (a bucket met for the first time, kernels, allocator), the
   second is the row.

gpu_check's ``--dry-run`` runs both on the CPU on 2-layer models at toy sizes, where the rows
are "n/a: dry run" (a GPU target means nothing there); tests/bench checks their structure and
the bandwidth arithmetic.
"""

from __future__ import annotations

import random
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common import Row, meets
from localsession.port import AdamHyperparams, SampleRequest, TrainingDatum

#: Peak memory bandwidth in GB/s (10^9 bytes/s) by device-name fragment, the first match
#: wins (so the more specific names come first: "L40S" before "L4", "A100" before "A10").
BANDWIDTH_GBPS: tuple[tuple[str, float], ...] = (
    ("H200", 4800.0),
    ("H100 PCIe", 2000.0),
    ("H100 NVL", 3900.0),
    ("H100", 3350.0),  # SXM5, HBM3
    ("A100-SXM4-80GB", 2039.0),
    ("A100 80GB PCIe", 1935.0),
    ("A100", 1555.0),  # 40 GB
    ("B200", 8000.0),
    ("L40S", 864.0),
    ("L4", 300.0),
    ("A10G", 600.0),
    ("A10", 600.0),
    ("RTX 4090", 1008.0),
)
#: (label, (hidden, intermediate, layers, heads, kv heads)) of gpu_check's two models.
MODELS = (("0.47B", (1024, 4096, 26, 16, 8)), ("1.1B", (2048, 8192, 16, 32, 8)))
DRY_MODELS = (("0.47B", (128, 256, 2, 4, 2)), ("1.1B", (128, 256, 2, 8, 4)))
STREAMS = (1, 8, 64, 256)
PROMPT_LEN, NEW_TOKENS = 64, 128
SPEED_TARGET = "≥ 4×"
BANDWIDTH_TARGET_PCT = 10.0
#: GRPO shape: prompts, completions per prompt, prompt tokens, completion tokens.
GRPO_SHAPE = (8, 8, 128, 512)
DRY = "dry run"


# -- the arithmetic (pure; tests/bench checks it against a hand computation) --------------


@dataclass(frozen=True)
class StepBytes:
    """What one decode step of a model reads: ``weights`` bytes (every weight, the input
    embedding only at the looked-up rows, which :func:`decode_bytes` adds per stream) and
    ``kv_per_token`` bytes of K and V per cached token over every layer."""

    weights: int
    kv_per_token: int
    embed_row: int  # one looked-up row of an untied input embedding (0 when tied)


def kv_bytes_per_token(layers: int, kv_heads: int, head_dim: int, element_bytes: int) -> int:
    """K and V of one token in every layer's cache."""
    return 2 * layers * kv_heads * head_dim * element_bytes


def decode_bytes(step: StepBytes, streams: int, prompt_len: int, new_tokens: int) -> int:
    """Bytes the decode steps of one call must read. The prefill makes token 1; decode step
    j (1 ≤ j < ``new_tokens``) feeds token j and makes token j + 1, reading every weight, one
    embedding row per stream, and each stream's cache at its current length
    ``prompt_len + j`` (the prompt, the tokens fed before, and the one it feeds)."""
    steps = new_tokens - 1
    cached = steps * prompt_len + steps * (steps + 1) // 2  # Σ_j (prompt_len + j)
    return steps * (step.weights + streams * step.embed_row) + streams * step.kv_per_token * cached


def bandwidth_fraction(nbytes: int, bandwidth: float, seconds: float) -> float:
    """The share of the bandwidth limit reached: the time ``nbytes`` take at ``bandwidth``
    bytes/s over the time they took."""
    return nbytes / bandwidth / seconds


def table_bandwidth(device_name: str) -> float | None:
    """The card's bandwidth in bytes/s from :data:`BANDWIDTH_GBPS`, or None."""
    return next((gbps * 1e9 for key, gbps in BANDWIDTH_GBPS if key in device_name), None)


# -- measuring -----------------------------------------------------------------------------


def copy_bandwidth(accel: str, mib: int) -> float:
    """Bytes/s of a timed device-to-device copy of ``mib`` MiB (it reads and writes each
    byte: 2 × size per copy), the best of 5."""
    import torch

    src = torch.empty(mib * 2**20, dtype=torch.uint8, device=accel)
    dst = torch.empty_like(src)
    dst.copy_(src)
    best = float("inf")
    for _ in range(5):
        _sync(accel)
        started = time.perf_counter()
        dst.copy_(src)
        _sync(accel)
        best = min(best, time.perf_counter() - started)
    return 2 * src.numel() / best


def card_bandwidth(accel: str, device_name: str) -> tuple[float, str]:
    """(bytes/s, where the figure came from): the table, else a measured copy."""
    found = table_bandwidth(device_name)
    if found is not None:
        return found, "data sheet"
    return copy_bandwidth(accel, 1024 if accel == "cuda" else 64), "measured copy"


def _sync(accel: str) -> None:
    import torch

    if accel == "cuda":
        torch.cuda.synchronize()


def plain_twin(peft_model: Any, config: Any, accel: str) -> Any:
    """A plain ``LlamaForCausalLM`` over the very tensors of ``peft_model``'s base (no LoRA
    layers, no engine code): what a user's ``generate`` runs."""
    import torch
    from transformers import LlamaForCausalLM

    with torch.device(accel):
        twin: Any = LlamaForCausalLM(config)
    twin = twin.to(dtype=torch.bfloat16).eval()
    mapped = {}
    for name, param in peft_model.named_parameters():
        if "lora_" in name:
            continue
        mapped[name.removeprefix("base_model.model.").replace(".base_layer.", ".")] = param
    twin.load_state_dict(mapped, strict=True, assign=True)
    return twin


def step_bytes(twin: Any, config: Any) -> StepBytes:
    """:class:`StepBytes` of ``twin`` (its parameters' own sizes)."""
    embed = twin.get_input_embeddings().weight
    tied = embed is twin.get_output_embeddings().weight
    total = sum(p.numel() * p.element_size() for p in twin.parameters())
    embed_bytes = 0 if tied else embed.numel() * embed.element_size()
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    kv = kv_bytes_per_token(
        config.num_hidden_layers, config.num_key_value_heads, head_dim, embed.element_size()
    )
    row = 0 if tied else embed.shape[1] * embed.element_size()
    return StepBytes(total - embed_bytes, kv, row)


def _timed(accel: str, fn: Callable[[], object]) -> float:
    _sync(accel)
    started = time.perf_counter()
    fn()
    _sync(accel)
    return time.perf_counter() - started


def decode_pair(
    engine: Any, twin: Any, accel: str, streams: int, prompt_len: int, new_tokens: int
) -> dict[str, tuple[float, float, int]]:
    """{"ours", "hf"}: (seconds of a ``new_tokens`` call, of a 1-token call, tokens made)."""
    import torch

    gen = torch.Generator().manual_seed(streams)
    prompts_SP = torch.randint(0, 256, (streams, prompt_len), generator=gen)

    def ours(tokens: int) -> int:
        requests = [
            SampleRequest(prompt=p, max_tokens=tokens, seed=i, stop_at_eos=False)
            for i, p in enumerate(prompts_SP.tolist())
        ]
        return sum(len(s.tokens) for r in engine.sample(None, requests) for s in r.sequences)

    ids_SP = prompts_SP.to(accel)

    def hf(tokens: int) -> int:
        with torch.no_grad():
            out_SL = twin.generate(
                input_ids=ids_SP,
                attention_mask=torch.ones_like(ids_SP),
                do_sample=True,
                temperature=1.0,
                top_k=0,
                top_p=1.0,
                max_new_tokens=tokens,
                min_new_tokens=tokens,
                pad_token_id=256,
            )
        return int(out_SL.shape[0] * (out_SL.shape[1] - prompt_len))

    return {
        "ours": _measure(accel, "ours", streams, new_tokens, ours),
        "hf": _measure(accel, "hf", streams, new_tokens, hf),
    }


def _measure(
    accel: str, side: str, streams: int, new_tokens: int, run: Callable[[int], int]
) -> tuple[float, float, int]:
    """(seconds of a ``new_tokens`` call, of a 1-token call, tokens made) of ``run``, after
    a short warm-up call at the same stream count (the bucket's first-time cost)."""
    cold = _timed(accel, lambda: run(min(4, new_tokens)))
    made: list[int] = []
    full = _timed(accel, lambda: made.append(run(new_tokens)))
    first = _timed(accel, lambda: run(1))
    print(
        f"decode {side} {streams} streams: {full:.3f} s for {made[0]} tokens, "
        f"{first:.3f} s for the first, warm-up {cold:.3f} s"
    )
    return full, first, made[0]


def decode_rows(
    label: str,
    engine: Any,
    config: Any,
    accel: str,
    streams: tuple[int, ...],
    shape: tuple[int, int],
    bandwidth_target: bool,
) -> list[Row]:
    """Check 7's rows for one model (the module docstring): the speed target applies to the
    larger half of ``streams`` (64 and 256), the bandwidth target at the largest when
    ``bandwidth_target`` (the 0.47B model)."""
    import torch

    dry = accel != "cuda"
    twin = plain_twin(engine.model, config, accel)
    sizes = step_bytes(twin, config)
    name = torch.cuda.get_device_name() if accel == "cuda" else "cpu (dry run)"
    bandwidth, source = card_bandwidth(accel, name)
    prompt_len, new_tokens = shape
    print(f"{label}: {sizes}; bandwidth {bandwidth / 1e9:,.0f} GB/s ({source}, {name})")
    rows: list[Row] = []
    for s in streams:
        got = decode_pair(engine, twin, accel, s, prompt_len, new_tokens)
        rate = {k: n / full for k, (full, _, n) in got.items()}
        ratio = rate["ours"] / rate["hf"]
        nbytes = decode_bytes(sizes, s, prompt_len, new_tokens)
        frac = {
            k: bandwidth_fraction(nbytes, bandwidth, full - first)
            for k, (full, first, _) in got.items()
        }
        speed_from = streams[len(streams) // 2]
        speed_target = SPEED_TARGET if s >= speed_from else "info"
        rows.append(
            Row(
                f"decode tok/s, {label}, {s} streams × {new_tokens} tokens (prompt {prompt_len}),"
                " ours vs HF generate",
                rate["ours"],
                "tok/s",
                speed_target,
                meets(SPEED_TARGET, ratio) if s >= speed_from else None,
                rate["hf"],
                ratio,
                na=DRY if dry and s >= speed_from else None,
            )
        )
        targeted = bandwidth_target and s == streams[-1]
        rows.append(
            Row(
                f"decode % of the bandwidth limit, {label}, {s} streams: {nbytes / 1e9:.3g} GB "
                f"at {bandwidth / 1e9:,.0f} GB/s ({source}); HF generate "
                f"{100 * frac['hf']:.2g}%",
                100 * frac["ours"],
                "%",
                f"≥ {BANDWIDTH_TARGET_PCT:g} %" if targeted else "info",
                100 * frac["ours"] >= BANDWIDTH_TARGET_PCT if targeted else None,
                na=DRY if dry and targeted else None,
            )
        )
    del twin
    return rows


def grpo_rows(engine: Any, accel: str, shape: tuple[int, int, int, int], label: str) -> list[Row]:
    """Check 8: two GRPO steps end to end; the second is the row (the module docstring)."""
    prompts, group, prompt_len, completion = shape
    rng = random.Random(0)
    tasks = [[rng.randrange(256) for _ in range(prompt_len)] for _ in range(prompts)]
    times: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory() as home:
        for step in range(2):
            times.append(grpo_step(engine, accel, tasks, group, completion, Path(home) / str(step)))
            print(f"GRPO step {step}: " + ", ".join(f"{k} {v:.2f} s" for k, v in times[-1].items()))
    cold, warm = times
    tokens = prompts * group * completion
    return [
        Row(
            f"GRPO step end to end, {label}, {prompts} prompts × {group} samples of {completion}"
            f" tokens: save {warm['save']:.2f} s, sample {warm['sample']:.2f} s "
            f"({tokens / warm['sample']:,.0f} tok/s), train {warm['train']:.2f} s; "
            f"first step {cold['total']:.1f} s (s)",
            warm["total"],
            "s",
            "info",
            None,
        )
    ]


def grpo_step(
    engine: Any, accel: str, tasks: list[list[int]], group: int, completion: int, where: Path
) -> dict[str, float]:
    """One step: save, sample ``group`` completions per task, score, train. -> seconds."""
    started = time.perf_counter()
    engine.save_package(str(where), include_optimizer=False, merge_weights=False)
    saved = time.perf_counter()
    requests = [
        SampleRequest(prompt=t, num_samples=group, max_tokens=completion, seed=1000 * i)
        for i, t in enumerate(tasks)
    ]
    results = engine.sample(str(where), requests)
    _sync(accel)
    sampled = time.perf_counter()
    datums = []
    for task, result in zip(tasks, results, strict=True):
        rewards = [
            sum(t % 2 == 0 for t in s.tokens) / max(1, len(s.tokens)) for s in result.sequences
        ]
        mean = sum(rewards) / len(rewards)
        std = (sum((r - mean) ** 2 for r in rewards) / len(rewards)) ** 0.5
        for seq, reward in zip(result.sequences, rewards, strict=True):
            advantage = (reward - mean) / (std + 1e-6)
            row = task + seq.tokens
            n, m = len(task) - 1, len(seq.tokens)
            datums.append(
                TrainingDatum(
                    row[:-1],
                    {
                        "target_tokens": row[1:],
                        "weights": [0.0] * n + [1.0] * m,
                        "logprobs": [0.0] * n + list(seq.logprobs),
                        "advantages": [0.0] * n + [advantage] * m,
                    },
                )
            )
    engine.forward_backward(datums, "importance_sampling", None, backward=True)
    engine.optim_step(AdamHyperparams(learning_rate=1e-5))
    _sync(accel)
    done = time.perf_counter()
    return {
        "save": saved - started,
        "sample": sampled - saved,
        "train": done - sampled,
        "total": done - started,
    }


def decode_check(accel: str, rows: list[Row]) -> bool:
    """Checks 7 and 8 on ``accel`` ("cuda", or "cpu" for the dry run); append their rows.
    Returns False when a target is missed."""
    import torch

    from bench.gpu_check import llama_engine  # gpu_check imports this module only in main()

    dry = accel != "cuda"
    models = DRY_MODELS if dry else MODELS
    streams = (1, 4) if dry else STREAMS
    shape = (8, 3) if dry else (PROMPT_LEN, NEW_TOKENS)
    grpo = (2, 2, 8, 4) if dry else GRPO_SHAPE
    added: list[Row] = []
    for label, sizes in models:
        engine, config = llama_engine(f"gpu-check/llama-{label}", accel, sizes)
        try:
            first = label == models[0][0]  # the 0.47B model
            added += decode_rows(label, engine, config, accel, streams, shape, first)
            if first:
                added += grpo_rows(engine, accel, grpo, label)
        finally:
            engine.close()
            if accel == "cuda":
                torch.cuda.empty_cache()
    rows += added
    return all(r.ok is not False for r in added if r.na is None)
