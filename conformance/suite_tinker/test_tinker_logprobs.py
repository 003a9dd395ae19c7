"""Prompt and top-k logprobs of ``SamplingClient.sample``: ``include_prompt_logprobs``,
``topk_prompt_logprobs``, ``prompt_logprobs_last_n``, ``topk_sample_logprobs`` and
``target_prompt_logprobs``, each checked against ``compute_logprobs`` of the same prompt."""

from __future__ import annotations

from typing import Any

import pytest

from conformance.adapter import Backend
from conformance.suite_tinker._kit import needs_sdk, wait

K = 3


def _sample(backend: Backend, sampler: Any, tokens: list[int], **kw: Any) -> Any:
    """One prefill of ``tokens`` (max_tokens 1) with the given logprob options."""
    types = backend.ts.types
    params = types.SamplingParams(max_tokens=kw.pop("max_tokens", 1), seed=0)
    prompt = types.ModelInput.from_ints(tokens)
    return wait(sampler.sample(prompt, num_samples=1, sampling_params=params, **kw), backend)


def _scored(backend: Backend, sampler: Any, tokens: list[int]) -> list[float | None]:
    return list(
        wait(sampler.compute_logprobs(backend.ts.types.ModelInput.from_ints(tokens)), backend)
    )


def test_prompt_logprobs_match_compute_logprobs(
    backend: Backend, sampler: Any, tokens: list[int]
) -> None:
    """sample_response.py ``prompt_logprobs``: "computed for every token in the prompt",
    ``None`` "for positions where logprobs were not computed (e.g. the first prompt token)"."""
    res = _sample(backend, sampler, tokens, include_prompt_logprobs=True)
    scored = _scored(backend, sampler, tokens)
    assert res.prompt_logprobs[0] is None and len(res.prompt_logprobs) == len(tokens)
    assert res.prompt_logprobs[1:] == pytest.approx(scored[1:], abs=backend.limits.logprob_atol)


def test_prompt_logprobs_are_absent_unless_asked(
    backend: Backend, sampler: Any, tokens: list[int]
) -> None:
    """sample_response.py ``prompt_logprobs``: "Returns ``None`` if prompt logprobs were not
    requested"; likewise ``topk_prompt_logprobs`` "if top-k was not requested"."""
    res = _sample(backend, sampler, tokens)
    assert res.prompt_logprobs is None
    assert res.topk_prompt_logprobs is None


def test_topk_prompt_logprobs_rank_the_candidates(
    backend: Backend, sampler: Any, tokens: list[int]
) -> None:
    """sample_response.py ``topk_prompt_logprobs``: "For each prompt position: a list of up
    to k ``(token_id, logprob)`` tuples, or ``None``" where not computed: highest first, the
    best at least the prompt token's own logprob, and where the prompt token is among them
    its entry equals ``compute_logprobs``."""
    res = _sample(backend, sampler, tokens, include_prompt_logprobs=True, topk_prompt_logprobs=K)
    scored = _scored(backend, sampler, tokens)
    rows = res.topk_prompt_logprobs
    assert len(rows) == len(tokens) and rows[0] is None
    for position, row in enumerate(rows[1:], 1):
        assert row is not None and 1 <= len(row) <= K
        values = [lp for _, lp in row]
        assert values == sorted(values, reverse=True), row
        own = scored[position]
        assert own is not None and values[0] >= own - backend.limits.logprob_atol
        for token, lp in row:
            if token == tokens[position]:
                assert lp == pytest.approx(own, abs=backend.limits.logprob_atol)


def test_prompt_logprobs_last_n_scores_only_the_tail(
    backend: Backend, sampler: Any, tokens: list[int]
) -> None:
    """sample_response.py / sampling_client.py ``prompt_logprobs_last_n``: "Score only the
    last N prompt tokens: ``prompt_logprobs[-N:]`` are scored and earlier entries are
    ``None``"."""
    needs_sdk(backend, "sample:prompt_logprobs_last_n")
    n = 3
    res = _sample(backend, sampler, tokens, include_prompt_logprobs=True, prompt_logprobs_last_n=n)
    scored = _scored(backend, sampler, tokens)
    assert len(res.prompt_logprobs) == len(tokens)
    assert all(v is None for v in res.prompt_logprobs[:-n]), res.prompt_logprobs
    assert res.prompt_logprobs[-n:] == pytest.approx(scored[-n:], abs=backend.limits.logprob_atol)


def test_topk_sample_logprobs_cover_each_sampled_token(
    backend: Backend, sampler: Any, tokens: list[int]
) -> None:
    """sampled_sequence.py ``topk_logprobs``: "each generated position gets a list of up to
    k ``(token_id, logprob)`` tuples"; at temperature 1 the sampled token's own logprob is no
    more than the best of them, and equals its entry when listed."""
    needs_sdk(backend, "sample:topk_sample_logprobs")
    res = _sample(backend, sampler, list(backend.prompt), max_tokens=6, topk_sample_logprobs=K)
    seq = res.sequences[0]
    rows = seq.topk_logprobs
    assert rows is not None and len(rows) == len(seq.tokens)
    for token, lp, row in zip(seq.tokens, seq.logprobs, rows, strict=True):
        assert row is not None and 1 <= len(row) <= K
        values = [v for _, v in row]
        assert values == sorted(values, reverse=True)
        assert values[0] >= lp - backend.limits.logprob_atol
        for candidate, value in row:
            if candidate == token:
                assert value == pytest.approx(lp, abs=backend.limits.logprob_atol)


def test_topk_sample_logprobs_are_absent_unless_asked(backend: Backend, sampler: Any) -> None:
    """sampled_sequence.py ``topk_logprobs``: "Returns ``None`` if top-k was not requested"."""
    needs_sdk(backend, "sample:topk_sample_logprobs")
    res = _sample(backend, sampler, list(backend.prompt), max_tokens=3)
    assert res.sequences[0].topk_logprobs is None


def test_target_prompt_logprobs_score_the_named_ids(
    backend: Backend, sampler: Any, tokens: list[int]
) -> None:
    """sampling_client.py ``target_prompt_logprobs``: an int64 ``[len(prompt) - 1, K]``
    tensor, cell ``[i][j]`` "scored at prompt position ``i + 1``", ``-1`` for cells not needed;
    sample_response.py: "a float32 tensor of the same shape and layout, 0.0 where the request
    had ``-1``". Column 0 names the prompt's own tokens, so it equals ``compute_logprobs``."""
    needs_sdk(backend, "sample:target_prompt_logprobs")
    np = pytest.importorskip("numpy")
    ids = np.full((len(tokens) - 1, 2), -1, dtype=np.int64)
    ids[:, 0] = tokens[1:]
    ids[::2, 1] = tokens[0]
    target = backend.ts.types.TensorData.from_numpy(ids)
    res = _sample(
        backend, sampler, tokens, include_prompt_logprobs=True, target_prompt_logprobs=target
    )
    scored = _scored(backend, sampler, tokens)
    got = res.target_prompt_logprobs.to_numpy()
    assert got.shape == ids.shape
    assert got[:, 0].tolist() == pytest.approx(scored[1:], abs=backend.limits.logprob_atol)
    assert all(v == 0.0 for v in got[1::2, 1].tolist()), got[:, 1]
    assert all(v < 0.0 for v in got[::2, 1].tolist()), got[:, 1]
