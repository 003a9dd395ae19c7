"""Sampling through the tinker SDK: counts and lengths, seeds, top-k, stop reasons, stop
strings and token ids, and sampled logprobs that agree with the model's own scoring."""

from __future__ import annotations

from typing import Any

import pytest

from conformance.adapter import Backend
from conformance.suite_tinker._kit import needs_sdk, wait

MAX_TOKENS = 10


def draw(
    backend: Backend, sampler: Any, seed: int | None, n: int = 3, stop: Any = None, **params: Any
) -> Any:
    """``n`` samples of the backend's prompt (temperature 1 unless given)."""
    types = backend.ts.types
    params.setdefault("max_tokens", MAX_TOKENS)
    params.setdefault("temperature", 1.0)
    sampling = types.SamplingParams(seed=seed, stop=stop, **params)
    prompt = types.ModelInput.from_ints(list(backend.prompt))
    return wait(sampler.sample(prompt, num_samples=n, sampling_params=sampling), backend)


def test_num_samples_max_tokens_and_stop_reasons(backend: Backend, sampler: Any) -> None:
    """sampled_sequence.py: ``stop_reason: StopReason`` (``Literal["length", "stop"]``);
    sampling_params.py ``max_tokens`` "Maximum number of tokens to generate"; ``stop=None``
    "keeps implicit EOS stopping": a sequence short of max_tokens ended on EOS."""
    res = draw(backend, sampler, seed=1, n=3)
    assert len(res.sequences) == 3
    for seq in res.sequences:
        assert 1 <= len(seq.tokens) <= MAX_TOKENS
        assert seq.stop_reason in ("length", "stop")
        assert (seq.stop_reason == "length") == (len(seq.tokens) == MAX_TOKENS) or (
            backend.eos_token_id is not None and seq.tokens[-1] == backend.eos_token_id
        )
        assert seq.logprobs is not None and len(seq.logprobs) == len(seq.tokens)


@pytest.mark.parametrize("n", [1, 4])
def test_num_samples_sequences_come_back(backend: Backend, sampler: Any, n: int) -> None:
    """sampling_client.py ``sample``: ``num_samples`` "Number of independent samples to
    generate"; sample_response.py ``sequences`` "Generated sequences"."""
    res = draw(backend, sampler, seed=2, n=n)
    assert len(res.sequences) == n


@pytest.mark.parametrize("max_tokens", [1, 5])
def test_max_tokens_bounds_every_sequence(backend: Backend, sampler: Any, max_tokens: int) -> None:
    """sampling_params.py ``max_tokens``: "Maximum number of tokens to generate"; with
    ``stop=[]`` ("generation continues until max_tokens") every sequence has exactly that
    many tokens and ends ``length``."""
    res = draw(backend, sampler, seed=3, n=2, stop=[], max_tokens=max_tokens)
    for seq in res.sequences:
        assert len(seq.tokens) == max_tokens, seq.tokens
        assert seq.stop_reason == "length"


def test_sequence_ids_are_distinct(backend: Backend, sampler: Any) -> None:
    """sampled_sequence.py ``sequence_id``: "Session-scoped identifier, distinct per
    sequence"."""
    needs_sdk(backend, "field:SampledSequence.sequence_id")
    a, b = draw(backend, sampler, seed=4, n=3), draw(backend, sampler, seed=5, n=2)
    ids = [s.sequence_id for s in [*a.sequences, *b.sequences]]
    assert all(isinstance(i, str) and i for i in ids)
    assert len(set(ids)) == len(ids), ids


def test_seeded_sampling_is_reproducible(backend: Backend, sampler: Any) -> None:
    """sampling_params.py ``seed``: "Random seed for reproducible generation": the same seed
    gives the same tokens, another seed other tokens."""
    a, b = draw(backend, sampler, seed=11), draw(backend, sampler, seed=11)
    assert [s.tokens for s in a.sequences] == [s.tokens for s in b.sequences]
    other = draw(backend, sampler, seed=12)
    assert [s.tokens for s in other.sequences] != [s.tokens for s in a.sequences]


@pytest.mark.requires("determinism")
def test_seeded_logprobs_are_bit_identical(backend: Backend, sampler: Any) -> None:
    """sampling_params.py ``seed`` (reproducible generation), and localsession's decision
    that the logprobs of a repeated request are bit-identical too."""
    a, b = draw(backend, sampler, seed=13), draw(backend, sampler, seed=13)
    assert [s.logprobs for s in a.sequences] == [s.logprobs for s in b.sequences]


def test_samples_of_one_request_are_independent(backend: Backend, sampler: Any) -> None:
    """sampling_client.py ``num_samples``: "independent samples": four samples of one seeded
    request at temperature 1 are not all the same sequence."""
    res = draw(backend, sampler, seed=14, n=4)
    assert len({tuple(s.tokens) for s in res.sequences}) > 1


def test_top_k_one_is_greedy_whatever_the_seed(backend: Backend, sampler: Any) -> None:
    """sampling_params.py ``top_k``: "Top-k sampling parameter": with k = 1 only the most
    likely token can be drawn, so two seeds agree token for token."""
    a = draw(backend, sampler, seed=21, n=1, top_k=1, stop=[]).sequences[0]
    b = draw(backend, sampler, seed=22, n=1, top_k=1, stop=[]).sequences[0]
    assert a.tokens == b.tokens


def test_greedy_tokens_are_the_argmax_of_the_scores(backend: Backend, sampler: Any) -> None:
    """sampling_params.py ``top_k=1`` and ``compute_logprobs``: each greedy token's sampled
    logprob is at least the prompt-scored logprob of every other top-k candidate there."""
    types = backend.ts.types
    seq = draw(backend, sampler, seed=23, n=1, top_k=1, stop=[], max_tokens=3).sequences[0]
    prompt = types.ModelInput.from_ints([*backend.prompt, *seq.tokens])
    res = wait(
        sampler.sample(
            prompt,
            num_samples=1,
            sampling_params=types.SamplingParams(max_tokens=1, seed=0),
            include_prompt_logprobs=True,
            topk_prompt_logprobs=3,
        ),
        backend,
    )
    start = len(backend.prompt)
    for i, token in enumerate(seq.tokens):
        row = res.topk_prompt_logprobs[start + i]
        assert row is not None and row[0][0] == token, (token, row)


def test_a_stop_token_id_ends_the_sequence(backend: Backend, sampler: Any) -> None:
    """sampling_params.py ``stop``: ``Sequence[int]`` stop tokens; sampled_sequence.py
    ``stop_reason``: the seeded sample is cut at the first draw of the id, ``"stop"``."""
    free = draw(backend, sampler, seed=31, n=1, stop=[]).sequences[0]
    assert len(free.tokens) >= 3, "need a sample of a few tokens to pick a stop id from"
    stop_id = free.tokens[2]
    first = free.tokens.index(stop_id)
    cut = draw(backend, sampler, seed=31, n=1, stop=[stop_id]).sequences[0]
    assert cut.stop_reason == "stop"
    if backend.has("sampling.stop_inclusive"):
        assert cut.tokens == free.tokens[: first + 1]
    else:
        assert cut.tokens in (free.tokens[:first], free.tokens[: first + 1])


def test_a_stop_string_ends_the_sequence(backend: Backend, sampler: Any) -> None:
    """sampling_params.py ``stop``: ``str`` / ``Sequence[str]`` "Stop sequences for
    generation": the text of the cut sample ends at (or just before) the stop string's first
    occurrence in the free sample."""
    if backend.decode is None:
        pytest.skip("the backend's tokenizer is unavailable: no text to find a string in")
    free = draw(backend, sampler, seed=32, n=1, stop=[]).sequences[0]
    text = backend.decode(free.tokens)
    stop = text[len(text) // 2 : len(text) // 2 + 1]
    if not stop.strip():
        stop = text.strip()[:1]
    cut = draw(backend, sampler, seed=32, n=1, stop=[stop]).sequences[0]
    assert cut.stop_reason == "stop", (text, stop, cut.tokens)
    got = backend.decode(cut.tokens)
    end = text.index(stop) + len(stop)
    assert text.startswith(got) or got.startswith(text[:end]), (text, stop, got)
    # the stop completed at the last token (a BPE token may carry text past it)
    assert stop not in backend.decode(cut.tokens[:-1]), (stop, got)


def _eos_model(backend: Backend, tinker_client: Any) -> Any:
    """A sampling client on an adapter trained until its greedy first token is EOS."""
    eos = backend.eos_token_id
    assert eos is not None
    types = backend.ts.types
    tc = wait(
        tinker_client.create_lora_training_client(
            backend.base_model, rank=backend.limits.rank, seed=0
        ),
        backend,
    )
    seq = [*backend.prompt, eos]
    datum = types.Datum(
        model_input=types.ModelInput.from_ints(seq[:-1]),
        loss_fn_inputs={"target_tokens": seq[1:], "weights": [0.0] * (len(seq) - 2) + [1.0]},
    )
    prompt = types.ModelInput.from_ints(list(backend.prompt))
    greedy = types.SamplingParams(max_tokens=4, top_k=1, seed=0)
    for _ in range(25):
        wait(tc.forward_backward([datum], "cross_entropy"), backend)
        wait(tc.optim_step(types.AdamParams(learning_rate=backend.limits.learning_rate)), backend)
        out = wait(tc.forward([datum], "cross_entropy"), backend)
        if out.loss_fn_outputs[0]["logprobs"].tolist()[-1] > -0.05:
            break
    sampler = wait(tc.save_weights_and_get_sampling_client(), backend)
    first = wait(sampler.sample(prompt, num_samples=1, sampling_params=greedy), backend)
    assert first.sequences[0].tokens[0] == eos, "training did not make EOS the greedy token"
    return sampler


def test_stop_none_keeps_eos_and_an_empty_list_disables_it(
    backend: Backend, tinker_client: Any
) -> None:
    """sampling_params.py ``stop``: "``None`` keeps implicit EOS stopping; ``[]`` disables
    all stop tokens, including EOS, and generation continues until ``max_tokens``", on an
    adapter whose greedy first token is EOS."""
    if backend.eos_token_id is None:
        pytest.skip("the backend's tokenizer is unavailable: no EOS id")
    sampler = _eos_model(backend, tinker_client)
    types = backend.ts.types
    prompt = types.ModelInput.from_ints(list(backend.prompt))

    def greedy(stop: Any) -> Any:
        params = types.SamplingParams(max_tokens=6, top_k=1, seed=0, stop=stop)
        return wait(sampler.sample(prompt, num_samples=1, sampling_params=params), backend)

    implicit = greedy(None).sequences[0]
    assert implicit.stop_reason == "stop" and len(implicit.tokens) <= 1, implicit.tokens
    disabled = greedy([]).sequences[0]
    assert disabled.stop_reason == "length" and len(disabled.tokens) == 6, disabled.tokens
    assert disabled.tokens[0] == backend.eos_token_id


def test_sampled_logprobs_match_compute_logprobs(backend: Backend, sampler: Any) -> None:
    """sampled_sequence.py ``logprobs``: "Log probabilities for each generated token";
    sampling_client.py ``compute_logprobs``: at temperature 1 the two agree."""
    seq = draw(backend, sampler, seed=41, n=1).sequences[0]
    prompt = list(backend.prompt)
    full = backend.ts.types.ModelInput.from_ints(prompt + seq.tokens)
    scored = wait(sampler.compute_logprobs(full), backend)
    assert len(scored) == len(prompt) + len(seq.tokens) and scored[0] is None
    tail = scored[len(prompt) :]
    mse = sum((a - b) ** 2 for a, b in zip(tail, seq.logprobs, strict=True)) / len(tail)
    assert mse <= backend.limits.logprob_mse, (tail, seq.logprobs)


def test_compute_logprobs_scores_every_token_but_the_first(
    backend: Backend, sampler: Any, tokens: list[int]
) -> None:
    """sampling_client.py ``compute_logprobs``: one entry per prompt token, ``None`` first
    (nothing precedes it), the rest log-probabilities (<= 0)."""
    scored = wait(sampler.compute_logprobs(backend.ts.types.ModelInput.from_ints(tokens)), backend)
    assert len(scored) == len(tokens) and scored[0] is None
    assert all(v is not None and v <= 0.0 for v in scored[1:]), scored
