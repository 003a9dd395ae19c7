"""The fused output head (engine/head_logprobs.py) against a plain computation: the model's
own logits, ``log_softmax`` and ``gather``, values and LoRA gradients within float rounding;
where it applies and where the plain path runs instead."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from localsession.engine import head_logprobs
from localsession.engine.compiled import TrainingForward
from localsession.engine.torch_engine import TorchEngine
from localsession.engine_options import EngineOptions
from localsession.port import EngineSpec

from .conftest import OPTIONS, TINY


def reference(
    model: Any, ids_RL: torch.Tensor, pos_M: torch.Tensor, tok_M: torch.Tensor, tau_N: Any
) -> torch.Tensor:
    """log softmax(logits / tau)[pos, tok] from the full logits, written out by hand."""
    logits_RLV = model(input_ids=ids_RL, use_cache=False).logits
    logits_NV = logits_RLV.reshape(-1, logits_RLV.shape[-1]).float()
    if tau_N is not None:
        logits_NV = logits_NV / tau_N.unsqueeze(-1)
    return torch.log_softmax(logits_NV, dim=-1)[pos_M, tok_M]


def lora_grads(model: Any, lp_M: torch.Tensor, weights_M: torch.Tensor) -> list[torch.Tensor]:
    """d(Σ w·lp)/d(LoRA parameters), gradients cleared after."""
    (lp_M * weights_M).sum().backward()
    params = [p for p in model.parameters() if p.requires_grad]
    grads = [p.grad.clone() for p in params if p.grad is not None]
    for p in params:
        p.grad = None
    return grads


@pytest.fixture
def lora_model(make_engine: Callable[..., TorchEngine]) -> Any:
    model = make_engine(rank=4, seed=7).model
    with torch.no_grad():  # B starts at zero: give the adapter a real effect on the logits
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0.0, 0.05, generator=torch.Generator().manual_seed(len(name)))
    return model


@pytest.mark.parametrize("tempered", [False, True])
@pytest.mark.parametrize("chunk_rows", [1, 3, 10_000])
def test_values_and_gradients_match_the_plain_logits(
    lora_model: Any, monkeypatch: pytest.MonkeyPatch, tempered: bool, chunk_rows: int
) -> None:
    vocab = lora_model.get_output_embeddings().weight.shape[0]
    monkeypatch.setitem(head_logprobs.CHUNK_BYTES, "cpu", 4 * vocab * chunk_rows)
    gen = torch.Generator().manual_seed(chunk_rows + tempered)
    ids_RL = torch.randint(3, vocab, (3, 11), generator=gen)
    n = ids_RL.numel()
    # picks as packed rows make them: some positions twice (a shared prompt's last token,
    # read by two completions), some not at all, tokens anywhere in the vocabulary
    pos_M = torch.cat([torch.arange(0, n, 2), torch.tensor([4, 4, 17])])
    tok_M = torch.randint(0, vocab, pos_M.shape, generator=gen)
    tau_N = torch.rand(n, generator=gen) + 0.5 if tempered else None
    weights_M = torch.randn(pos_M.shape, generator=gen)
    assert head_logprobs.split_head(lora_model) is not None  # the fused path runs

    fused_M = head_logprobs.target_logprobs(lora_model, {"input_ids": ids_RL}, tok_M, tau_N, pos_M)
    fused_grads = lora_grads(lora_model, fused_M, weights_M)
    plain_M = reference(lora_model, ids_RL, pos_M, tok_M, tau_N)
    plain_grads = lora_grads(lora_model, plain_M, weights_M)

    torch.testing.assert_close(fused_M, plain_M.detach(), rtol=1e-5, atol=1e-5)
    assert len(fused_grads) == len(plain_grads) > 0
    for got, want in zip(fused_grads, plain_grads, strict=True):  # relative to the tensor
        assert float((got - want).norm()) <= 1e-5 * float(want.norm()) + 1e-9


def test_every_position_in_order_is_the_default(lora_model: Any) -> None:
    ids_RL = torch.randint(3, 256, (2, 9), generator=torch.Generator().manual_seed(1))
    targets_RL = torch.roll(ids_RL, -1, dims=1)
    got_RL = head_logprobs.row_logprobs(lora_model, ids_RL, targets_RL, None)
    n = ids_RL.numel()
    want_N = reference(lora_model, ids_RL, torch.arange(n), targets_RL.reshape(-1), None)
    torch.testing.assert_close(got_RL, want_N.view(2, 9).detach(), rtol=1e-5, atol=1e-5)


def test_the_backward_runs_once(lora_model: Any) -> None:
    ids_RL = torch.randint(3, 256, (1, 6), generator=torch.Generator().manual_seed(2))
    lp_M = head_logprobs.target_logprobs(lora_model, {"input_ids": ids_RL}, ids_RL[0], None)
    lp_M.sum().backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="runs once"):
        lp_M.sum().backward()


def test_where_the_plain_path_runs(
    lora_model: Any, monkeypatch: pytest.MonkeyPatch, make_engine: Callable[..., TorchEngine]
) -> None:
    forward = TrainingForward(lora_model, torch.device("cpu"))
    assert head_logprobs.split_head(forward) is not None  # eager: through to the model
    monkeypatch.setattr(forward, "compiled", lambda **_: None)  # as if torch.compile ran
    assert head_logprobs.split_head(forward) is None

    head = TorchEngine(
        EngineSpec(TINY, rank=4, alpha=16, seed=3, train_unembed=True, options=OPTIONS)
    )
    try:
        assert head_logprobs.split_head(head.model) is None  # LoRA on the head: not plain
    finally:
        head.close()

    base = lora_model.get_base_model()
    monkeypatch.setattr(base.config, "model_type", "gemma2")  # soft-capped logits
    assert head_logprobs.split_head(lora_model) is None
    monkeypatch.setattr(base.config, "model_type", "llama")
    head_logprobs.mark(lora_model, False)  # EngineOptions(fused_head=False)
    assert head_logprobs.split_head(lora_model) is None
    # ...and the plain path gives the same values
    ids_RL = torch.randint(3, 256, (2, 5), generator=torch.Generator().manual_seed(3))
    pos_M, tok_M = torch.tensor([0, 0, 7]), torch.tensor([5, 9, 200])  # below the byte vocabulary
    got_M = head_logprobs.target_logprobs(lora_model, {"input_ids": ids_RL}, tok_M, None, pos_M)
    want_M = reference(lora_model, ids_RL, pos_M, tok_M, None)
    torch.testing.assert_close(got_M, want_M, rtol=1e-6, atol=1e-6)


def test_the_option_marks_every_model_an_engine_decodes_with(
    make_engine: Callable[..., TorchEngine],
) -> None:
    """``fused_head=False`` reaches the training model, and the plain decoding copies."""
    off = make_engine(options=EngineOptions.parse({"LOCALSESSION_FUSED_HEAD": "off"}))
    assert head_logprobs.split_head(off.model) is None
    assert head_logprobs.split_head(off._train_forward) is None
    plain = off._decoders.get(None, None)
    assert plain is not None and head_logprobs.split_head(plain) is None
    on = make_engine(options=EngineOptions())
    assert head_logprobs.split_head(on.model) is not None


def test_a_bad_switch_names_the_variable() -> None:
    with pytest.raises(ValueError, match="LOCALSESSION_FUSED_HEAD='sometimes'.*on .*or off"):
        EngineOptions.parse({"LOCALSESSION_FUSED_HEAD": "sometimes"})
