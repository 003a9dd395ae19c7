"""The SDK's errors inside the mock equal those it raises against ``localsession serve``, for
a catalogue of bad calls: service limits, unknown models, out-of-range hyperparameters, and
operations after stop."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from mock_blog import GROUP, ROLE, S3

import localsession

MODEL = "localsession-tiny"


def _catalogue() -> list[tuple[str, str, str]]:
    """Each bad call, as (label, exception type, message with this run's home masked)."""
    import os

    from sagemaker.train.training_session import (
        AdamParams,
        Datum,
        ModelInput,
        SamplingParams,
        ServiceClient,
    )

    svc = ServiceClient(role_arn=ROLE, model_package_group_arn=GROUP, s3_output_path=S3)
    batch = [
        Datum(
            model_input=ModelInput.from_ints([257, 104, 105]),
            loss_fn_inputs={"target_tokens": [104, 105, 258], "weights": [1.0, 1.0, 1.0]},
        )
    ]
    prompt = ModelInput.from_ints([257, 104])
    seen: list[tuple[str, str, str]] = []

    def attempt(label: str, call: Callable[[], Any]) -> None:
        try:
            call()
        except Exception as exc:  # noqa: BLE001 - the type is what is compared
            text = str(exc)
            text = re.sub(r"/\S*/serve-home", "<HOME>", text)
            if os.environ.get("LOCALSESSION_HOME"):
                text = text.replace(os.environ["LOCALSESSION_HOME"], "<HOME>")
            text = re.sub(
                r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", "<ID>", text
            )
            seen.append((label, type(exc).__name__, text))
        else:
            seen.append((label, "no error", ""))

    attempt("unknown model id", lambda: svc.create_lora_training_client("nope/nothing", rank=8))
    attempt("unknown Hub name", lambda: svc.create_lora_training_client("nothing-here", rank=8))
    attempt(
        "rank over the limit",
        lambda: svc.create_lora_training_client(MODEL, rank=4096, training_session_name="big"),
    )
    tc = svc.create_lora_training_client(MODEL, rank=8, training_session_name="errors-1")
    sampler = tc.save_weights_and_get_sampling_client()
    attempt(
        "too many samples",
        lambda: sampler.sample(
            prompt=prompt, num_samples=100_000, sampling_params=SamplingParams(max_tokens=512)
        ).result(),
    )
    attempt(
        "max_tokens over the limit",
        lambda: sampler.sample(
            prompt=prompt, num_samples=1, sampling_params=SamplingParams(max_tokens=10**9)
        ).result(),
    )
    attempt("unknown loss", lambda: tc.forward_backward(batch, "no_such_loss").result())
    tc.forward_backward(batch, "cross_entropy").result()
    attempt("lr too large", lambda: tc.optim_step(AdamParams(learning_rate=50.0)).result())
    attempt("lr negative", lambda: tc.optim_step(AdamParams(learning_rate=-1e-3)).result())
    attempt("beta out of range", lambda: tc.optim_step(AdamParams(beta1=1.5)).result())
    tc.stop()
    attempt(
        "forward_backward after stop", lambda: tc.forward_backward(batch, "cross_entropy").result()
    )
    attempt("optim_step after stop", lambda: tc.optim_step(AdamParams()).result())
    attempt(
        "sample after stop",
        lambda: sampler.sample(
            prompt=prompt, num_samples=1, sampling_params=SamplingParams(max_tokens=512)
        ).result(),
    )
    attempt("save after stop", lambda: tc.save_state().result())
    # Stopped by the service (another client), so the refusals come over the wire.
    import boto3

    other = svc.create_lora_training_client(MODEL, rank=8, training_session_name="errors-2")
    other_sampler = other.save_weights_and_get_sampling_client()
    boto3.client("sagemaker").stop_training_session(TrainingSessionName="errors-2")
    attempt(
        "forward_backward on a stopped session",
        lambda: other.forward_backward(batch, "cross_entropy").result(),
    )
    attempt(
        "sample on a stopped session",
        lambda: other_sampler.sample(
            prompt=prompt, num_samples=1, sampling_params=SamplingParams(max_tokens=512)
        ).result(),
    )
    other.stop()  # already stopped by the service: the SDK absorbs it
    attempt(
        "describe an unknown session",
        lambda: boto3.client("sagemaker").describe_training_session(TrainingSessionName="nope"),
    )
    return seen


def test_errors_in_the_mock_equal_errors_over_http(serve_env: Any) -> None:
    with localsession.mock():
        in_mock = _catalogue()
    over_http = serve_env(_catalogue, {})
    assert [row[0] for row in in_mock] == [row[0] for row in over_http]
    for mine, theirs in zip(in_mock, over_http, strict=True):
        assert mine == theirs
    # A catalogue of bad calls: every one of them fails.
    assert all(kind != "no error" for _, kind, _ in in_mock), in_mock
