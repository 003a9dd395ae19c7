"""Top-K distillation: ``cross_entropy`` with ``(N, K)`` targets and weights through the
unmodified ``tinker`` SDK, against an independent torch computation on the built-in model's
own weights (a fresh LoRA adapter has B = 0, so the model is the base model)."""

from __future__ import annotations

from typing import Any

import pytest

tinker = pytest.importorskip("tinker")
torch = pytest.importorskip("torch")
types = tinker.types

MODEL = "localsession/tiny"
TOKENS = [257, 72, 101, 108, 108, 111, 32, 119, 111, 114, 108, 100]
K = 3


def reference_logprobs(tokens: list[int], targets_NK: Any) -> Any:
    """log p(targets[t, k] | tokens[: t + 1]) from the base model's logits (float64)."""
    from localsession.engine.builtin import build_builtin

    model, _ = build_builtin(MODEL)
    model.eval()
    with torch.no_grad():
        logits_NV = model(torch.tensor([tokens])).logits[0].double()
    return torch.log_softmax(logits_NV, dim=-1).gather(1, targets_NK)


def topk_datum(targets_NK: Any, weights_NK: Any) -> Any:
    return types.Datum(
        model_input=types.ModelInput.from_ints(TOKENS),
        loss_fn_inputs={"target_tokens": targets_NK, "weights": weights_NK},
    )


@pytest.fixture
def sc(localsession_tinker: Any) -> Any:
    client = tinker.ServiceClient()
    yield client
    client.close("success").result()


def test_topk_cross_entropy_equals_an_independent_torch_computation(sc: Any) -> None:
    n = len(TOKENS)
    gen = torch.Generator().manual_seed(0)
    # candidates: the true next token first, then two others; weights: a soft target
    nxt = TOKENS[1:] + [258]
    targets_NK = torch.stack(
        [torch.tensor(nxt), torch.randint(0, 259, (n,), generator=gen), torch.full((n,), 97)],
        dim=1,
    )
    weights_NK = torch.softmax(torch.randn(n, K, generator=gen), dim=1)
    weights_NK[0] = 0.0  # a position with no weight at all
    ref_NK = reference_logprobs(TOKENS, targets_NK)
    expected = float(-(weights_NK.double() * ref_NK).sum())

    tc = sc.create_lora_training_client(base_model=MODEL, rank=4, seed=0).result()
    # torch tensors: the SDK sends 2-D target_tokens and weights as sparse CSR
    out = tc.forward([topk_datum(targets_NK, weights_NK)], "cross_entropy").result()
    logprobs = out.loss_fn_outputs[0]["logprobs"].to_torch()
    assert tuple(logprobs.shape) == (n, K)
    assert torch.allclose(logprobs.double(), ref_NK, atol=1e-4), (logprobs, ref_NK)
    assert out.metrics["loss:sum"] == pytest.approx(expected, rel=1e-4)

    # lists: sent dense, same answer; and the same through forward_backward
    dense = topk_datum(targets_NK.tolist(), weights_NK.tolist())
    fb = tc.forward_backward([dense, dense], "cross_entropy").result()
    assert fb.metrics["loss:sum"] == pytest.approx(2 * expected, rel=1e-4)
    assert len(fb.loss_fn_outputs) == 2

    # the SDK's client-side custom loss passes the (N, K) logprobs and weights back
    def soft_ce(data: list[Any], logprobs: list[Any]) -> tuple[Any, dict[str, float]]:
        total = sum(
            -(lp * d.loss_fn_inputs["weights"].to_torch()).sum()
            for d, lp in zip(data, logprobs, strict=True)
        )
        return total, {}

    custom = tc.forward_backward_custom([dense], soft_ce).result()
    assert custom.metrics["loss:sum"] == pytest.approx(expected, rel=1e-4)

    tc.optim_step(types.AdamParams(learning_rate=1e-2)).result()
    after = tc.forward([dense], "cross_entropy").result().metrics["loss:sum"]
    assert after < expected  # three gradients of the soft target, then one step, lower it


def test_topk_targets_are_refused_for_other_losses_and_mixed_shapes(sc: Any) -> None:
    n = len(TOKENS)
    tc = sc.create_lora_training_client(base_model=MODEL, rank=4).result()
    wide = topk_datum([[1, 2, 3]] * n, [[1.0, 0.0, 0.0]] * n)
    flat = types.Datum(
        model_input=types.ModelInput.from_ints(TOKENS),
        loss_fn_inputs={"target_tokens": [1] * n, "weights": [1.0] * n},
    )
    with pytest.raises(Exception, match=r"mix shapes"):
        tc.forward([wide, flat], "cross_entropy").result()
    rl = types.Datum(
        model_input=types.ModelInput.from_ints(TOKENS),
        loss_fn_inputs={
            "target_tokens": [[1, 2]] * n,
            "logprobs": [0.0] * n,
            "advantages": [1.0] * n,
        },
    )
    with pytest.raises(Exception, match=r"top-K form, loss_fn 'ppo'"):
        tc.forward([rl], "ppo").result()
