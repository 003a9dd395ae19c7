"""``train_unembed`` through the unmodified SDK: the output head gets its own LoRA.

Two models with the same seed, one with ``train_unembed=True`` (the SDK's default) and one
with ``False``: every other module's adapter starts identical, so they agree until the
first ``optim_step`` moves the head's adapter, and differ after it. A checkpoint of the
head-adapted model reports ``train_unembed``, and samples and resumes with the head
(a hidden sampler session whose adapter covers the head, a new model built with it).
"""

from __future__ import annotations

from typing import Any

import pytest

tinker = pytest.importorskip("tinker")
types = tinker.types

MODEL = "localsession/tiny"
TOKENS = [1, 5, 9, 13, 17, 21, 25, 29, 33]


def _datum() -> Any:
    return types.Datum(
        model_input=types.ModelInput.from_ints(TOKENS[:-1]),
        loss_fn_inputs={"target_tokens": TOKENS[1:], "weights": [1.0] * (len(TOKENS) - 1)},
    )


def _logprobs(tc: Any) -> list[float]:
    out = tc.forward([_datum()], "cross_entropy").result()
    return list(out.loss_fn_outputs[0]["logprobs"].tolist())


def _step(tc: Any) -> None:
    tc.forward_backward([_datum()], "cross_entropy").result()
    tc.optim_step(types.AdamParams(learning_rate=1e-2)).result()


def test_the_head_adapter_trains_samples_and_resumes(localsession_tinker: Any) -> None:
    sc = tinker.ServiceClient()
    head = sc.create_lora_training_client(base_model=MODEL, rank=4, seed=9).result()
    plain = sc.create_lora_training_client(
        base_model=MODEL, rank=4, seed=9, train_unembed=False
    ).result()
    # every B starts at zero; the adapted head takes the unfused path (logits, then
    # log_softmax) and the plain one the fused head, so they agree to rounding only
    assert _logprobs(head) == pytest.approx(_logprobs(plain), rel=1e-6, abs=1e-6)
    _step(head)
    _step(plain)
    trained = _logprobs(head)
    assert trained != _logprobs(plain)  # the head's adapter moved too

    sampler_path = head.save_weights_for_sampler("unembed-sampler").result().path
    state_path = head.save_state("unembed-state").result().path
    rest = sc.create_rest_client()
    assert rest.get_weights_info_by_tinker_path(sampler_path).result().train_unembed is True
    plain_path = plain.save_weights_for_sampler("plain-sampler").result().path
    assert rest.get_weights_info_by_tinker_path(plain_path).result().train_unembed is False
    sc.close("success").result()  # the models' sessions stop: a hidden sampler must serve

    again = tinker.ServiceClient()
    sampler = again.create_sampling_client(model_path=sampler_path).result()
    scored = sampler.compute_logprobs(types.ModelInput.from_ints(TOKENS)).result()
    assert scored[1:] == pytest.approx(trained, abs=1e-4)
    resumed = again.create_training_client_from_state(state_path).result()
    assert _logprobs(resumed) == trained
    again.close("success").result()
