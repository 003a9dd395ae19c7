"""``forward_backward_custom`` against the built-in losses and a direct autograd computation.

Two sessions created with the same arguments start bit-identical (docs/semantics.md#2). One
trains with a loss written here in torch through ``forward_backward_custom``; the other with
the built-in loss. Their accumulated gradients, the optimizer's ``grad_norm`` (scale matters:
Adam's first steps barely do) and the weights after ``optim_step`` must agree.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import pytest
import torch

from localsession import AdamParams, Datum, ModelInput, ServiceClient, TensorData, TrainingClient
from localsession.custom_loss import forward_backward_custom
from localsession.runtime.service import Service

MODEL = "localsession/tiny"
ADAM = AdamParams(learning_rate=5e-3, weight_decay=0.0)


def make_datums(seed: int, n: int = 3) -> list[Datum]:
    gen = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        tokens = torch.randint(0, 256, (10 + 3 * i,), generator=gen).tolist()
        weights = [0.0, 0.0] + torch.rand(len(tokens) - 2, generator=gen).tolist()
        out.append(
            Datum(
                model_input=ModelInput.from_ints(tokens),
                loss_fn_inputs={
                    "target_tokens": TensorData(data=tokens[1:] + [0], dtype="int64"),
                    "weights": TensorData(data=weights),
                },
            )
        )
    return out


def with_rl_inputs(datums: list[Datum], logprobs: list[list[float]], seed: int) -> list[Datum]:
    """Add sampler logprobs q = lp + noise (ratios between ~0.6 and ~1.6) and advantages."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for d, lp in zip(datums, logprobs, strict=True):
        n = len(lp)
        q = (torch.tensor(lp) + 0.5 * (torch.rand(n, generator=gen) - 0.5)).tolist()
        adv = (torch.randn(n, generator=gen)).tolist()
        inputs = dict(d.loss_fn_inputs or {})
        inputs["logprobs"] = TensorData(data=q)
        inputs["advantages"] = TensorData(data=adv)
        out.append(Datum(model_input=d.model_input, loss_fn_inputs=inputs))
    return out


def column(datum: Any, key: str) -> torch.Tensor:
    return torch.tensor(datum.loss_fn_inputs[key].data, dtype=torch.float32)


def ce_loss(datums: list[Datum], lps: list[torch.Tensor]) -> torch.Tensor:
    """-Σ w·lp, written independently of the engine."""
    return sum(
        (-(column(d, "weights") * lp).sum() for d, lp in zip(datums, lps, strict=True)),
        torch.zeros(()),
    )


def is_loss(datums: list[Datum], lps: list[torch.Tensor]) -> tuple[torch.Tensor, dict[str, float]]:
    """-Σ w·exp(lp - q)·A, plus a metric of our own."""
    total = torch.zeros(())
    for d, lp in zip(datums, lps, strict=True):
        ratio = torch.exp(lp - column(d, "logprobs"))
        total = total - (column(d, "weights") * ratio * column(d, "advantages")).sum()
    return total, {"custom/n": float(len(datums))}


@pytest.fixture
def pair(relaxed: ServiceClient) -> Iterator[tuple[TrainingClient, TrainingClient]]:
    with (
        relaxed.create_lora_training_client(MODEL, rank=4, alpha=8) as a,
        relaxed.create_lora_training_client(MODEL, rank=4, alpha=8) as b,
    ):
        # one identical warm-up step, so the LoRA B matrices are non-zero and A gets gradient
        warm = make_datums(seed=99)
        for tc in (a, b):
            tc.forward_backward(warm, "cross_entropy").result(timeout=60)
            tc.optim_step(ADAM).result(timeout=60)
        yield a, b


def engine_of(service: Service, tc: TrainingClient) -> Any:
    return service.session(tc.training_session_name).engine


def grads(service: Service, tc: TrainingClient) -> dict[str, torch.Tensor]:
    model = engine_of(service, tc).model
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def assert_same_training(service: Service, a: TrainingClient, b: TrainingClient) -> None:
    ga, gb = grads(service, a), grads(service, b)
    assert ga.keys() == gb.keys() and len(ga) == 28
    for name in ga:
        torch.testing.assert_close(ga[name], gb[name], atol=1e-6, rtol=1e-5)
    na = a.optim_step(ADAM).result(timeout=60).metrics["grad_norm"]
    nb = b.optim_step(ADAM).result(timeout=60).metrics["grad_norm"]
    assert na > 0 and na == pytest.approx(nb, rel=1e-5)
    wa = engine_of(service, a).adapter_state_dict()
    wb = engine_of(service, b).adapter_state_dict()
    for name in wa:
        torch.testing.assert_close(wa[name], wb[name], atol=1e-6, rtol=0)


def test_custom_cross_entropy_equals_builtin(
    service: Service, pair: tuple[TrainingClient, TrainingClient]
) -> None:
    a, b = pair
    datums = make_datums(seed=1)
    out = forward_backward_custom(a, datums, ce_loss)
    builtin = b.forward_backward(datums, "cross_entropy").result(timeout=60)
    # the built-in reports the mean over datums of each datum's sum; ce_loss sums them all
    assert out.loss == pytest.approx(builtin.metrics["loss"] * len(datums), rel=1e-6)
    assert out.metrics["loss"] == out.loss
    assert out.metrics["global_token_num"] == builtin.metrics["global_token_num"]
    # the surrogate Σ g·lp equals the loss here (linear in lp), reported per datum
    assert out.metrics["surrogate_loss"] * len(datums) == pytest.approx(out.loss, rel=1e-5)
    assert [len(x) for x in out.logprobs] == [10, 13, 16]
    assert_same_training(service, a, b)


def test_custom_importance_sampling_equals_builtin(
    service: Service, pair: tuple[TrainingClient, TrainingClient]
) -> None:
    a, b = pair
    plain = make_datums(seed=2)
    lps = [
        o["logprobs"]["data"]
        for o in b.forward(plain, "cross_entropy").result(timeout=60).loss_fn_outputs or []
    ]
    datums = with_rl_inputs(plain, lps, seed=3)
    out = forward_backward_custom(a, datums, is_loss)
    builtin = b.forward_backward(datums, "importance_sampling").result(timeout=60)
    assert out.loss == pytest.approx(builtin.metrics["loss"] * len(datums), rel=1e-5)
    assert out.metrics["custom/n"] == 3.0
    assert_same_training(service, a, b)


def test_custom_dpo_gradient_matches_direct_autograd(
    service: Service, relaxed: ServiceClient
) -> None:
    """A pairwise, non-linear loss: the gradient equals autograd through the model itself."""
    with relaxed.create_lora_training_client(MODEL, rank=4, alpha=8) as tc:
        tc.forward_backward(make_datums(seed=98), "cross_entropy").result(timeout=60)
        tc.optim_step(ADAM).result(timeout=60)
        chosen, rejected = make_datums(seed=4, n=2)
        beta, ref = 0.5, (-40.0, -38.0)

        def dpo(datums: list[Datum], lps: list[torch.Tensor]) -> torch.Tensor:
            seq = [(column(d, "weights") * lp).sum() for d, lp in zip(datums, lps, strict=True)]
            margin = beta * ((seq[0] - ref[0]) - (seq[1] - ref[1]))
            return -torch.nn.functional.logsigmoid(margin)

        out = forward_backward_custom(tc, [chosen, rejected], dpo)
        got = grads(service, tc)
        engine = engine_of(service, tc)
        model = engine.model
        for p in model.parameters():
            p.grad = None
        seq_lp = []
        for d in (chosen, rejected):
            assert d.model_input is not None
            ids = torch.tensor([d.model_input.to_ints()])
            logits = model(input_ids=ids).logits[0].float()
            targets = column(d, "target_tokens").long()
            lp = torch.log_softmax(logits, -1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
            seq_lp.append((column(d, "weights") * lp).sum())
        margin = beta * ((seq_lp[0] - ref[0]) - (seq_lp[1] - ref[1]))
        direct = -torch.nn.functional.logsigmoid(margin)
        direct.backward()
        assert out.loss == pytest.approx(float(direct.detach()), rel=1e-5)
        assert math.isfinite(out.metrics["surrogate_loss"])
        for name, p in model.named_parameters():
            if p.grad is not None:
                torch.testing.assert_close(got[name], p.grad, atol=1e-6, rtol=1e-4)
        assert any(float(g.abs().max()) > 0 for g in got.values())
