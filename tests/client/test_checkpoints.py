"""Checkpoints through the public API: resume, snapshot isolation, mismatch, listing, delete."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from localsession import (
    AdamParams,
    Datum,
    ModelInput,
    ModelPackageKind,
    OperationError,
    SamplingParams,
    ServiceClient,
    TensorData,
    TrainingClient,
)
from localsession.runtime.service import Service

MODEL = "localsession/tiny"
TOKENS = [257, 72, 101, 108, 108, 111, 32, 119, 111, 114, 108, 100]
BATCH = [
    Datum(
        model_input=ModelInput.from_ints(TOKENS),
        loss_fn_inputs={
            "target_tokens": TensorData(data=TOKENS[1:] + [258], dtype="int64"),
            "weights": TensorData(data=[1.0] * len(TOKENS)),
        },
    )
]
STEP = AdamParams(learning_rate=5e-3, weight_decay=0.1)


def train(tc: TrainingClient, steps: int) -> None:
    for _ in range(steps):
        tc.forward_backward(BATCH)
        tc.optim_step(STEP)
    tc.forward(BATCH).result(timeout=60)  # waits for every queued op


def adapter(service: Service, tc: TrainingClient) -> dict[str, torch.Tensor]:
    engine = service.session(tc.training_session_name).engine
    return engine.adapter_state_dict()  # type: ignore[union-attr, attr-defined, no-any-return]


def test_resume_with_optimizer_matches_the_uninterrupted_run(
    client: ServiceClient, service: Service
) -> None:
    with client.create_lora_training_client(MODEL, rank=8, alpha=16) as tc:
        train(tc, 3)
        arn = tc.save_state("after step 3").result(timeout=60).model_package_arn
        assert arn is not None
        train(tc, 3)
        uninterrupted = adapter(service, tc)
    with client.create_training_client_from_state_with_optimizer(arn, rank=8, alpha=16) as tc:
        train(tc, 3)
        resumed = adapter(service, tc)
    with client.create_training_client_from_state(arn, rank=8, alpha=16) as tc:
        train(tc, 3)
        weights_only = adapter(service, tc)
    assert uninterrupted.keys() == resumed.keys()
    for key, value in uninterrupted.items():
        torch.testing.assert_close(resumed[key], value, rtol=0, atol=1e-6)
    gap = max((weights_only[k] - v).abs().max().item() for k, v in uninterrupted.items())
    assert gap > 1e-4, "a fresh optimizer must take different steps than the restored one"


def test_sampler_sees_its_snapshot_forever(relaxed: ServiceClient) -> None:
    with relaxed.create_lora_training_client(MODEL, rank=8, alpha=16) as tc:
        train(tc, 5)
        sampler = tc.save_weights_and_get_sampling_client()
        assert sampler.model_package_arn
        greedy = SamplingParams(max_tokens=16, temperature=0.0)
        before = sampler.sample(TOKENS[:4], sampling_params=greedy).result(timeout=60)
        logprobs = sampler.compute_logprobs(TOKENS).result(timeout=60)
        train(tc, 5)
        after = sampler.sample(TOKENS[:4], sampling_params=greedy).result(timeout=60)
        assert after.sequences[0].tokens == before.sequences[0].tokens
        assert sampler.compute_logprobs(TOKENS).result(timeout=60) == logprobs
        # The live weights moved on: a new snapshot scores the text differently.
        newer = tc.save_weights_and_get_sampling_client()
        assert newer.compute_logprobs(TOKENS).result(timeout=60) != logprobs
        # A sampler without an ARN now reads the package loadWeightsForSampling chose.
        plain = tc.create_sampling_client()
        assert plain.compute_logprobs(TOKENS).result(timeout=60) == newer.compute_logprobs(
            TOKENS
        ).result(timeout=60)
        assert tc.get_latest_model_package(ModelPackageKind.MODEL) is not None


def test_mismatched_packages_fail_the_load_clearly(client: ServiceClient) -> None:
    with client.create_lora_training_client(MODEL, rank=4, alpha=8) as tc:
        arn = tc.save_state().result(timeout=60).model_package_arn
        assert arn is not None
    with client.create_lora_training_client(MODEL, rank=8, alpha=16) as tc:
        with pytest.raises(OperationError, match="rank-4 LoRA adapter.*rank 8"):
            tc.load_state(arn).result(timeout=60)
        assert tc.forward(BATCH).result(timeout=60).metrics["loss"] > 0  # still works
    with client.create_lora_training_client("localsession/small", rank=4, alpha=8) as tc:
        with pytest.raises(OperationError, match="base model 'localsession/tiny'"):
            tc.load_state(arn).result(timeout=60)


def test_listing_latest_and_delete(service: Service, tmp_path: Path) -> None:
    group = "arn:aws:sagemaker:us-west-2:000000000000:model-package-group/listing-test"
    client = ServiceClient(
        role_arn="arn:aws:iam::000000000000:role/x", backend=service, model_package_group_arn=group
    )
    with client.create_lora_training_client(MODEL, rank=4, alpha=8) as tc:
        state = tc.save_state("one").result(timeout=60).model_package_arn
        weights = tc.save_weights_for_sampler("two").result(timeout=60).model_package_arn
        merged = tc.save_weights_for_sampler("three", merge_weights=True).result(timeout=60)
        assert tc.get_latest_model_package(ModelPackageKind.CHECKPOINT).model_package_arn == state  # type: ignore[union-attr]
        listed = tc.list_model_packages()
    assert [p.model_package_arn for p in listed] == [merged.model_package_arn, weights, state]
    assert [p.version for p in listed] == [3, 2, 1] and listed[2].description == "one"
    assert [p.model_package_arn for p in client.list_model_packages(max_results=2)] == [
        merged.model_package_arn,
        weights,
    ]
    only = client.list_model_packages(kind=ModelPackageKind.CHECKPOINT)
    assert [p.model_package_arn for p in only] == [state]
    latest = client.get_latest_model_package(ModelPackageKind.MODEL)
    assert latest is not None and latest.model_package_arn == merged.model_package_arn
    merged_dir = service.registry.path(merged.model_package_arn) / "merged"  # type: ignore[arg-type]
    assert (merged_dir / "config.json").is_file()

    kept = client.delete_model_package(weights)  # type: ignore[arg-type]
    assert kept.model_package_deleted and kept.artifacts_retained
    assert kept.s3_uri and kept.s3_uri.startswith("s3://") and kept.s3_uri.endswith("/")
    retained = list((service.config.home / "retained").iterdir())  # the files stay on disk
    assert any((d / "adapter_model.safetensors").is_file() for d in retained)
    gone = client.delete_model_package(state, delete_artifacts=True)  # type: ignore[arg-type]
    assert gone.model_package_deleted and not gone.artifacts_retained and gone.objects_deleted >= 4
    again = client.delete_model_package(state)  # type: ignore[arg-type]
    assert not again.model_package_deleted
    assert again.retained_reason == "the model package does not exist"
    assert [p.model_package_arn for p in client.list_model_packages()] == [merged.model_package_arn]

    # A new process on the same home finds the package (and can delete it) from the CLI.
    env = {**os.environ, "LOCALSESSION_HOME": str(service.config.home)}
    cli = [sys.executable, "-m", "localsession", "packages"]
    out = subprocess.run(
        [*cli, "list", "--group", "listing-test"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    ).stdout
    assert merged.model_package_arn in out and weights not in out  # type: ignore[operator]
    subprocess.run(
        [*cli, "delete", merged.model_package_arn, "--delete-artifacts"],  # type: ignore[list-item]
        env=env,
        check=True,
        capture_output=True,
        timeout=600,
    )
    assert client.list_model_packages() == []
