"""One engine, two dialects: the same datums through the unmodified ``tinker`` SDK and the
unmodified SageMaker SDK, against the same server, give bit-identical results.

Both sessions are ``localsession/tiny`` with rank 4, LoRA alpha 32 (the Tinker dialect's),
seed 0 and no adapter on the output head (``train_unembed=False``), so they start from the
same weights. Losses, per-token log-probabilities and gradient norms must be equal as
floats; after the same optimizer steps the weights must still agree (the next forward is
equal), and seeded samples from saved weights are equal.
"""

from __future__ import annotations

from typing import Any

import pytest

tinker = pytest.importorskip("tinker")
sm = pytest.importorskip("sagemaker.train.training_session")
types = tinker.types

ROLE = "arn:aws:iam::123456789012:role/R"
GROUP = "arn:aws:sagemaker:us-west-2:123456789012:model-package-group/g"
PROMPT = [1, 2, 3, 4]
COMPLETION = [7, 11, 13, 17, 19]


def _inputs(loss: str) -> dict[str, list[Any]]:
    full = PROMPT + COMPLETION
    n = len(full) - 1
    inputs: dict[str, list[Any]] = {
        "target_tokens": full[1:],
        "weights": [0.0] * 3 + [1.0] * (n - 3),
    }
    if loss == "ppo":
        inputs["logprobs"] = [0.0] * 3 + [-2.5, -3.0, -1.5, -4.0, -2.0]
        inputs["advantages"] = [0.0] * 3 + [0.75] * (n - 3)
    return inputs


def _tinker_datum(loss: str) -> Any:
    full = PROMPT + COMPLETION
    return types.Datum(
        model_input=types.ModelInput.from_ints(full[:-1]), loss_fn_inputs=_inputs(loss)
    )


def _sm_datum(loss: str) -> Any:
    full = PROMPT + COMPLETION
    inputs = {
        k: sm.TensorData(data=v, dtype="int64" if k == "target_tokens" else "float32")
        for k, v in _inputs(loss).items()
    }
    return sm.Datum(model_input=sm.ModelInput.from_ints(full[:-1]), loss_fn_inputs=inputs)


def test_tinker_and_sagemaker_surfaces_agree_bit_for_bit(
    localsession_tinker: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from localsession.server.endpoints import client_env

    for key, value in client_env(localsession_tinker.url, "us-west-2").items():
        monkeypatch.setenv(key, value)
    sagemaker = sm.ServiceClient(
        role_arn=ROLE, model_package_group_arn=GROUP, s3_output_path="s3://b/o"
    )
    smc = sagemaker.create_lora_training_client("localsession/tiny", rank=4, alpha=32)
    sc = tinker.ServiceClient()
    tc = sc.create_lora_training_client(  # SageMaker's LoRA never covers the output head
        base_model="localsession/tiny", rank=4, seed=0, train_unembed=False
    ).result()

    for loss in ("cross_entropy", "ppo", "cross_entropy"):
        a = tc.forward_backward([_tinker_datum(loss)], loss).result()
        b = smc.forward_backward([_sm_datum(loss)], loss).result()
        assert a.loss_fn_outputs[0]["logprobs"].tolist() == list(
            b.loss_fn_outputs[0]["logprobs"]["data"]
        )
        assert a.loss_fn_outputs[0]["elementwise_loss"].tolist() == list(
            b.loss_fn_outputs[0]["elementwise_loss"]["data"]
        )
        assert a.metrics["actor/grad_norm:mean"] == b.metrics["actor/grad_norm"]
        oa = tc.optim_step(types.AdamParams(learning_rate=1e-3, beta2=0.999, eps=1e-8)).result()
        ob = smc.optim_step(
            sm.AdamParams(learning_rate=1e-3, beta2=0.999, eps=1e-8, weight_decay=0.0)
        ).result()
        assert oa.metrics["grad_norm"] == ob.metrics["grad_norm"]

    # weights after three identical updates are identical: so is the next forward
    fa = tc.forward([_tinker_datum("cross_entropy")], "cross_entropy").result()
    fb = smc.forward([_sm_datum("cross_entropy")], "cross_entropy").result()
    assert fa.loss_fn_outputs[0]["logprobs"].tolist() == list(
        fb.loss_fn_outputs[0]["logprobs"]["data"]
    )

    ta = tc.save_weights_and_get_sampling_client()
    tb = smc.save_weights_and_get_sampling_client()
    sa = ta.sample(
        types.ModelInput.from_ints(PROMPT),
        num_samples=2,
        sampling_params=types.SamplingParams(max_tokens=512, seed=5),
    ).result()
    sb = tb.sample(
        sm.ModelInput.from_ints(PROMPT),
        num_samples=2,
        sampling_params=sm.SamplingParams(max_tokens=512, seed=5),
    ).result()
    assert [s.tokens for s in sa.sequences] == [list(s.tokens) for s in sb.sequences]
    assert [s.logprobs for s in sa.sequences] == [list(s.logprobs) for s in sb.sequences]
    sc.close("success").result()
