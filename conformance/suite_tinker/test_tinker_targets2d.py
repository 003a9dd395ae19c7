"""Cross-entropy with 2-D ``(N, K)`` ``target_tokens`` and ``weights``: K candidate targets per
position, each weighted (the cookbook's top-K distillation). The SDK sends them as such
(tinker/types/datum.py: "Auto-sparsify 2-D target_tokens and weights to reduce wire
payload"; ``with_provenance`` tiles only 1-D targets); the expected values come from 1-D
forwards of each column on the same weights."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from conformance.adapter import Backend
from conformance.suite_tinker._kit import adam, approx_loss, datum, forward, fsum, wait

K = 3


@pytest.fixture
def trainer(new_trainer: Callable[..., Any]) -> Any:
    return new_trainer(seed=0)


def _columns(tokens: list[int]) -> np.ndarray:
    """``(N, K)`` candidates: the true next token, then two shifted copies of it (other
    valid ids of the prompt), int64."""
    targets = np.asarray(tokens[1:], dtype=np.int64)
    pool = np.asarray(sorted(set(tokens)), dtype=np.int64)
    index = np.searchsorted(pool, targets)
    alt1 = pool[(index + 1) % len(pool)]
    alt2 = pool[(index + 2) % len(pool)]
    return np.stack([targets, alt1, alt2], axis=1)  # (N, K)


def _weights(n: int) -> np.ndarray:
    """``(N, K)`` float32 weights: 0.6 / 0.3 / 0.1 with every fourth row zeroed."""
    w = np.tile(np.asarray([0.6, 0.3, 0.1], dtype=np.float32), (n, 1))
    w[::4] = 0.0
    return w


def _two_d(backend: Backend, tokens: list[int], targets: Any, weights: Any) -> Any:
    types = backend.ts.types
    return types.Datum(
        model_input=types.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={"target_tokens": targets, "weights": weights},
    )


def _column_logprobs(backend: Backend, trainer: Any, tokens: list[int], targets: Any) -> Any:
    """``(N, K)`` logprobs from K 1-D forwards, one column each (the reference)."""
    cols = []
    for k in range(targets.shape[1]):
        types = backend.ts.types
        one = types.Datum(
            model_input=types.ModelInput.from_ints(tokens[:-1]),
            loss_fn_inputs={
                "target_tokens": targets[:, k].tolist(),
                "weights": [1.0] * targets.shape[0],
            },
        )
        out = forward(backend, trainer, [one])
        cols.append(out.loss_fn_outputs[0]["logprobs"].to_numpy())
    return np.stack(cols, axis=1)


def test_2d_cross_entropy_is_the_weighted_sum_over_candidates(
    backend: Backend, trainer: Any, tokens: list[int]
) -> None:
    """datum.py 2-D ``target_tokens``/``weights``; losses.mdx cross_entropy
    ``(-target_logprobs * weights).sum()`` over every (position, candidate) cell."""
    targets = _columns(tokens)
    weights = _weights(targets.shape[0])
    reference = _column_logprobs(backend, trainer, tokens, targets)
    out = forward(backend, trainer, [_two_d(backend, tokens, targets, weights)])
    expected = -fsum((reference * weights).ravel())
    assert out.metrics["loss:sum"] == approx_loss(backend, expected)


def test_2d_logprobs_output_has_the_targets_shape(
    backend: Backend, trainer: Any, tokens: list[int]
) -> None:
    """losses.mdx: output ``logprobs`` are the "Log probabilities of predicted tokens", one
    per target: with ``(N, K)`` targets, an ``(N, K)`` tensor, cell (n, k) the logprob of
    candidate k at position n."""
    targets = _columns(tokens)
    reference = _column_logprobs(backend, trainer, tokens, targets)
    out = forward(backend, trainer, [_two_d(backend, tokens, targets, _weights(len(targets)))])
    logprobs = out.loss_fn_outputs[0]["logprobs"].to_numpy()
    assert logprobs.shape == targets.shape
    assert np.allclose(logprobs, reference, atol=backend.limits.logprob_atol)


def test_2d_with_one_weighted_column_equals_the_1d_loss(
    backend: Backend, trainer: Any, tokens: list[int]
) -> None:
    """datum.py / losses.mdx: weights 1 on column 0 and 0 elsewhere make the 2-D loss the
    1-D cross-entropy of column 0 (the true next tokens)."""
    targets = _columns(tokens)
    weights = np.zeros(targets.shape, dtype=np.float32)
    weights[:, 0] = 1.0
    flat = forward(backend, trainer, [datum(backend, tokens)]).metrics["loss:sum"]
    out = forward(backend, trainer, [_two_d(backend, tokens, targets, weights)])
    assert out.metrics["loss:sum"] == approx_loss(backend, flat)


def test_2d_torch_tensors_are_sent_sparse_and_agree(
    backend: Backend, trainer: Any, tokens: list[int]
) -> None:
    """datum.py: a 2-D torch ``target_tokens``/``weights`` is "Auto-sparsify[d]" to a CSR
    ``TensorData``; the server must read it as the same dense ``(N, K)`` values."""
    torch = pytest.importorskip("torch")
    targets = _columns(tokens)
    weights = _weights(targets.shape[0])
    dense = forward(backend, trainer, [_two_d(backend, tokens, targets, weights)])
    sparse_datum = _two_d(
        backend, tokens, torch.from_numpy(targets), torch.from_numpy(weights.copy())
    )
    sparse = forward(backend, trainer, [sparse_datum])
    assert sparse.metrics["loss:sum"] == approx_loss(backend, dense.metrics["loss:sum"])


def test_a_2d_step_raises_the_weighted_candidates(
    backend: Backend, trainer: Any, tokens: list[int]
) -> None:
    """training_client.py ``forward_backward`` "calculate gradients" on 2-D targets too: one
    step on the 2-D loss lowers that loss (the gradient reaches every weighted cell)."""
    targets = _columns(tokens)
    weights = _weights(targets.shape[0])
    two_d = _two_d(backend, tokens, targets, weights)
    before = wait(trainer.forward_backward([two_d], "cross_entropy"), backend)
    wait(trainer.optim_step(adam(backend)), backend)
    after = forward(backend, trainer, [_two_d(backend, tokens, targets, weights)])
    assert after.metrics["loss:sum"] < before.metrics["loss:sum"]
