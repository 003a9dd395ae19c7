"""Sampling saved packages of any rank and alpha (issue 16 item 3), through both
``create_sampling_client`` forms, over the wire (the unmodified SDK against a server) and
in-process (our clients).

``ServiceClient.create_sampling_client(model_package_arn=...)`` opens a rank-32, alpha-64
session and names the package on every request; ``TrainingClient.create_sampling_client``
names it on a session of its own rank. The reference is the saving session itself sampling
its package (an exact fit, no conversion).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from botocore.exceptions import ClientError

from localsession import ServiceClient as LocalServiceClient
from localsession.runtime.service import Service, ServiceConfig
from localsession.wiring import build_service

from .common import GROUP, ROLE, S3

MODEL = "localsession-tiny"
TEXT = [257, *b"the quick brown fox jumps over the lazy dog"]
SAVED = [(4, 8), (8, 64), (32, 8)]  # ranks 4, 8, 32; alphas 8 and 64


@pytest.fixture(scope="module")
def local_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    service = build_service(ServiceConfig(home=tmp_path_factory.mktemp("home"), max_sessions=8))
    yield service
    service.close()


def _packages(svc: Any, ts: Any) -> dict[tuple[int, int], tuple[str, str, list[float | None]]]:
    """Per (rank, alpha): a MODEL and a CHECKPOINT package of one trained step, and the
    saving session's own logprobs of TEXT under that adapter."""
    batch = [
        ts.Datum(
            model_input=ts.ModelInput.from_ints(TEXT[:-1]),
            loss_fn_inputs={"target_tokens": TEXT[1:], "weights": [1.0] * (len(TEXT) - 1)},
        )
    ]
    out = {}
    for rank, alpha in SAVED:
        with svc.create_lora_training_client(base_model=MODEL, rank=rank, alpha=alpha) as tc:
            for _ in range(2):
                tc.forward_backward(batch, "cross_entropy")
                tc.optim_step(ts.AdamParams(learning_rate=1e-2))
            model = tc.save_weights_for_sampler("m").result().model_package_arn
            checkpoint = tc.save_state("c").result().model_package_arn
            expected = tc.create_sampling_client(model).compute_logprobs(TEXT).result()
        out[(rank, alpha)] = (model, checkpoint, expected)
    return out


def _close(got: list[float | None], expected: list[float | None]) -> None:
    assert got[0] is None and expected[0] is None
    assert got[1:] == pytest.approx(expected[1:], abs=5e-5)


def _check_both_forms(svc: Any, ts: Any) -> None:
    packages = _packages(svc, ts)
    with svc.create_sampling_client(base_model=MODEL) as base_sampler:
        base = base_sampler.compute_logprobs(TEXT).result()
    params = ts.SamplingParams(max_tokens=512, temperature=1.0, seed=3, stop=["o"])
    with svc.create_lora_training_client(base_model=MODEL, rank=16, alpha=32) as other:
        for i, (model, checkpoint, expected) in enumerate(packages.values()):
            assert max(abs(a - b) for a, b in zip(expected[1:], base[1:], strict=True)) > 1e-3
            # the ServiceClient form (a rank-32, alpha-64 session each): every MODEL package,
            # and a CHECKPOINT once (each costs a session)
            for arn in (model, checkpoint) if i == 0 else (model,):
                with svc.create_sampling_client(model_package_arn=arn) as sampler:
                    _close(sampler.compute_logprobs(TEXT).result(), expected)
                    sampled = sampler.sample(TEXT[:6], num_samples=2, sampling_params=params)
                    assert len(sampled.result().sequences) == 2
            # the TrainingClient form: a rank-16 session names each package per request
            for arn in (model, checkpoint):
                _close(other.create_sampling_client(arn).compute_logprobs(TEXT).result(), expected)


def test_both_forms_over_the_wire(sdk: Any) -> None:
    import sagemaker.train.training_session as ts

    _check_both_forms(sdk, ts)


def test_both_forms_in_process(local_service: Service) -> None:
    import localsession as ls

    svc = LocalServiceClient(
        role_arn=ROLE, model_package_group_arn=GROUP, s3_output_path=S3, backend=local_service
    )
    _check_both_forms(svc, ls)
    # like the SDK, the implicit sampling session is rank 32, alpha 64 whatever the package's
    arn = next(iter(_packages(svc, ls).values()))[0]
    with svc.create_sampling_client(model_package_arn=arn) as sampler:
        detail = local_service.describe_training_session(
            {"TrainingSessionName": sampler.training_session_name}
        )["TrainingSessionDetail"]
        assert detail["LoraConfig"] == {"Rank": 32, "Alpha": 64}


def test_a_package_of_another_base_model_is_refused(local_service: Service) -> None:
    svc = LocalServiceClient(role_arn=ROLE, model_package_group_arn=GROUP, backend=local_service)
    with svc.create_lora_training_client("localsession/small", rank=4) as small:
        arn = small.save_weights_for_sampler().result().model_package_arn
    with svc.create_lora_training_client(MODEL, rank=4) as tc:
        with pytest.raises(ClientError, match="base model") as err:
            tc.create_sampling_client(arn).compute_logprobs(TEXT).result()
        assert "localsession/small" in str(err.value)
        assert err.value.response["Error"]["Code"] == "ValidationException"
