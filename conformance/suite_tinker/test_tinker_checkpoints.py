"""Checkpoints: ``save_state`` and the two ``create_training_client_from_state*`` resumes (with
and without the optimizer), ``load_state``, sampler weights, and the REST surface that lists,
describes and deletes them (``ServiceClient.create_rest_client``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from conformance.adapter import Backend
from conformance.backends import tinker_compat as compat
from conformance.suite_tinker._kit import (
    close,
    loss_of,
    needs_sdk,
    step,
    user_error,
    wait,
)


def _rest(tinker_client: Any) -> Any:
    return compat.rest_client(tinker_client)


def test_save_state_path_names_the_run_and_the_checkpoint(
    backend: Backend, new_trainer: Callable[..., Any]
) -> None:
    """training_client.py ``load_state``: "Tinker path to saved weights (e.g.,
    "tinker://run-id/weights/checkpoint-001")": ``save_state(name)`` answers that path."""
    tc = new_trainer(seed=30)
    path = wait(tc.save_state("conformance-path"), backend).path
    assert path == f"tinker://{tc.model_id}/weights/conformance-path"


def test_sampler_weights_path_is_a_tinker_path_of_the_run(
    backend: Backend, new_trainer: Callable[..., Any]
) -> None:
    """training_client.py ``save_weights_for_sampler``: "APIFuture containing the save
    response with sampler path", a ``tinker://`` path of this run, not the state path."""
    tc = new_trainer(seed=31)
    sampler_path = wait(tc.save_weights_for_sampler("conformance-sp"), backend).path
    state_path = wait(tc.save_state("conformance-sp"), backend).path
    assert sampler_path.startswith(f"tinker://{tc.model_id}/") and sampler_path != state_path


def test_resume_with_optimizer_continues_bit_for_bit(
    backend: Backend, tinker_client: Any, new_trainer: Callable[..., Any], tokens: list[int]
) -> None:
    """service_client.py ``create_training_client_from_state_with_optimizer``: weights and
    optimizer state come back, so the next step after resuming equals the next step of the
    original trainer (the step depends on Adam's moments)."""
    tc = new_trainer(seed=5)
    step(backend, tc, tokens)
    path = wait(tc.save_state("conformance-resume"), backend).path
    saved = loss_of(backend, tc, tokens)
    next_step = step(backend, tc, tokens)
    stepped = loss_of(backend, tc, tokens)
    exact = backend.has("checkpoint.exact")
    resumed = wait(tinker_client.create_training_client_from_state_with_optimizer(path), backend)
    assert close(loss_of(backend, resumed, tokens), saved, exact)
    assert close(step(backend, resumed, tokens), next_step, exact)
    assert close(loss_of(backend, resumed, tokens), stepped, exact)


def test_resume_without_optimizer_restores_weights_and_resets_moments(
    backend: Backend, tinker_client: Any, new_trainer: Callable[..., Any], tokens: list[int]
) -> None:
    """training_client.py ``load_state``: "This loads only the model weights, not optimizer
    state (e.g., Adam momentum)": ``create_training_client_from_state`` scores like the saved
    weights, and its next step (fresh moments) differs from the with-optimizer resume's."""
    tc = new_trainer(seed=32)
    for _ in range(2):
        step(backend, tc, tokens)
    path = wait(tc.save_state("conformance-weights"), backend).path
    saved = loss_of(backend, tc, tokens)
    exact = backend.has("checkpoint.exact")
    weights_only = wait(tinker_client.create_training_client_from_state(path), backend)
    with_optimizer = wait(
        tinker_client.create_training_client_from_state_with_optimizer(path), backend
    )
    assert close(loss_of(backend, weights_only, tokens), saved, exact)
    step(backend, weights_only, tokens)
    step(backend, with_optimizer, tokens)
    fresh, restored = (
        loss_of(backend, weights_only, tokens),
        loss_of(backend, with_optimizer, tokens),
    )
    assert fresh != pytest.approx(restored, rel=1e-5), "the weights-only resume kept moments"


def test_resumed_trainer_keeps_the_rank(
    backend: Backend, tinker_client: Any, new_trainer: Callable[..., Any]
) -> None:
    """get_info_response.py ``lora_rank``; service_client.py
    ``create_training_client_from_state``: the resumed model is the saved adapter, so its
    ``get_info().lora_rank`` is the rank it was created with."""
    tc = new_trainer(seed=33)
    path = wait(tc.save_state("conformance-rank"), backend).path
    resumed = wait(tinker_client.create_training_client_from_state(path), backend)
    assert resumed.get_info().lora_rank == backend.limits.rank


def test_load_state_rewinds_a_trainer(
    backend: Backend, new_trainer: Callable[..., Any], tokens: list[int]
) -> None:
    """training_client.py ``load_state``: "Load model weights from a saved checkpoint" into
    this trainer: after more steps, loading the checkpoint brings its loss back."""
    needs_sdk(backend, "training:load_state")
    tc = new_trainer(seed=34)
    path = wait(tc.save_state("conformance-rewind"), backend).path
    saved = loss_of(backend, tc, tokens)
    for _ in range(2):
        step(backend, tc, tokens)
    assert loss_of(backend, tc, tokens) < saved
    wait(tc.load_state(path), backend)
    assert close(loss_of(backend, tc, tokens), saved, backend.has("checkpoint.exact"))


def test_list_checkpoints_shows_both_kinds(
    backend: Backend, tinker_client: Any, new_trainer: Callable[..., Any]
) -> None:
    """rest_client.py ``list_checkpoints(training_run_id)``; checkpoint.py
    ``checkpoint_type`` "training" or "sampler" and ``tinker_path``: a run's saved state and
    sampler weights are listed under their paths."""
    tc = new_trainer(seed=35)
    state = wait(tc.save_state("conformance-list"), backend).path
    sampler = wait(tc.save_weights_for_sampler("conformance-list"), backend).path
    listed = wait(_rest(tinker_client).list_checkpoints(tc.model_id), backend).checkpoints
    kinds = {c.tinker_path: c.checkpoint_type for c in listed}
    assert kinds.get(state) == "training" and kinds.get(sampler) == "sampler", kinds


def test_user_metadata_is_kept(
    backend: Backend, tinker_client: Any, new_trainer: Callable[..., Any]
) -> None:
    """training_client.py ``save_state(user_metadata=...)``: "Optional user-provided metadata
    to attach to the checkpoint"; checkpoint.py lists it back."""
    needs_sdk(backend, "param:TrainingClient.save_state.user_metadata")
    tc = new_trainer(seed=36)
    metadata = {"step": "7", "purpose": "conformance"}
    path = wait(tc.save_state("conformance-meta", user_metadata=metadata), backend).path
    listed = wait(_rest(tinker_client).list_checkpoints(tc.model_id), backend).checkpoints
    mine = [c for c in listed if c.tinker_path == path]
    assert len(mine) == 1 and mine[0].user_metadata == metadata, mine


def test_a_ttl_sets_an_expiry(
    backend: Backend, tinker_client: Any, new_trainer: Callable[..., Any]
) -> None:
    """training_client.py ``save_state(ttl_seconds=...)``: "Optional TTL in seconds for the
    checkpoint ... (None = never expires)": with a TTL the listed checkpoint has an
    ``expires_at``, without one it has none."""
    tc = new_trainer(seed=37)
    timed = wait(tc.save_state("conformance-ttl", ttl_seconds=7200), backend).path
    forever = wait(tc.save_state("conformance-no-ttl"), backend).path
    listed = wait(_rest(tinker_client).list_checkpoints(tc.model_id), backend).checkpoints
    expiry = {c.tinker_path: c.expires_at for c in listed}
    assert expiry.get(timed) is not None and expiry.get(forever, "missing") is None, expiry


def test_training_run_describes_the_model(
    backend: Backend, tinker_client: Any, new_trainer: Callable[..., Any]
) -> None:
    """rest_client.py ``get_training_run``; training_run.py ``base_model``, ``is_lora``,
    ``lora_rank`` and ``last_checkpoint``."""
    tc = new_trainer(seed=38)
    path = wait(tc.save_state("conformance-run"), backend).path
    run = wait(_rest(tinker_client).get_training_run(tc.model_id), backend)
    assert run.training_run_id == tc.model_id and run.base_model == backend.base_model
    assert run.is_lora and run.lora_rank == backend.limits.rank
    assert run.last_checkpoint is not None and run.last_checkpoint.tinker_path == path


def test_training_runs_are_listed(
    backend: Backend, tinker_client: Any, new_trainer: Callable[..., Any]
) -> None:
    """rest_client.py ``list_training_runs``: "List training runs with pagination support";
    paging through them finds this run once it has a checkpoint."""
    tc = new_trainer(seed=39)
    wait(tc.save_state("conformance-runs"), backend)
    rest, seen, offset = _rest(tinker_client), set(), 0
    while tc.model_id not in seen:  # page through (list_training_runs(limit, offset))
        page = wait(rest.list_training_runs(limit=50, offset=offset), backend).training_runs
        if not page:
            break
        seen |= {r.training_run_id for r in page}
        offset += len(page)
    assert tc.model_id in seen, f"not among the {len(seen)} runs listed"


def test_weights_info_of_a_path(
    backend: Backend, tinker_client: Any, new_trainer: Callable[..., Any]
) -> None:
    """rest_client.py ``get_weights_info_by_tinker_path``; weights_info_response.py
    ``base_model``, ``is_lora``, ``lora_rank``."""
    tc = new_trainer(seed=40)
    path = wait(tc.save_state("conformance-info"), backend).path
    info = wait(_rest(tinker_client).get_weights_info_by_tinker_path(path), backend)
    assert info.base_model == backend.base_model and info.is_lora
    assert info.lora_rank == backend.limits.rank


def test_a_deleted_checkpoint_is_gone(
    backend: Backend, tinker_client: Any, new_trainer: Callable[..., Any]
) -> None:
    """rest_client.py ``delete_checkpoint_from_tinker_path``: the checkpoint leaves
    ``list_checkpoints``, and resuming from it is the caller's error."""
    tc = new_trainer(seed=41)
    path = wait(tc.save_state("conformance-delete"), backend).path
    rest = _rest(tinker_client)
    wait(rest.delete_checkpoint_from_tinker_path(path), backend)
    listed = wait(rest.list_checkpoints(tc.model_id), backend).checkpoints
    assert path not in {c.tinker_path for c in listed}
    user_error(backend, lambda: tinker_client.create_training_client_from_state(path))


def test_save_weights_external_gives_a_listed_checkpoint(
    backend: Backend, tinker_client: Any, new_trainer: Callable[..., Any]
) -> None:
    """training_client.py ``save_weights_external``: "The saved checkpoint is stored in the
    external-weights bucket and can be managed (listed, deleted) like any other checkpoint"."""
    needs_sdk(backend, "training:save_weights_external")
    tc = new_trainer(seed=42)
    path = wait(tc.save_weights_external("conformance-external"), backend).path
    assert path.startswith("tinker://")
    listed = wait(_rest(tinker_client).list_checkpoints(tc.model_id), backend).checkpoints
    assert path in {c.tinker_path for c in listed}
