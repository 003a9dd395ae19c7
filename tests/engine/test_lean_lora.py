"""LeanLoraLinear (engine/lean_lora.py) computes what peft's LoRA layer computes, bit for bit,
and hands every case it does not cover back to peft."""

from __future__ import annotations

import copy
import warnings
from typing import Any

import pytest
import torch
from peft import LoraConfig, get_peft_model
from peft.tuners.lora.layer import Linear as LoraLinear

from localsession.engine import lean_lora
from localsession.engine.builtin import build_builtin
from localsession.engine.lean_lora import LeanLoraLinear
from localsession.engine.loading import apply_lora
from localsession.engine_options import EngineOptions, SettingError

from .conftest import TINY

LORA_PRECISION_ENV = "LOCALSESSION_LORA_PRECISION"


def _lean_and_peft(dtype: torch.dtype = torch.float32, precision: str = "mixed") -> tuple[Any, Any]:
    """The engine's LoRA model over tiny (``dtype`` base, float32 adapter, random B so the
    adapter's term is not zero; ``precision``: ``EngineOptions.lora_precision``) and a copy
    whose layers run peft's own forward."""
    torch.manual_seed(0)
    base, _ = build_builtin(TINY)
    options = EngineOptions(lora_precision=precision)
    lean = apply_lora(base.to(dtype), rank=4, alpha=8, seed=0, options=options)
    with torch.no_grad():
        for name, p in lean.named_parameters():
            if "lora_" in name:
                p.data = p.data.float()
            if "lora_B" in name:
                p.copy_(torch.randn_like(p) * 0.1)
    peft = copy.deepcopy(lean)
    for module in peft.modules():
        if type(module) is LeanLoraLinear:
            module.__class__ = LoraLinear
    return lean, peft


def _loss_and_grads(model: Any, ids_BT: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    model.zero_grad(set_to_none=True)
    logits_BTV = model(input_ids=ids_BT, use_cache=False).logits
    loss = logits_BTV.float().logsumexp(-1).sum()
    loss.backward()
    return loss.detach(), [p.grad for p in model.parameters() if p.requires_grad]


def test_every_adapted_linear_layer_is_lean() -> None:
    lean, peft = _lean_and_peft()
    kinds = {type(m) for m in lean.modules() if isinstance(m, LoraLinear)}
    assert kinds == {LeanLoraLinear}
    assert sum(isinstance(m, LeanLoraLinear) for m in peft.modules()) == 0
    assert sum(isinstance(m, LoraLinear) for m in lean.modules()) == 14  # 2 layers × 7


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_outputs_and_gradients_equal_peft_bit_for_bit(dtype: torch.dtype) -> None:
    """A float32 base in any setting, and a bf16 one with ``LOCALSESSION_LORA_PRECISION=fp32``,
    run peft's kernels in peft's order."""
    lean, peft = _lean_and_peft(dtype, "fp32")
    ids_BT = torch.randint(0, 256, (3, 11), generator=torch.Generator().manual_seed(1))
    loss_lean, grads_lean = _loss_and_grads(lean, ids_BT)
    loss_peft, grads_peft = _loss_and_grads(peft, ids_BT)
    assert torch.equal(loss_lean, loss_peft)
    assert len(grads_lean) == len(grads_peft) == 28
    assert all(torch.equal(a, b) for a, b in zip(grads_lean, grads_peft, strict=True))


def test_one_layer_matches_the_closed_form() -> None:
    lean, _ = _lean_and_peft()
    layer = next(m for m in lean.modules() if isinstance(m, LeanLoraLinear))
    x_NI = torch.randn(5, layer.in_features, dtype=torch.float64)
    w_OI = layer.base_layer.weight.double()
    a_RI = layer.lora_A["default"].weight.double()
    b_OR = layer.lora_B["default"].weight.double()
    expected_NO = x_NI @ w_OI.T + (x_NI @ a_RI.T @ b_OR.T) * layer.scaling["default"]
    got_NO = layer(x_NI.float()).double()
    assert torch.allclose(got_NO, expected_NO, rtol=1e-5, atol=1e-5)
    assert not torch.allclose(got_NO, x_NI @ w_OI.T, rtol=1e-5, atol=1e-5)  # B ≠ 0 counts


def test_disabled_adapter_and_a_changed_scale_are_honoured() -> None:
    lean, peft = _lean_and_peft()
    ids_BT = torch.randint(0, 256, (2, 7), generator=torch.Generator().manual_seed(2))
    base_out = build_builtin(TINY)[0](input_ids=ids_BT, use_cache=False).logits
    with torch.no_grad(), lean.disable_adapter():
        assert torch.equal(lean(input_ids=ids_BT, use_cache=False).logits, base_out)
    with torch.no_grad():
        for model in (lean, peft):
            for module in model.modules():
                if isinstance(module, LoraLinear):
                    module.scaling["default"] = 0.25  # what a foreign snapshot does
        assert torch.equal(
            lean(input_ids=ids_BT, use_cache=False).logits,
            peft(input_ids=ids_BT, use_cache=False).logits,
        )


def test_layers_it_does_not_cover_keep_peft_forward() -> None:
    base, _ = build_builtin(TINY)
    config = LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", lora_dropout=0.1)
    with warnings.catch_warnings():  # transformers deprecations peft triggers, as in apply_lora
        warnings.simplefilter("ignore", FutureWarning)
        with_dropout = get_peft_model(base, config)
    assert lean_lora.install(with_dropout) == 0
    assert not any(isinstance(m, LeanLoraLinear) for m in with_dropout.modules())


def test_a_hooked_layer_keeps_peft_forward_and_its_hook_runs() -> None:
    """A hook on a base layer (accelerate's hooks bring disk-offloaded weights in this way)
    must run, so that layer is left to peft; the model still computes what peft computes."""
    base, _ = build_builtin(TINY)
    hooked = base.model.layers[0].self_attn.q_proj
    calls: list[int] = []

    def doubled_input(module: torch.nn.Module, args: tuple[torch.Tensor, ...]) -> tuple[Any, ...]:
        calls.append(1)
        return (args[0] * 2.0,)

    hooked.register_forward_pre_hook(doubled_input)
    accelerate_like = base.model.layers[1].mlp.down_proj
    accelerate_like._hf_hook = object()  # what accelerate's add_hook_to_module sets
    model = apply_lora(base, rank=4, alpha=8, seed=0)
    plain = [type(m) for m in model.modules() if isinstance(m, LoraLinear)]
    assert plain.count(LoraLinear) == 2 and plain.count(LeanLoraLinear) == 12
    reference = copy.deepcopy(model)
    for module in reference.modules():
        if type(module) is LeanLoraLinear:
            module.__class__ = LoraLinear
    ids_BT = torch.randint(0, 256, (2, 6), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        got = model(input_ids=ids_BT, use_cache=False).logits
        assert calls  # the hook ran inside the lean model's forward
        assert torch.equal(got, reference(input_ids=ids_BT, use_cache=False).logits)


def _float64_reference(lean: Any, ids_BT: torch.Tensor) -> tuple[float, list[torch.Tensor]]:
    """The loss and LoRA gradients of ``lean``'s weights in float64, through peft's own
    forward (a deep copy; nothing of the lean path runs)."""
    ref = copy.deepcopy(lean).double()
    for module in ref.modules():
        if type(module) is LeanLoraLinear:
            module.__class__ = LoraLinear
    loss, grads = _loss_and_grads(ref, ids_BT)
    return float(loss), grads


def test_a_bf16_base_runs_mixed_precision_products_by_default() -> None:
    """``mixed``: the bf16 products stay close to the float64 computation of the same
    weights (bf16's 8 mantissa bits: the loss within 1e-2 relative, every gradient within
    5e-2 norm-relative), the adapter and its gradients stay float32, and the result is not
    the float32-products one (so the switch does something)."""
    lean, peft = _lean_and_peft(torch.bfloat16)  # the default: mixed
    ids_BT = torch.randint(0, 256, (3, 11), generator=torch.Generator().manual_seed(1))
    loss, grads = _loss_and_grads(lean, ids_BT)
    ref_loss, ref_grads = _float64_reference(lean, ids_BT)
    assert abs(float(loss) - ref_loss) <= 1e-2 * abs(ref_loss)
    assert len(grads) == len(ref_grads) == 28
    for got, want in zip(grads, ref_grads, strict=True):
        assert got.dtype == torch.float32
        assert float((got.double() - want).norm()) <= 5e-2 * float(want.norm())
    assert all(p.dtype == torch.float32 for p in lean.parameters() if p.requires_grad)
    peft_loss, peft_grads = _loss_and_grads(peft, ids_BT)
    assert not all(torch.equal(a, b) for a, b in zip(grads, peft_grads, strict=True))


def test_a_bad_precision_setting_names_the_choices() -> None:
    with pytest.raises(SettingError) as caught:
        EngineOptions.parse({LORA_PRECISION_ENV: "half"})
    message = str(caught.value)
    assert LORA_PRECISION_ENV in message and "'half'" in message
    assert "mixed (the default" in message and "fp32" in message
