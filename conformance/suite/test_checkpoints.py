"""Checkpoints and model packages: save/load round trips, resume with and without the
optimizer, snapshot isolation, listing and deletion (docs/wire.md#3, docs/semantics.md#5)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from conformance.adapter import Backend
from conformance.suite._kit import TEXT_A, TEXT_B, logprobs, result, sft, train_steps

ARN = re.compile(r"^arn:aws[a-z-]*:sagemaker:[a-z0-9-]+:\d{12}:model-package/[^/]+/\d+$")


def _lp(tc: Any, ts: Any, backend: Backend) -> list[float]:
    return logprobs(result(tc.forward([sft(ts, TEXT_B)], "cross_entropy"), backend))[0]


def test_saves_return_model_package_arns(backend: Backend, ts: Any, training_client: Any) -> None:
    state = result(training_client.save_state("conformance state"), backend)
    weights = result(training_client.save_weights_for_sampler("conformance weights"), backend)
    assert isinstance(state, ts.SaveStateResponse) and isinstance(weights, ts.SaveWeightsResponse)
    for arn in (state.model_package_arn, weights.model_package_arn):
        assert ARN.match(arn), arn
    assert state.model_package_arn != weights.model_package_arn  # every save a new version


def test_load_state_round_trip(backend: Backend, ts: Any, training_client: Any) -> None:
    train_steps(training_client, ts, backend, 1)
    arn = result(training_client.save_state(), backend).model_package_arn
    saved = _lp(training_client, ts, backend)
    train_steps(training_client, ts, backend, 2)
    moved = _lp(training_client, ts, backend)
    result(training_client.load_state(arn), backend)
    restored = _lp(training_client, ts, backend)
    assert max(abs(a - b) for a, b in zip(saved, moved, strict=True)) > 1e-4
    assert restored == pytest.approx(saved, abs=1e-5)


@pytest.mark.requires("checkpoint.exact")
def test_load_state_is_bit_exact(backend: Backend, ts: Any, training_client: Any) -> None:
    train_steps(training_client, ts, backend, 1)
    arn = result(training_client.save_state(), backend).model_package_arn
    saved = _lp(training_client, ts, backend)
    train_steps(training_client, ts, backend, 1)
    result(training_client.load_state(arn), backend)
    assert _lp(training_client, ts, backend) == saved


def _resume_step(tc: Any, ts: Any, backend: Backend) -> list[float]:
    train_steps(tc, ts, backend, 1)
    return _lp(tc, ts, backend)


def test_resume_with_optimizer_continues_identically(
    backend: Backend, ts: Any, service_client: Any, new_training_client: Any
) -> None:
    """Two steps, save_state, a third step: a new session from the state with the optimizer
    takes the same third step."""
    tc = new_training_client()
    train_steps(tc, ts, backend, 2)
    arn = result(tc.save_state(), backend).model_package_arn
    expected = _resume_step(tc, ts, backend)
    resumed = service_client.create_training_client_from_state_with_optimizer(
        arn, rank=backend.limits.rank, alpha=2 * backend.limits.rank
    )
    try:
        assert _resume_step(resumed, ts, backend) == pytest.approx(expected, abs=1e-5)
    finally:
        resumed.stop()


def test_resume_without_optimizer_starts_a_fresh_optimizer(
    backend: Backend, ts: Any, service_client: Any, new_training_client: Any
) -> None:
    """Weights-only resume equals load_state into a session whose optimizer never stepped,
    and differs from resuming with the optimizer's moments."""
    tc = new_training_client()
    train_steps(tc, ts, backend, 3)
    arn = result(tc.save_state(), backend).model_package_arn
    with_moments = _resume_step(tc, ts, backend)
    kw = {"rank": backend.limits.rank, "alpha": 2 * backend.limits.rank}
    weights_only = service_client.create_training_client_from_state(arn, **kw)
    try:
        got = _resume_step(weights_only, ts, backend)
    finally:
        weights_only.stop()
    fresh = new_training_client()
    result(fresh.load_state(arn), backend)
    assert got == pytest.approx(_resume_step(fresh, ts, backend), abs=1e-5)
    assert max(abs(a - b) for a, b in zip(got, with_moments, strict=True)) > 1e-6


@pytest.mark.requires("sampling.snapshot_weights")
def test_sampler_is_isolated_from_later_training(
    backend: Backend, ts: Any, training_client: Any
) -> None:
    train_steps(training_client, ts, backend, 1)
    sampler = training_client.save_weights_and_get_sampling_client()
    before = result(sampler.compute_logprobs(list(TEXT_A)), backend)
    train_steps(training_client, ts, backend, 2)
    after = result(sampler.compute_logprobs(list(TEXT_A)), backend)
    assert after == before
    newer = training_client.save_weights_and_get_sampling_client()
    moved = result(newer.compute_logprobs(list(TEXT_A)), backend)
    assert max(abs(a - b) for a, b in zip(moved[1:], before[1:], strict=True)) > 1e-4


@pytest.mark.requires("sampling.snapshot_weights")
def test_sampler_of_saved_weights_matches_the_trainer(
    backend: Backend, ts: Any, training_client: Any
) -> None:
    train_steps(training_client, ts, backend, 2)
    sampler = training_client.save_weights_and_get_sampling_client()
    scored = result(sampler.compute_logprobs(list(TEXT_A)), backend)
    lp = logprobs(result(training_client.forward([sft(ts, TEXT_A)], "cross_entropy"), backend))
    assert lp[0][:-1] == pytest.approx(scored[1:], abs=backend.limits.logprob_atol)


@pytest.mark.requires("sampling.loaded_weights_default")
def test_sampler_without_arn_uses_the_loaded_weights(
    backend: Backend, ts: Any, training_client: Any
) -> None:
    base = training_client.create_sampling_client()
    before = result(base.compute_logprobs(list(TEXT_A)), backend)
    train_steps(training_client, ts, backend, 2)
    loaded = training_client.save_weights_and_get_sampling_client()  # loadWeightsForSampling
    after_load = result(base.compute_logprobs(list(TEXT_A)), backend)
    via_arn = result(loaded.compute_logprobs(list(TEXT_A)), backend)
    assert after_load == via_arn
    assert max(abs(a - b) for a, b in zip(after_load[1:], before[1:], strict=True)) > 1e-4


def test_model_packages_listed_newest_first(
    backend: Backend, ts: Any, service_client: Any, training_client: Any
) -> None:
    weights = result(training_client.save_weights_for_sampler(), backend).model_package_arn
    state = result(training_client.save_state(), backend).model_package_arn
    listed = [p.model_package_arn for p in training_client.list_model_packages(max_results=50)]
    assert listed.index(state) < listed.index(weights)
    checkpoints = service_client.list_model_packages(
        kind=ts.ModelPackageKind.CHECKPOINT, max_results=50
    )
    kinds = {p.model_package_arn: p.kind for p in checkpoints}
    assert kinds.get(state) == ts.ModelPackageKind.CHECKPOINT and weights not in kinds
    latest = service_client.get_latest_model_package(ts.ModelPackageKind.MODEL)
    assert latest is not None and latest.model_package_arn == weights
    cached = training_client.get_latest_model_package(ts.ModelPackageKind.CHECKPOINT)
    assert cached.model_package_arn == state


def test_delete_model_package_is_idempotent(
    backend: Backend, ts: Any, service_client: Any, training_client: Any
) -> None:
    arn = result(training_client.save_weights_for_sampler(), backend).model_package_arn
    deleted = service_client.delete_model_package(arn)
    assert isinstance(deleted, ts.ModelPackageDeletion) and deleted.model_package_deleted is True
    listed = [p.model_package_arn for p in service_client.list_model_packages(max_results=100)]
    assert arn not in listed
    again = service_client.delete_model_package(arn)
    assert again.model_package_deleted is False


def test_merged_weights_save(backend: Backend, ts: Any, training_client: Any) -> None:
    train_steps(training_client, ts, backend, 1)
    out = result(training_client.save_weights_for_sampler(merge_weights=True), backend)
    assert ARN.match(out.model_package_arn)


@pytest.mark.requires("checkpoint.rank_check")
def test_loading_another_rank_fails_the_load(
    backend: Backend, ts: Any, service_client: Any, training_client: Any
) -> None:
    arn = result(training_client.save_state(), backend).model_package_arn
    other = 2 * backend.limits.rank
    running = len(service_client.list_sessions(status_equals="Running"))
    with pytest.raises(ts.OperationError):
        service_client.create_training_client_from_state(arn, rank=other, alpha=2 * other)
    # the failed create stopped the session it made (docs/wire.md#2)
    assert len(service_client.list_sessions(status_equals="Running")) == running
