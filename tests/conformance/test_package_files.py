"""conformance/artifacts.py: a saved package's files read back from the registry's S3 view
hold the session's adapter as it was saved; a DescribeModelPackage answer without an
``S3Uri`` is named in the failure."""

from __future__ import annotations

import numpy as np
import pytest

from conformance.artifacts import runtime_package_files, s3_uri


def test_a_saved_adapter_reads_back_with_the_requested_rank() -> None:
    from safetensors.numpy import load

    from fakes import FakeService, FakeServiceClient

    service = FakeService(strict=False, numerics=True)
    try:
        client = FakeServiceClient(
            service=service,
            model_package_group_arn="arn:aws:sagemaker:us-west-2:123456789012:"
            "model-package-group/artifacts",
        )
        tc = client.create_lora_training_client("localsession/tiny", rank=3, alpha=6)
        arn = tc.save_weights_for_sampler("artifacts").result(timeout=60).model_package_arn
        files = runtime_package_files(service)(arn)
        tensors = load(files["fake_adapter.safetensors"])
        # the fake model's LoRA pair: A [V, r] seeded, B [r, V] zeros (fakes/model.py)
        assert tensors["lora_A.weight"].shape == (259, 3)
        assert tensors["lora_B.weight"].shape == (3, 259)
        assert np.all(tensors["lora_B.weight"] == 0) and np.any(tensors["lora_A.weight"] != 0)
        tc.stop()
    finally:
        service.close()


def test_an_answer_without_s3_uri_is_named() -> None:
    with pytest.raises(AssertionError, match="ModelDataSource.S3DataSource.S3Uri"):
        s3_uri({"ModelPackageArn": "arn:x", "InferenceSpecification": {"Containers": []}})
