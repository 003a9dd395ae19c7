"""On CUDA, the static step replayed as captured graphs against the same step run eagerly.

Marked ``gpu`` (``make test-gpu``), skipped without a CUDA device. A graph replays the
tensors it was captured with, so what these tests look for is a step that reads a tensor
the batch has since replaced or freed: every row must get the eager step's tokens, stop
reasons and logprobs, through joins that bring the batch back to a bucket it had left (its
graph replays again after another bucket's was captured), compaction, and a column growth.
The graphs run the same kernels as the eager step on the same shapes, so the two agree to
the 1e-5 of tests/engine/test_static_decode.py.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import pytest
import torch

from localsession.engine import decode_step, slot_cache
from localsession.engine.builtin import EOS_ID, PAD_ID
from localsession.engine.sampling import BatchSampler
from localsession.engine.streams import SampledStream
from localsession.port import SampleRequest

from .test_static_decode import ONCE, OPTIONS_MATRIX, Admit, assert_same, joiner

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


@pytest.fixture(scope="module")
def cuda_base(tiny_base: tuple[Any, Any]) -> tuple[Any, Any]:
    """A CUDA copy of the tiny model (the shared one stays on the CPU)."""
    model, tokenizer = tiny_base
    return copy.deepcopy(model).to("cuda"), tokenizer


def decode(
    base: tuple[Any, Any], mode: str, requests: list[SampleRequest], admit: Admit | None
) -> tuple[list[list[SampledStream]], dict[str, int]]:
    """(the static decoder's streams on CUDA with ``LOCALSESSION_DECODE_COMPILE=mode``,
    how many step keys ran each way, by kind)."""
    model, tokenizer = base
    cuda = torch.device("cuda")
    sampler = BatchSampler(model, tokenizer, frozenset({EOS_ID}), PAD_ID, cuda, "static", mode)
    decode_step.reset()
    with torch.no_grad():
        streams = sampler.run(requests, admit=admit)
    kinds: dict[str, int] = {}
    for kind in sampler._runner.kinds.values():
        kinds[kind] = kinds.get(kind, 0) + 1
    return streams, kinds


def graphs_against_eager(
    base: tuple[Any, Any], requests: list[SampleRequest], plan: dict[int, list[SampleRequest]]
) -> None:
    eager, eager_kinds = decode(base, "off", requests, joiner(plan)())
    graphed, graph_kinds = decode(base, "auto", requests, joiner(plan)())
    assert set(eager_kinds) == {"eager"}
    assert set(graph_kinds) == {"graph"}, graph_kinds  # a failed capture would run eager
    assert_same(eager, graphed)


def test_every_option_in_one_batch(cuda_base: tuple[Any, Any]) -> None:
    graphs_against_eager(cuda_base, OPTIONS_MATRIX, {})


def test_a_batch_back_at_a_bucket_it_left(cuda_base: tuple[Any, Any]) -> None:
    """4 rows (bucket 4, graph captured); two end at token 3, which the host reads at the
    end of the first 8-step window (steps 2-9): the batch compacts to bucket 2, whose graph
    is captured; two joiners at step 12 bring it back to bucket 4, whose graph, of the same
    cache generation and options, replays again."""
    short = SampleRequest(prompt=ONCE, num_samples=2, max_tokens=3, seed=1, stop_at_eos=False)
    running = SampleRequest(prompt=ONCE, num_samples=2, max_tokens=30, seed=2, stop_at_eos=False)
    joiners = SampleRequest(prompt=ONCE, num_samples=2, max_tokens=20, seed=3, stop_at_eos=False)
    graphs_against_eager(cuda_base, [short, running], {12: [joiners]})


def test_joins_past_the_bucket_and_the_columns(
    cuda_base: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The joins of test_static_decode's mid-batch test, with room for 8 columns at first:
    the slots move to wider buffers (a new generation of graphs) while decoding."""
    monkeypatch.setattr(slot_cache, "FIRST_ROOM", 8)
    long_prompt = [257, *b"A much longer prompt than the running context has so far, by far"]
    plan = {
        2: [dataclasses.replace(OPTIONS_MATRIX[2], num_samples=3, max_tokens=5)],
        3: [SampleRequest(prompt=long_prompt, num_samples=2, max_tokens=12, seed=1, top_k=5)],
        9: [OPTIONS_MATRIX[0], OPTIONS_MATRIX[-1]],
        21: [dataclasses.replace(OPTIONS_MATRIX[9], max_tokens=30)],
    }
    running = SampleRequest(prompt=ONCE, max_tokens=40, seed=5, temperature=0.9)
    graphs_against_eager(cuda_base, [running], plan)
