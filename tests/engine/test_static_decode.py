"""The static decoder (slots, fixed-shape step) against the dynamic reference loop.

Both decoders run the same batch on the same model (CPU, float32): tokens and stop reasons
must be equal token for token, logprobs and top logprobs within 1e-5, for every sampling
option both dialects accept, alone and mixed in one batch, and for requests joining and
leaving mid-batch (also as a bounded hypothesis property over request mixes).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from localsession.engine import slot_cache, static_decoder
from localsession.engine.builtin import EOS_ID, PAD_ID, build_builtin
from localsession.engine.sampling import BatchSampler
from localsession.engine.streams import SampledStream
from localsession.engine.torch_engine import TorchEngine
from localsession.port import EngineSpec, ResolvedModel, SampleRequest

from .conftest import OPTIONS, TINY

ONCE = [257, *b"Once upon a time"]

#: One request per sampling option (both dialects): greedy, seeded, top-k, top-p, both,
#: stop strings, ``stop=[]`` (no EOS), stop ids, top-k sample logprobs, n > 1, 0 and 1 token.
OPTIONS_MATRIX = [
    SampleRequest(prompt=ONCE, num_samples=2, max_tokens=24, temperature=0.0),
    SampleRequest(prompt=ONCE, num_samples=3, max_tokens=24, seed=5, temperature=0.9),
    SampleRequest(prompt=[257, 72, 105], max_tokens=20, seed=1, temperature=1.3, top_k=5),
    SampleRequest(prompt=[257, 72], num_samples=2, max_tokens=20, seed=2, top_p=0.8),
    SampleRequest(prompt=ONCE, max_tokens=20, seed=3, temperature=1.1, top_k=7, top_p=0.9),
    SampleRequest(prompt=ONCE, num_samples=2, max_tokens=30, seed=4, stop=("e", "th")),
    SampleRequest(prompt=ONCE, num_samples=2, max_tokens=30, seed=10, stop=tuple("aeiouAEIOU")),
    SampleRequest(prompt=[257, 65], max_tokens=18, seed=6, temperature=1.2, stop_at_eos=False),
    SampleRequest(
        prompt=ONCE, num_samples=2, max_tokens=30, seed=7, stop_token_ids=tuple(range(64, 128))
    ),
    SampleRequest(prompt=ONCE, max_tokens=12, seed=8, temperature=0.7, topk_sample_logprobs=4),
    SampleRequest(prompt=[257], max_tokens=12, temperature=0.0, topk_sample_logprobs=3),
    SampleRequest(prompt=ONCE, num_samples=2, max_tokens=1, seed=9),
    SampleRequest(prompt=ONCE, max_tokens=0),
]

Admit = Callable[[], list[SampleRequest]]


def sampler(model: Any, tokenizer: Any, decode: str) -> BatchSampler:
    return BatchSampler(
        model, tokenizer, frozenset({EOS_ID}), PAD_ID, torch.device("cpu"), decode, "off"
    )


def joiner(plan: dict[int, list[SampleRequest]]) -> Callable[[], Admit]:
    """A fresh ``admit`` per decoder: after decode step s it returns ``plan[s]``."""

    def make() -> Admit:
        calls = 0

        def admit() -> list[SampleRequest]:
            nonlocal calls
            calls += 1
            return list(plan.get(calls, []))

        return admit

    return make


def assert_same(
    want: Sequence[Sequence[SampledStream]], got: Sequence[Sequence[SampledStream]]
) -> None:
    assert len(want) == len(got)
    for group_a, group_b in zip(want, got, strict=True):
        assert len(group_a) == len(group_b)
        for a, b in zip(group_a, group_b, strict=True):
            assert (a.tokens, a.stop_reason) == (b.tokens, b.stop_reason)
            torch.testing.assert_close(
                torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-5, rtol=0
            )
            assert [[t for t, _ in row] for row in a.topk_rows] == [
                [t for t, _ in row] for row in b.topk_rows
            ]
            for ra, rb in zip(a.topk_rows, b.topk_rows, strict=True):
                torch.testing.assert_close(
                    torch.tensor([v for _, v in ra]),
                    torch.tensor([v for _, v in rb]),
                    atol=1e-5,
                    rtol=0,
                )


def both(
    base: tuple[Any, Any],
    requests: list[SampleRequest],
    admit: Callable[[], Admit] | None = None,
) -> tuple[list[list[SampledStream]], list[list[SampledStream]]]:
    """(dynamic, static) results of one batch."""
    model, tokenizer = base
    with torch.no_grad():
        return tuple(  # type: ignore[return-value]
            sampler(model, tokenizer, decode).run(requests, admit=admit() if admit else None)
            for decode in ("dynamic", "static")
        )


@pytest.fixture(params=[1, 8], ids=["sync1", "sync8"])
def window(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> int:
    """Host syncs every step (the CPU's default) or every 8 steps (an accelerator's)."""
    monkeypatch.setattr(static_decoder, "CPU_SYNC_STEPS", request.param)
    return int(request.param)


@pytest.fixture(scope="module")
def small_base() -> tuple[Any, Any]:
    return build_builtin("localsession/small")


@pytest.fixture(params=["tiny", "small"])
def base(request: pytest.FixtureRequest, tiny_base: tuple[Any, Any]) -> tuple[Any, Any]:
    return tiny_base if request.param == "tiny" else request.getfixturevalue("small_base")


def test_every_option_in_one_batch_equals_the_dynamic_decoder(
    base: tuple[Any, Any], window: int
) -> None:
    dynamic, static = both(base, OPTIONS_MATRIX)
    assert_same(dynamic, static)
    tokens = [len(s.tokens) for g in static for s in g]
    assert max(tokens) >= 20 and tokens[-1] == 0  # real decoding happened; max_tokens=0 none
    assert {s.stop_reason for g in static for s in g} == {"stop", "length"}


@pytest.mark.parametrize("request_", OPTIONS_MATRIX, ids=range(len(OPTIONS_MATRIX)))
def test_each_option_alone_equals_the_dynamic_decoder(
    tiny_base: tuple[Any, Any], request_: SampleRequest
) -> None:
    assert_same(*both(tiny_base, [request_]))


def test_requests_joining_and_leaving_mid_batch(base: tuple[Any, Any], window: int) -> None:
    """Joins past the bucket (1 row -> 6) and past the columns (a long prompt), short
    requests leaving early, a joiner with nothing to decode."""
    long_prompt = [257, *b"A much longer prompt than the running context has so far, by far"]
    running = SampleRequest(prompt=ONCE, max_tokens=40, seed=5, temperature=0.9)
    plan = {
        2: [dataclasses.replace(OPTIONS_MATRIX[2], num_samples=3, max_tokens=5)],
        3: [SampleRequest(prompt=long_prompt, num_samples=2, max_tokens=12, seed=1, top_k=5)],
        9: [OPTIONS_MATRIX[0], OPTIONS_MATRIX[-1]],
        21: [dataclasses.replace(OPTIONS_MATRIX[9], max_tokens=30)],
    }
    dynamic, static = both(base, [running], joiner(plan))
    assert len(static) == 6 and [len(g) for g in static] == [1, 3, 2, 2, 1, 1]
    assert_same(dynamic, static)


def test_a_long_prompt_that_ends_at_its_first_token(base: tuple[Any, Any]) -> None:
    """The prefill is as wide as its longest prompt (151 tokens); that request ends at its
    first token, and the slots are sized for the short prompts that go on: the first batch
    and a join."""
    long_prompt = [257, *(65 + i % 26 for i in range(150))]
    ends = SampleRequest(prompt=long_prompt, max_tokens=1, seed=0)
    goes_on = SampleRequest(prompt=[257, 72], num_samples=2, max_tokens=6, seed=1)
    dynamic, static = both(base, [ends, goes_on], joiner({3: [ends, goes_on]}))
    assert [len(s.tokens) for g in static for s in g] == [1, 6, 6, 1, 6, 6]
    assert_same(dynamic, static)


@pytest.mark.parametrize("window_steps", [1, 8])
def test_a_slot_left_by_a_compaction_pads_without_moving(
    tiny_base: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch, window_steps: int
) -> None:
    """A compaction moves X from slot 3 to slot 0; X then stops at a stop id and three
    joiners bring the bucket back to 4, so slot 3 pads the step. It must pad at column 0:
    advanced as X's stale copy (pos towards X's last column), it wrote past the slots'
    columns (IndexError)."""
    monkeypatch.setattr(static_decoder, "CPU_SYNC_STEPS", window_steps)
    monkeypatch.setattr(slot_cache, "FIRST_ROOM", 8)
    prompt_x = [257, *b"Hello there, friend!"]
    k = 3 if window_steps == 1 else 12  # X's last token: after the compaction's window
    alone = SampleRequest(prompt=prompt_x, max_tokens=k, temperature=0.0)
    (greedy,) = both(tiny_base, [alone])[0][0]
    stop_id = greedy.tokens[k - 1]
    assert stop_id not in greedy.tokens[: k - 1]
    x = dataclasses.replace(alone, max_tokens=150, stop_token_ids=(stop_id,))
    ends = SampleRequest(prompt=[257, 72], num_samples=3, max_tokens=2, seed=1)
    joiners = SampleRequest(
        prompt=[257, 72, 105], num_samples=3, max_tokens=150, temperature=0.0, stop_at_eos=False
    )
    dynamic, static = both(tiny_base, [ends, x], joiner({k: [joiners]}))
    assert len(static[1][0].tokens) == k and [len(s.tokens) for s in static[2]] == [150] * 3
    assert_same(dynamic, static)


def test_a_long_generation_grows_the_columns(
    tiny_base: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past the first reservation (prompt + FIRST_ROOM columns, here 8): the slots move
    into wider buffers while decoding."""
    monkeypatch.setattr(slot_cache, "FIRST_ROOM", 8)
    assert slot_cache.columns_for(3, 3 + 150) == 64
    request = SampleRequest(prompt=[257, 65], max_tokens=150, seed=3, stop_at_eos=False)
    dynamic, static = both(tiny_base, [request, OPTIONS_MATRIX[1]])
    assert len(static[0][0].tokens) == 150
    assert_same(dynamic, static)


def test_max_tokens_at_the_context_limit_through_the_engine() -> None:
    """An engine whose model map entry allows 128 positions: a 100-token prompt with
    ``max_tokens=28`` decodes to exactly the limit; prompt logprobs ride along."""
    short = ResolvedModel(name="short/tiny", kind="builtin", target=TINY, max_context=128)
    request = SampleRequest(
        prompt=[257, *([65, 66, 67, 68] * 24), 69, 70, 71],
        num_samples=2,
        max_tokens=28,
        seed=11,
        stop_at_eos=False,
        include_prompt_logprobs=True,
        topk_sample_logprobs=2,
    )
    results = {}
    for decode in ("dynamic", "static"):
        options = dataclasses.replace(OPTIONS, decode=decode)
        engine = TorchEngine(
            EngineSpec(TINY, rank=8, alpha=16, seed=0, model=short, options=options)
        )
        try:
            assert engine.max_positions == 128 == len(request.prompt) + request.max_tokens
            results[decode] = engine.sample(None, [request])[0]
        finally:
            engine.close()
    a, b = results["dynamic"], results["static"]
    assert a.prompt_logprobs == b.prompt_logprobs and a.prompt_logprobs is not None
    for x, y in zip(a.sequences, b.sequences, strict=True):
        assert len(x.tokens) == 28 and x.tokens == y.tokens
        torch.testing.assert_close(
            torch.tensor(x.logprobs), torch.tensor(y.logprobs), atol=1e-5, rtol=0
        )


def test_the_engine_takes_the_decode_setting(tiny_engine: TorchEngine) -> None:
    assert tiny_engine._sampler.decode == OPTIONS.decode  # dynamic unless the env says


REQUESTS = st.builds(
    SampleRequest,
    # short prompts, and some past the slots' first 64 columns (a prefill wider than them)
    prompt=st.one_of(
        st.lists(st.integers(0, 255), min_size=0, max_size=10),
        st.lists(st.integers(0, 255), min_size=60, max_size=90),
    ).map(lambda p: [257, *p]),
    num_samples=st.integers(1, 3),
    max_tokens=st.integers(0, 16),
    temperature=st.sampled_from([0.0, 0.7, 1.0, 1.4]),
    top_k=st.sampled_from([-1, 3]),
    top_p=st.sampled_from([1.0, 0.85]),
    seed=st.integers(0, 2**40),
    stop_token_ids=st.sampled_from([(), (32,), (101, 97)]),
    topk_sample_logprobs=st.sampled_from([0, 2]),
)


@settings(
    max_examples=8,
    deadline=None,
    derandomize=True,
    phases=(Phase.explicit, Phase.generate),  # no shrinking: each example decodes twice
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    first=st.lists(REQUESTS, min_size=1, max_size=2),
    joins=st.lists(st.tuples(st.integers(1, 14), REQUESTS), max_size=3),
)
def test_property_mixes_joining_mid_batch(
    tiny_base: tuple[Any, Any],
    window: int,
    first: list[SampleRequest],
    joins: list[tuple[int, SampleRequest]],
) -> None:
    """A greedy keeper runs past the last join, so both decoders are asked at every join
    step (the static one may also be asked up to a window after its last stream ended)."""
    keeper = SampleRequest(prompt=ONCE, max_tokens=16, temperature=0.0, stop_at_eos=False)
    plan: dict[int, list[SampleRequest]] = {}
    for step, request in joins:
        plan.setdefault(step, []).append(request)
    assert_same(*both(tiny_base, [keeper, *first], joiner(plan)))
