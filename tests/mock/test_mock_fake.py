"""``localsession.mock(engine="fake")``: the fakes' instant engine behind the unmodified SDK,
with the script, fault injection and call log reachable from the mock object."""

from __future__ import annotations

from typing import Any

import pytest
from mock_blog import GROUP, ROLE, S3

import localsession

QUESTION = "What is 2 + 3?"


def _sdk() -> Any:
    import sagemaker.train.training_session as ts

    return ts, ts.ServiceClient(role_arn=ROLE, model_package_group_arn=GROUP, s3_output_path=S3)


def test_scripted_samples_fault_and_call_log(socket_guard: None) -> None:
    with localsession.mock(engine="fake") as m:
        m.script.on_prompt(QUESTION, "5", "five")
        ts, svc = _sdk()
        tc = svc.create_lora_training_client("localsession-tiny", rank=8)
        tok = tc.get_tokenizer()
        prompt = tok.encode(QUESTION)
        sampler = tc.save_weights_and_get_sampling_client()
        result = sampler.sample(
            prompt=ts.ModelInput.from_ints(prompt),
            num_samples=3,
            sampling_params=ts.SamplingParams(max_tokens=512, seed=1),
        ).result()
        texts = [tok.decode(s.tokens, skip_special_tokens=True) for s in result.sequences]
        assert texts == ["5", "five", "5"]
        # The scripted tokens are the bytes of the text, then <eos>.
        assert list(result.sequences[0].tokens) == [ord("5"), 258]

        datum = ts.Datum(
            model_input=ts.ModelInput.from_ints(prompt),
            loss_fn_inputs={"target_tokens": prompt[1:] + [258], "weights": [1.0] * len(prompt)},
        )
        m.fail_next("forwardBackward", message="injected through the mock")
        failed = tc.forward_backward([datum], "cross_entropy")
        with pytest.raises(Exception, match="injected through the mock"):
            failed.result()
        fb = tc.forward_backward([datum], "cross_entropy")
        step = tc.optim_step(ts.AdamParams(learning_rate=1e-2))
        loss = fb.result().metrics["loss"]
        step.result()
        again = tc.forward([datum], "cross_entropy").result().metrics["loss"]
        assert again < loss  # a real gradient step on the fake model
        tc.stop()

        methods = m.calls.methods()
        assert methods == [
            "save_weights_for_sampler",
            "load_weights_for_sampling",  # the SDK's save_weights_and_get_sampling_client
            "sample",
            "forward_backward",
            "forward_backward",
            "optim_step",
            "forward",
        ], methods
        fbs = m.calls.of("forward_backward")
        assert [c.status for c in fbs] == ["Failed", "Completed"]
        assert "injected through the mock" in (fbs[0].error or "")
        assert m.calls.of("sample")[0].args["num_samples"] == 3


def test_fake_controls_need_the_fake_engine() -> None:
    m = localsession.mock()
    with pytest.raises(RuntimeError, match="not active"):
        _ = m.service
    with m, pytest.raises(RuntimeError, match="engine='fake'"):
        _ = m.script


def test_throttled_submit_is_retried_by_the_sdk(socket_guard: None) -> None:
    with localsession.mock(engine="fake") as m:
        ts, svc = _sdk()
        with svc.create_lora_training_client("localsession-tiny", rank=4) as tc:
            m.throttle_next(1)
            tc.optim_step(ts.AdamParams(learning_rate=1e-3)).result()
        assert m.calls.methods() == ["optim_step"]
        assert m.calls[0].attempts == 2 and m.calls[0].status == "Completed"
