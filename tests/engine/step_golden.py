"""A fixed-seed record of the training step's numbers, so a refactor of the step cannot move them.

:func:`record` runs every case below on fresh ``localsession/tiny`` engines (seed 0, rank 8,
CPU float32, one torch thread) and returns plain JSON: each ``forward_backward``'s metrics
and per-datum ``logprobs`` / ``elementwise_loss`` / diagnostics, each ``optim_step``'s
metrics, a forward after two AdamW steps, and a SHA-256 of every adapter tensor's bytes
after those steps. Floats are stored as Python's ``repr`` (exact for float32 values read
back through ``tolist``).

Cases: the four service losses on a padded batch (with ``ref_log_prob`` and a tempered
datum), the same batch through the shared-prefix path (mode ``on``) and through CPU
micro-batches (``CHUNK_TOKENS`` cut to 8), and the Tinker dialect's surrogate losses
``dro`` and ``gspo`` as that dialect runs them (a forward for ``lp``, then a
``cross_entropy`` backward whose weights are the loss's ``-dl/dlp``,
server/tinker/dro.py), computed here with the same numerics functions.

``step_golden.json`` was written by ``python tests/engine/step_golden.py`` (from the
repository root, ``PYTHONPATH=. HF_HUB_OFFLINE=1``) on main at ef103e6, before the step's
refactor (issue 55 item 7); tests/engine/test_step_golden.py compares a fresh record
with it.
"""

from __future__ import annotations

import hashlib
import json
import platform
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

FIXTURE = Path(__file__).with_name("step_golden.json")
TINY = "localsession/tiny"

#: three datums of different lengths (so rows are padded), sharing a 6-token prefix
TOKENS = [
    [257, 68, 82, 79, 32, 108, 111, 115, 115, 33],
    [257, 68, 82, 79, 32, 108, 97, 98],
    [257, 68, 82, 79, 32, 108, 120, 121, 122, 44, 45, 46],
]
ADAM = {"learning_rate": 1e-2, "weight_decay": 0.01, "grad_clip_norm": 5.0}
SERVICE_LOSSES = ("cross_entropy", "importance_sampling", "ppo", "cispo")


def _inputs(loss_fn: str, index: int, tokens: list[int]) -> dict[str, list[Any]]:
    """Datum ``index``'s ``loss_fn_inputs``: targets are the next tokens (last wraps)."""
    n = len(tokens)
    targets = [*tokens[1:], tokens[0]]
    out: dict[str, list[Any]] = {
        "target_tokens": targets,
        "weights": [0.0 if t < 2 else 1.0 - 0.1 * (t % 3) for t in range(n)],
    }
    if loss_fn != "cross_entropy":
        out["logprobs"] = [-5.0 + 0.3 * ((t * 7 + index) % 5) for t in range(n)]
        out["advantages"] = [(1.0 if (t + index) % 2 else -0.5) * (1 + index) for t in range(n)]
        out["ref_log_prob"] = [-5.2 + 0.1 * (t % 4) for t in range(n)]
    if index == 1:
        out["temperature"] = [0.7] * n
    return out


def _datums(loss_fn: str) -> list[Any]:
    from localsession.port import TrainingDatum

    return [TrainingDatum(list(t), _inputs(loss_fn, i, t)) for i, t in enumerate(TOKENS)]


def _engine() -> Any:
    from localsession.engine.torch_engine import TorchEngine
    from localsession.engine_options import EngineOptions
    from localsession.port import EngineSpec

    # the defaults on the CPU with one torch thread and torch's own linears (``auto`` picks
    # oneDNN or MKL by timing them: fast_linear.py), whatever the environment says
    options = EngineOptions(device="cpu", threads=1, linear="mkl")
    return TorchEngine(EngineSpec(TINY, rank=8, alpha=16, seed=0, options=options))


def _fwd(result: Any) -> dict[str, Any]:
    """A ForwardResult as JSON, less ``mfu`` and ``promised_flops`` (timed: a probe, a clock)."""
    from localsession import vocab

    timed = (vocab.Metric.MFU, vocab.Metric.PROMISED_FLOPS)
    metrics = {str(k): v for k, v in result.metrics.items() if k not in timed}
    outputs = [
        {"logprobs": o.logprobs, "elementwise_loss": o.elementwise_loss, "extra": o.extra}
        for o in result.outputs
    ]
    return {"metrics": dict(sorted(metrics.items())), "outputs": outputs}


def _weights(engine: Any) -> dict[str, str]:
    return {
        name: hashlib.sha256(t.contiguous().numpy().tobytes()).hexdigest()
        for name, t in sorted(engine.adapter_state_dict().items())
    }


def _norms(engine: Any) -> dict[str, float]:
    """Each adapter tensor's L2 norm (compared with a tolerance on another CPU)."""
    return {
        name: float(t.double().norm()) for name, t in sorted(engine.adapter_state_dict().items())
    }


@contextmanager
def _chunked() -> Iterator[None]:
    from localsession.engine import train_step

    saved = train_step.CHUNK_TOKENS
    train_step.CHUNK_TOKENS = 8  # 12-token rows: one row per micro-batch
    try:
        yield
    finally:
        train_step.CHUNK_TOKENS = saved


def _service_case(loss_fn: str, mode: str) -> dict[str, Any]:
    from localsession.port import AdamHyperparams

    engine = _engine()
    try:
        engine.retune(shared_prefix_mode="on" if mode == "shared" else "off")
        record: dict[str, Any] = {"steps": []}
        for _ in range(2):
            if mode == "chunked":
                with _chunked():
                    out = engine.forward_backward(_datums(loss_fn), loss_fn, None, backward=True)
            else:
                out = engine.forward_backward(_datums(loss_fn), loss_fn, None, backward=True)
            step = engine.optim_step(AdamHyperparams(**ADAM))
            record["steps"].append({"forward_backward": _fwd(out), "optim": step.metrics})
        record["forward_after"] = _fwd(engine.forward(_datums(loss_fn), loss_fn, None))
        record["weights_sha256"] = _weights(engine)
        record["weights_norm"] = _norms(engine)
        return record
    finally:
        engine.close()


def _surrogate_weights(loss: str, index: int, lp: list[float]) -> tuple[list[float], list[float]]:
    """(elementwise loss, cross-entropy weights) of datum ``index`` at ``lp``."""
    import torch

    from localsession.numerics.dro_loss import dro_backward_weights, dro_loss
    from localsession.numerics.sequence_losses import gspo, surrogate_weights

    rl = _inputs("importance_sampling", index, TOKENS[index])
    q, adv = rl["logprobs"], rl["advantages"]
    if loss == "dro":
        ones = [1.0] * len(lp)
        return dro_loss(lp, q, adv, ones, 0.2), dro_backward_weights(lp, q, adv, ones, 0.2)
    q_T = torch.tensor(q, dtype=torch.float64)
    adv_T = torch.tensor(adv, dtype=torch.float64)
    mask_T = torch.tensor([0.0, 0.0] + [1.0] * (len(lp) - 2), dtype=torch.float64)
    return surrogate_weights(lambda lp_T: gspo(lp_T, q_T, adv_T, mask_T, 0.2, 0.3), lp)


def _surrogate_case(loss: str) -> dict[str, Any]:
    from localsession.port import AdamHyperparams, TrainingDatum

    engine = _engine()
    try:
        engine.retune(shared_prefix_mode="off")
        record: dict[str, Any] = {"steps": []}
        for _ in range(2):
            plain = _datums("cross_entropy")
            for d in plain:
                d.loss_fn_inputs.pop("temperature", None)
                d.loss_fn_inputs["weights"] = [1.0] * len(d.tokens)
            lps = [o.logprobs for o in engine.forward(plain, "cross_entropy", None).outputs]
            pairs = [_surrogate_weights(loss, i, lp) for i, lp in enumerate(lps)]
            backward = [
                TrainingDatum(d.tokens, {**d.loss_fn_inputs, "weights": w})
                for d, (_, w) in zip(plain, pairs, strict=True)
            ]
            out = engine.forward_backward(backward, "cross_entropy", None, backward=True)
            step = engine.optim_step(AdamHyperparams(**ADAM))
            record["steps"].append(
                {
                    "lp": lps,
                    "loss": [p[0] for p in pairs],
                    "weights": [p[1] for p in pairs],
                    "forward_backward": _fwd(out),
                    "optim": step.metrics,
                }
            )
        record["weights_sha256"] = _weights(engine)
        record["weights_norm"] = _norms(engine)
        return record
    finally:
        engine.close()


def environment() -> dict[str, str]:
    """What the exact numbers depend on besides the code: torch and the CPU's kernels."""
    import torch

    return {
        "torch": torch.__version__,
        "cpu_capability": str(torch.backends.cpu.get_cpu_capability()),
        "machine": platform.machine(),
    }


def record() -> dict[str, Any]:
    """Every case's numbers (see the module docstring), with one torch thread."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        cases: dict[str, Any] = {}
        for loss_fn in SERVICE_LOSSES:
            cases[loss_fn] = _service_case(loss_fn, "plain")
        cases["ppo/shared_prefix"] = _service_case("ppo", "shared")
        cases["cross_entropy/shared_prefix"] = _service_case("cross_entropy", "shared")
        cases["cispo/chunked"] = _service_case("cispo", "chunked")
        cases["cross_entropy/chunked"] = _service_case("cross_entropy", "chunked")
        cases["dro"] = _surrogate_case("dro")
        cases["gspo"] = _surrogate_case("gspo")
        return cases
    finally:
        torch.set_num_threads(threads)


def main() -> None:
    data = {"environment": environment(), "cases": record()}
    FIXTURE.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {FIXTURE} ({len(data['cases'])} cases)", file=sys.stderr)


if __name__ == "__main__":
    main()
