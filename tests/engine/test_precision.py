"""The compute dtype (``LOCALSESSION_DTYPE``) and the bf16 path on the CPU.

bf16 keeps a float32 master adapter and float32 AdamW moments over a bfloat16 base; its loss
stays within the stated bound (relative 2e-2) of float32's. The real-model check is slow.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest
import torch

from localsession.engine import precision
from localsession.engine.torch_engine import TorchEngine
from localsession.engine_options import EngineOptions
from localsession.port import AdamHyperparams, SampleRequest

from .conftest import OPTIONS
from .helpers import make_datum, random_tokens

#: The stated bound: |loss_bf16 - loss_fp32| / |loss_fp32| on the same batch.
BF16_REL_BOUND = 2e-2


def test_dtype_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    cpu, cuda = torch.device("cpu"), torch.device("cuda")

    def chosen(raw: str | None) -> str:  # the option the variable sets, as the wiring reads it
        return EngineOptions.parse({} if raw is None else {precision.DTYPE_ENV: raw}).dtype

    assert precision.pick_dtype(cpu, torch.float32, chosen(None)) == torch.float32
    assert precision.pick_dtype(cuda, torch.bfloat16, chosen(None)) == torch.bfloat16
    assert precision.pick_dtype(cpu, torch.float32, chosen("bf16")) == torch.bfloat16
    assert precision.pick_dtype(cuda, torch.bfloat16, chosen("FP32")) == torch.float32
    assert precision.pick_dtype(cuda, torch.float32, chosen("auto")) == torch.bfloat16
    monkeypatch.setattr(precision, "cpu_flags", lambda: frozenset({"avx2"}))
    assert precision.pick_dtype(cpu, torch.float32, "auto") == torch.float32
    monkeypatch.setattr(precision, "cpu_flags", lambda: frozenset({"avx2", "avx512_bf16"}))
    assert precision.cpu_bf16_isa() == "avx512_bf16"
    assert precision.pick_dtype(cpu, torch.float32, "auto") == torch.bfloat16
    monkeypatch.setattr(precision, "cpu_flags", lambda: frozenset({"amx_bf16", "avx512_bf16"}))
    assert precision.cpu_bf16_isa() == "amx_bf16"
    with pytest.raises(ValueError, match="LOCALSESSION_DTYPE='fp16'.*fp32, bf16, auto"):
        chosen("fp16")


def _step(engine: TorchEngine, data: list[dict[str, object]]) -> float:
    out = engine.forward_backward(data, "cross_entropy", None, backward=True)
    engine.optim_step(AdamHyperparams(learning_rate=1e-2))
    return float(out.metrics["loss"])


def test_bf16_keeps_fp32_master_adapter(
    make_engine: Callable[..., TorchEngine], monkeypatch: pytest.MonkeyPatch
) -> None:
    data = [make_datum(t) for t in random_tokens(4, 32, seed=4)]
    fp32 = make_engine(base_model="localsession/small", options=replace(OPTIONS, dtype="fp32"))
    bf16 = make_engine(base_model="localsession/small", options=replace(OPTIONS, dtype="bf16"))
    frozen = [p for p in bf16.model.parameters() if not p.requires_grad]
    trainable = [p for p in bf16.model.parameters() if p.requires_grad]
    assert {p.dtype for p in frozen} == {torch.bfloat16}
    assert {p.dtype for p in trainable} == {torch.float32}
    losses32 = [_step(fp32, data) for _ in range(3)]
    losses16 = [_step(bf16, data) for _ in range(3)]
    moments = bf16.optimizer.named_state()
    assert moments and all(m.exp_avg.dtype == torch.float32 for m in moments.values())
    for a, b in zip(losses32, losses16, strict=True):
        assert abs(a - b) / abs(a) <= BF16_REL_BOUND, (losses32, losses16)
    assert losses16[-1] < losses16[0]  # it trains
    out = bf16.sample(None, [SampleRequest(prompt=[1, 2, 3], max_tokens=4, seed=0)])
    assert len(out[0].sequences[0].tokens) == 4
