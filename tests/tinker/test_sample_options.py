"""``topk_sample_logprobs``, ``target_prompt_logprobs`` and ``prompt_alt_tokens_k`` through
the unmodified ``tinker`` SDK, each checked against an independent code path: the
prompt-logprob pass over the prompt plus the sampled tokens, which scores every position
with the full distribution at temperature 1 (the tiny model's vocabulary is 259, so top-259
is all of it)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

tinker = pytest.importorskip("tinker")
torch = pytest.importorskip("torch")
types = tinker.types

VOCAB = 259
PROMPT = [257, 87, 104, 121, 32, 110, 111, 116]


@pytest.fixture
def sampler(localsession_tinker: Any) -> Iterator[Any]:
    sc = tinker.ServiceClient()
    yield sc.create_sampling_client(base_model="localsession/tiny").result()
    sc.close("success").result()


def full_distribution(sampler: Any, tokens: list[int]) -> list[dict[int, float]]:
    """Row t: every id's logprob at position t + 1 of ``tokens`` (T = 1)."""
    res = sampler.sample(
        types.ModelInput.from_ints(tokens),
        1,
        types.SamplingParams(max_tokens=1, seed=0),
        topk_prompt_logprobs=VOCAB,
    ).result()
    return [dict(row) for row in res.topk_prompt_logprobs[1:]]


def test_topk_sample_logprobs_are_the_top_of_each_draws_distribution(sampler: Any) -> None:
    params = types.SamplingParams(max_tokens=5, seed=3, temperature=1.0)
    res = sampler.sample(
        types.ModelInput.from_ints(PROMPT), 2, params, topk_sample_logprobs=4
    ).result()
    for seq in res.sequences:
        assert len(seq.topk_logprobs) == len(seq.tokens) == 5
        rows = full_distribution(sampler, PROMPT + seq.tokens)[len(PROMPT) - 1 :]
        for t, (token, lp, top) in enumerate(
            zip(seq.tokens, seq.logprobs, seq.topk_logprobs, strict=True)
        ):
            best = sorted(rows[t].items(), key=lambda kv: -kv[1])[:4]
            assert [i for i, _ in top] == [i for i, _ in best]
            assert [v for _, v in top] == pytest.approx([v for _, v in best], abs=1e-4)
            assert lp == pytest.approx(rows[t][token], abs=1e-4)
    plain = sampler.sample(types.ModelInput.from_ints(PROMPT), 1, params).result()
    assert plain.sequences[0].topk_logprobs is None


def test_target_prompt_logprobs_score_the_named_ids(sampler: Any) -> None:
    rows = len(PROMPT) - 1
    ids = torch.tensor([[PROMPT[i + 1], 97, -1] for i in range(rows)], dtype=torch.int64)
    res = sampler.sample(
        types.ModelInput.from_ints(PROMPT),
        1,
        types.SamplingParams(max_tokens=1, seed=0),
        target_prompt_logprobs=types.TensorData.from_torch(ids),
    ).result()
    got = res.target_prompt_logprobs.to_torch()
    assert tuple(got.shape) == (rows, 3)
    dist = full_distribution(sampler, PROMPT)
    for i in range(rows):
        assert float(got[i, 0]) == pytest.approx(dist[i][PROMPT[i + 1]], abs=1e-4)
        assert float(got[i, 1]) == pytest.approx(dist[i][97], abs=1e-4)
        assert float(got[i, 2]) == 0.0  # -1 asks nothing
    sparse = sampler.sample(
        types.ModelInput.from_ints(PROMPT),
        1,
        types.SamplingParams(max_tokens=1, seed=0),
        target_prompt_logprobs=types.TensorData.from_torch_sparse(ids, pad_value=-1),
    ).result()
    assert torch.allclose(sparse.target_prompt_logprobs.to_torch().to_dense(), got)
    with pytest.raises(Exception, match=r"len\(prompt\) - 1"):
        sampler.sample(
            types.ModelInput.from_ints(PROMPT),
            1,
            types.SamplingParams(max_tokens=1, seed=0),
            target_prompt_logprobs=types.TensorData.from_torch(ids[:2]),
        ).result()


def test_prompt_alt_tokens_are_seeded_draws_with_their_logprobs(sampler: Any) -> None:
    def alt(seed: int, temperature: float) -> Any:
        res = sampler.sample(
            types.ModelInput.from_ints(PROMPT),
            1,
            types.SamplingParams(max_tokens=1, seed=seed, temperature=temperature),
            prompt_alt_tokens_k=5,
        ).result()
        return res.prompt_alt_tokens.tokens.to_torch(), res.prompt_alt_tokens.logprobs.to_torch()

    ids, lps = alt(3, 1.0)
    assert tuple(ids.shape) == tuple(lps.shape) == (len(PROMPT) - 1, 5)
    dist = full_distribution(sampler, PROMPT)
    for i in range(len(PROMPT) - 1):
        for j in range(5):
            assert float(lps[i, j]) == pytest.approx(dist[i][int(ids[i, j])], abs=1e-4)
    again, _ = alt(3, 1.0)
    other, _ = alt(4, 1.0)
    assert torch.equal(ids, again) and not torch.equal(ids, other)
    greedy, _ = alt(0, 0.0)
    best = [max(row, key=row.get) for row in dist]
    assert greedy.tolist() == [[b] * 5 for b in best]
