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
   decode step). Target ≥ 10% at 256 streams on the 0.47B model. The byte count and the
   card's bandwidth (a table by device name, else a timed copy) are bench/bandwidth.py's.
8. **GRPO step.** On the 0.47B model, the loop an RL user writes: save the adapter for
   sampling (``save_package``), sample 8 prompts × 8 completions of 512 tokens from it, score
   them (a toy reward: the share of even token ids), group-normalise the advantages, then
   ``forward_backward(importance_sampling)`` over slices of 16 datums (the gradients add up)
   and one ``optim_step``, end to end. Two steps: the first
   pays every first-time cost (a bucket met for the first time, kernels, allocator), the
   second is the row.

gpu_check's ``--dry-run`` runs both on the CPU on 2-layer models at toy sizes, where the rows
are "n/a: dry run" (a GPU target means nothing there); tests/bench checks their structure and
the bandwidth arithmetic (tests/bench/test_gpu_decode.py).
"""

from __future__ import annotations

import math
import random
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.bandwidth import bandwidth_fraction, card_bandwidth, decode_bytes, step_bytes, sync
from bench.common import Row, meets
from localsession.port import AdamHyperparams, SampleRequest, TrainingDatum

#: (label, (hidden, intermediate, layers, heads, kv heads)) of gpu_check's two models.
MODELS = (("0.47B", (1024, 4096, 26, 16, 8)), ("1.1B", (2048, 8192, 16, 32, 8)))
DRY_MODELS = (("0.47B", (128, 256, 2, 4, 2)), ("1.1B", (128, 256, 2, 8, 4)))
STREAMS = (1, 8, 64, 256)
PROMPT_LEN, NEW_TOKENS = 64, 128
SPEED_TARGET = "≥ 4×"
BANDWIDTH_TARGET_PCT = 10.0
#: GRPO shape: prompts, completions per prompt, prompt tokens, completion tokens.
GRPO_SHAPE = (8, 8, 128, 512)
#: Datums per ``forward_backward`` of the GRPO step (16 × 640 tokens: ~10k tokens, well
#: inside a 40 GB card; the engine does not split a batch on CUDA).
TRAIN_SLICE = 16
DRY = "dry run"
UNTIMED = "the 1-token call took as long as the whole call: no decode time to divide by"
NAN = float("nan")


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


def _timed(accel: str, fn: Callable[[], object]) -> float:
    sync(accel)
    started = time.perf_counter()
    fn()
    sync(accel)
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
        # the decode steps' time; NaN where the 1-token call took as long (a noisy box)
        frac = {
            k: bandwidth_fraction(nbytes, bandwidth, full - first) if full > first else NAN
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
                na=DRY if dry and targeted else UNTIMED if math.isnan(frac["ours"]) else None,
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
    sync(accel)
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
    for at in range(0, len(datums), TRAIN_SLICE):  # gradients add over the slices
        chunk = datums[at : at + TRAIN_SLICE]
        engine.forward_backward(chunk, "importance_sampling", None, backward=True)
    engine.optim_step(AdamHyperparams(learning_rate=1e-5))
    sync(accel)
    done = time.perf_counter()
    return {
        "save": saved - started,
        "sample": sampled - saved,
        "train": done - sampled,
        "total": done - started,
    }


def decode_check(accel: str, rows: list[Row], label: str) -> bool:
    """Check 7 on model ``label`` ("0.47B" or "1.1B") on ``accel`` ("cuda", or "cpu" for the
    dry run); append its rows. Returns False when a target is missed."""
    dry = accel != "cuda"
    sizes = dict(DRY_MODELS if dry else MODELS)[label]
    streams = (1, 4) if dry else STREAMS
    shape = (8, 3) if dry else (PROMPT_LEN, NEW_TOKENS)
    with _engine(accel, label, sizes) as (engine, config):
        added = decode_rows(label, engine, config, accel, streams, shape, label == MODELS[0][0])
        added.append(graph_row(label, engine, dry))
    rows += added
    return all(r.ok is not False for r in added if r.na is None)


def graph_row(label: str, engine: Any, dry: bool) -> Row:
    """Whether every decode step of the check ran as a captured CUDA graph: a capture that
    fails only logs a line and decodes eagerly, which the rows above would time unawares."""
    from localsession.engine import decode_step

    kinds = sorted(set(engine._sampler._runner.kinds.values()))
    failed = sorted(decode_step._failed)
    ok = kinds == ["graph"] and not failed
    return Row(
        f"decode steps as CUDA graphs, {label}: step kinds {kinds}, failed modes {failed}",
        float(ok),
        "",
        "graphs only",
        ok,
        na=DRY if dry else None,
    )


def grpo_check(accel: str, rows: list[Row]) -> None:
    """Check 8 on the 0.47B model; append its row (information only)."""
    label, sizes = (DRY_MODELS if accel != "cuda" else MODELS)[0]
    with _engine(accel, label, sizes) as (engine, _):
        rows += grpo_rows(engine, accel, (2, 2, 8, 4) if accel != "cuda" else GRPO_SHAPE, label)


@contextmanager
def _engine(accel: str, label: str, sizes: tuple[int, int, int, int, int]) -> Iterator[Any]:
    """(engine, config) of gpu_check's Llama with ``sizes``, closed (and the CUDA cache
    emptied) on exit."""
    from bench.gpu_check import empty_cuda_cache, llama_engine  # imports this module in main()

    engine, config = llama_engine(f"gpu-check/llama-{label}", accel, sizes)
    try:
        yield engine, config
    finally:
        engine.close()
        if accel == "cuda":
            empty_cuda_cache()
