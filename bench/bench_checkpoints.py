"""Checkpoint save/load through the API vs a plain torch + peft baseline, in one process.

Measures, on ``localsession/small`` with a rank-32 adapter after one training step:

- ``save_state().result()`` (adapter + AdamW state, registered as a package), and
- ``load_state_with_optimizer(arn).result()``,

each against the same work done by hand: ``safetensors.torch.save_file`` of the adapter and
the AdamW moments, and ``load_file`` + ``copy_`` back. Targets (issue "Checkpoints"): save
under 50 ms, load under 100 ms. Prints medians over the runs, ratios, and a pass/miss line.

Run: python bench/bench_checkpoints.py [--runs 20]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402

from localsession import AdamParams, ServiceClient  # noqa: E402
from localsession.runtime.service import Service, ServiceConfig  # noqa: E402


def median_ms(fn: Callable[[], object], runs: int) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        fn()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as home:
        service = Service(ServiceConfig(home=Path(home)))
        client = ServiceClient(role_arn="arn:aws:iam::000000000000:role/bench", backend=service)
        tc = client.create_lora_training_client("localsession/small", rank=32, alpha=64)
        tokens = list(range(1, 129))
        tc.forward_backward(
            [tokens], loss_fn_inputs={"target_tokens": tokens[1:] + [0], "weights": [1.0] * 128}
        )
        tc.optim_step(AdamParams(learning_rate=1e-3)).result()
        arn = tc.save_state().result().model_package_arn
        assert arn is not None
        api_save = median_ms(lambda: tc.save_state().result(), args.runs)
        api_load = median_ms(lambda: tc.load_state_with_optimizer(arn).result(), args.runs)

        engine = service._session(tc.training_session_name, runtime=True).engine
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
        base_save, base_load = median_ms(raw_save, args.runs), median_ms(raw_load, args.runs)
        tc.stop()
        service.close()

    rows = [
        ("save_state", api_save, base_save, 50.0),
        ("load_state_with_optimizer", api_load, base_load, 100.0),
    ]
    print(f"{'metric':28} {'ours ms':>9} {'raw ms':>9} {'ratio':>7} {'target':>10}")
    for name, ours, raw, target in rows:
        print(f"{name:28} {ours:9.1f} {raw:9.1f} {ours / raw:7.2f} {'<' + str(target) + ' ms':>10}")
    missed = [name for name, ours, _, target in rows if ours >= target]
    print("pass" if not missed else f"miss: {', '.join(missed)}")


if __name__ == "__main__":
    main()
