"""Tinker's ``dro`` loss through the unmodified ``tinker`` SDK: its ``loss:sum`` is the closed
form over the model's own logprobs, and its update equals the one the SDK's client-side
``forward_backward_custom`` makes from the same loss written in torch (two models with the
same seed start equal; after one step each, their logprobs agree)."""

from __future__ import annotations

import math
from typing import Any

import pytest

tinker = pytest.importorskip("tinker")
torch = pytest.importorskip("torch")
types = tinker.types

TOKENS = [257, 68, 82, 79, 32, 108, 111, 115, 115]
BETA = 0.2


def rl_datum(q: list[float], adv: list[float]) -> Any:
    return types.Datum(
        model_input=types.ModelInput.from_ints(TOKENS[:-1]),
        loss_fn_inputs={"target_tokens": TOKENS[1:], "logprobs": q, "advantages": adv},
    )


def ce_datum() -> Any:
    n = len(TOKENS) - 1
    return types.Datum(
        model_input=types.ModelInput.from_ints(TOKENS[:-1]),
        loss_fn_inputs={"target_tokens": TOKENS[1:], "weights": [1.0] * n},
    )


def test_dro_loss_and_update_match_the_closed_form_and_the_client_side_path(
    localsession_tinker: Any,
) -> None:
    sc = tinker.ServiceClient()
    n = len(TOKENS) - 1
    q = [-5.5 + 0.25 * i for i in range(n)]
    adv = [1.0, -1.0, 0.5, 2.0, -0.5, 1.5, 0.0, 1.0][:n]
    server_side = sc.create_lora_training_client(
        base_model="localsession/tiny", rank=4, seed=9
    ).result()
    client_side = sc.create_lora_training_client(
        base_model="localsession/tiny", rank=4, seed=9
    ).result()
    lp = server_side.forward([ce_datum()], "cross_entropy").result().loss_fn_outputs[0]
    lp = lp["logprobs"].tolist()
    expected = -math.fsum(
        x * a - 0.5 * BETA * (x - s) ** 2 for x, s, a in zip(lp, q, adv, strict=True)
    )
    only = server_side.forward([rl_datum(q, adv)], "dro", {"beta": BETA}).result()
    assert only.metrics["loss:sum"] == pytest.approx(expected, rel=1e-5)
    out = server_side.forward_backward([rl_datum(q, adv)], "dro", {"beta": BETA}).result()
    assert out.metrics["loss:sum"] == pytest.approx(expected, rel=1e-5)
    assert out.loss_fn_outputs[0]["logprobs"].tolist() == pytest.approx(lp, abs=1e-6)

    def dro_in_torch(data: list[Any], logprobs: list[Any]) -> tuple[Any, dict[str, float]]:
        q_T, a_T = torch.tensor(q), torch.tensor(adv)
        x = logprobs[0]
        return -(x * a_T - 0.5 * BETA * (x - q_T) ** 2).sum(), {}

    custom = client_side.forward_backward_custom([ce_datum()], dro_in_torch).result()
    assert custom.metrics["loss:sum"] == pytest.approx(expected, rel=1e-5)
    adam = types.AdamParams(learning_rate=1e-2)
    server_side.optim_step(adam).result()  # the op after a dro keeps its order
    client_side.optim_step(adam).result()
    a = server_side.forward([ce_datum()], "cross_entropy").result().loss_fn_outputs[0]
    b = client_side.forward([ce_datum()], "cross_entropy").result().loss_fn_outputs[0]
    moved = max(abs(x - y) for x, y in zip(a["logprobs"].tolist(), lp, strict=True))
    assert moved > 1e-3  # the step changed the model
    assert a["logprobs"].tolist() == pytest.approx(b["logprobs"].tolist(), abs=1e-5)
    with pytest.raises(Exception, match="beta"):
        server_side.forward([rl_datum(q, adv)], "dro", {"beta": -1.0}).result()
    sc.close("success").result()
