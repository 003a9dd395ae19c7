"""Bad input is the caller's error: a 4xx ``APIStatusError`` at submit, or a failed request
of category ``User`` (tinker/types/request_error_category.py), with a message that names
the input at fault (``_kit.user_error``). A server fault (5xx, category ``Server`` or
``Unknown``) never passes for one, and a refused request leaves the trainer usable."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from conformance.adapter import Backend
from conformance.suite_tinker._kit import datum, loss_of, needs_sdk, step, user_error, wait

BIG_ID = 2**31 - 1


def test_an_unknown_base_model_is_refused(backend: Backend, tinker_client: Any) -> None:
    """service_client.py ``create_lora_training_client(base_model=...)``; the catalog is
    ``get_server_capabilities``: a model it does not list is refused by name."""
    name = "no-such/model-conformance"
    user_error(backend, lambda: tinker_client.create_lora_training_client(name, rank=4), name)


def test_mismatched_target_tokens_are_refused_by_name(
    backend: Backend, new_trainer: Callable[..., Any], tokens: list[int]
) -> None:
    """losses.mdx: ``target_tokens: array[(N,), int]`` where "N is model_input.length": one
    target fewer is refused, naming ``target_tokens`` (not a tensor-shape crash)."""
    tc = new_trainer(seed=60)
    types = backend.ts.types
    short = types.Datum(
        model_input=types.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={"target_tokens": tokens[1:-1], "weights": [1.0] * (len(tokens) - 2)},
    )
    user_error(backend, lambda: tc.forward_backward([short], "cross_entropy"), "target_tokens")


def test_mismatched_weights_are_refused_by_name(
    backend: Backend, new_trainer: Callable[..., Any], tokens: list[int]
) -> None:
    """losses.mdx: ``weights: array[(N,), float]``, one per position: a shorter list is
    refused, naming ``weights``."""
    tc = new_trainer(seed=61)
    bad = datum(backend, tokens, weights=[1.0] * (len(tokens) - 3))
    user_error(backend, lambda: tc.forward([bad], "cross_entropy"), "weights")


def test_a_missing_rl_input_is_refused_by_name(
    backend: Backend, new_trainer: Callable[..., Any], tokens: list[int]
) -> None:
    """losses.mdx importance_sampling "Input tensors": ``target_tokens``, ``logprobs``,
    ``advantages``: without ``advantages`` the request is refused, naming it."""
    tc = new_trainer(seed=62)
    n = len(tokens) - 1
    rl = datum(backend, tokens, weights=None, logprobs=[-1.0] * n)
    user_error(backend, lambda: tc.forward([rl], "importance_sampling"), "advantages")


def test_an_unknown_loss_is_refused_by_name(
    backend: Backend, new_trainer: Callable[..., Any], tokens: list[int]
) -> None:
    """loss_fn_type.py ``LossFnType``: the built-in names; another name is refused, naming
    it (by the server: an SDK that validates the name itself never sends it)."""
    needs_sdk(backend, "unchecked:ForwardBackwardInput")
    tc = new_trainer(seed=63)
    user_error(
        backend, lambda: tc.forward([datum(backend, tokens)], "no_such_loss"), "no_such_loss"
    )


def test_a_prompt_beyond_the_vocabulary_is_refused(backend: Backend, sampler: Any) -> None:
    """sampling_client.py ``compute_logprobs(prompt)``: token ids index the model's
    vocabulary; an id past it is refused, naming the id."""
    bad = backend.ts.types.ModelInput.from_ints([*backend.prompt, BIG_ID])
    user_error(backend, lambda: sampler.compute_logprobs(bad), str(BIG_ID))


def test_a_target_beyond_the_vocabulary_is_refused(
    backend: Backend, new_trainer: Callable[..., Any], tokens: list[int]
) -> None:
    """losses.mdx ``target_tokens: array[(N,), int] - Target token IDs``: an id outside the
    vocabulary is refused, naming the id."""
    tc = new_trainer(seed=64)
    bad = datum(backend, [*tokens[:-1], BIG_ID])
    user_error(backend, lambda: tc.forward([bad], "cross_entropy"), str(BIG_ID))


def test_an_unknown_checkpoint_path_is_refused(backend: Backend, tinker_client: Any) -> None:
    """service_client.py ``create_training_client_from_state(path)``: "Tinker path to saved
    weights"; a path that names no checkpoint is the caller's error."""
    path = "tinker://no-such-run:train:0/weights/conformance-missing"
    user_error(backend, lambda: tinker_client.create_training_client_from_state(path))


def test_an_unknown_sampler_path_is_refused(backend: Backend, tinker_client: Any) -> None:
    """service_client.py ``create_sampling_client(model_path=...)``: a path that names no
    saved weights is refused (at creation or at the first sample)."""
    types = backend.ts.types
    path = "tinker://no-such-run:train:0/sampler_weights/conformance-missing"

    class Sample:
        def result(self, timeout: float | None = None) -> Any:
            sampler = wait(tinker_client.create_sampling_client(model_path=path), backend)
            prompt = types.ModelInput.from_ints(list(backend.prompt))
            params = types.SamplingParams(max_tokens=1, seed=0)
            return wait(sampler.sample(prompt, num_samples=1, sampling_params=params), backend)

    user_error(backend, Sample)


@pytest.mark.parametrize("rank", [0, -4])
def test_a_nonpositive_rank_is_refused(backend: Backend, tinker_client: Any, rank: int) -> None:
    """lora_config.py ``rank``: "LoRA rank (dimension of low-rank matrices)", a positive
    size: 0 or less is refused."""
    user_error(
        backend, lambda: tinker_client.create_lora_training_client(backend.base_model, rank=rank)
    )


def test_a_refused_datum_leaves_the_trainer_usable(
    backend: Backend, new_trainer: Callable[..., Any], tokens: list[int]
) -> None:
    """RequestFailedError of category User (api_future_impl.py) fails one request: the
    trainer's next forward and step still run."""
    tc = new_trainer(seed=65)
    start = loss_of(backend, tc, tokens)
    bad = datum(backend, tokens, weights=[1.0])
    user_error(backend, lambda: tc.forward_backward([bad], "cross_entropy"), "weights")
    if backend.has("failure.isolated"):
        wait(tc.optim_step(backend.ts.types.AdamParams(learning_rate=1e-3)), backend)
        assert loss_of(backend, tc, tokens) == start  # the failed op left no gradient
    assert step(backend, tc, tokens) > 0.0
