"""Checkpoint save/load through the API vs a plain torch + peft baseline, in one process.

Measures, on ``localsession/small`` with a rank-32 adapter after one training step:

- ``save_state().result()`` (adapter + AdamW state, registered as a package), and
- ``load_state_with_optimizer(arn).result()``,

each against the same work done by hand: ``safetensors.torch.save_file`` of the adapter and
the AdamW moments, and ``load_file`` + ``copy_`` back. Targets (issue "Checkpoints"): save
under 50 ms, load under 100 ms (the ratio to the hand-written baseline is shown for
information). Medians over the runs, API and baseline interleaved.

Run: python bench/bench_checkpoints.py [--smoke] [--runs 20]
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402

from bench.common import Row, bench_args, emit, interleaved, median  # noqa: E402
from localsession import AdamParams, ServiceClient  # noqa: E402
from localsession.runtime.service import ServiceConfig  # noqa: E402
from localsession.wiring import build_service


def collect(smoke: bool = False, runs: int = 20) -> list[Row]:
    """The save and load rows (``smoke``: the tiny model, one repetition)."""
    model_name = "localsession/tiny" if smoke else "localsession/small"
    runs = 1 if smoke else runs
    with tempfile.TemporaryDirectory() as home:
        service = build_service(ServiceConfig(home=Path(home)))
        client = ServiceClient(
            "us-west-2", role_arn="arn:aws:iam::000000000000:role/bench", backend=service
        )
        tc = client.create_lora_training_client(model_name, rank=32, alpha=64)
        tokens = list(range(1, 129))
        tc.forward_backward(
            [tokens], loss_fn_inputs={"target_tokens": tokens[1:] + [0], "weights": [1.0] * 128}
        )
        tc.optim_step(AdamParams(learning_rate=1e-3)).result()
        arn = tc.save_state().result().model_package_arn
        assert arn is not None

        engine = service.session(tc.training_session_name).engine
        model = engine.model  # type: ignore[union-attr]
        optimizer = engine.optimizer.optimizer  # type: ignore[union-attr]
        params = {n: p for n, p in model.named_parameters() if p.requires_grad}
        moments = {
            f"{n}.{k}": optimizer.state[p][k]
            for n, p in params.items()
            for k in ("exp_avg", "exp_avg_sq")
            if p in optimizer.state
        }
        raw_dir = Path(home) / "raw"
        raw_dir.mkdir()

        def raw_save() -> None:
            save_file(
                {n: p.detach().contiguous() for n, p in params.items()},
                str(raw_dir / "adapter.safetensors"),
            )
            save_file(
                {n: t.contiguous() for n, t in moments.items()},
                str(raw_dir / "optimizer.safetensors"),
            )

        def raw_load() -> None:
            weights = load_file(str(raw_dir / "adapter.safetensors"))
            state = load_file(str(raw_dir / "optimizer.safetensors"))
            with torch.no_grad():
                for n, p in params.items():
                    p.copy_(weights[n])
                for n, t in moments.items():
                    t.copy_(state[n])

        raw_save()
        times = interleaved(
            {
                "api save": lambda: tc.save_state().result(),
                "raw save": raw_save,
                "api load": lambda: tc.load_state_with_optimizer(arn).result(),
                "raw load": raw_load,
            },
            runs,
        )
        tc.stop()
        service.close()

    short = model_name.split("/")[-1]
    out = []
    for label, key, limit in (
        ("save_state", "save", 50.0),
        ("load_state_with_optimizer", "load", 100.0),
    ):
        ours, base = median(times[f"api {key}"]) * 1e3, median(times[f"raw {key}"]) * 1e3
        out.append(
            Row(
                f"checkpoint: {label}, {short} (ms)",
                ours,
                "ms",
                f"≤ {limit:g} ms",
                ours <= limit,
                base,
                ours / base,
            )
        )
    return out


def main() -> None:
    parser = bench_args(__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    emit(collect(args.smoke, args.runs), args, "checkpoints: API vs safetensors by hand")


if __name__ == "__main__":
    main()
