"""One decode stream of the batched sampler: a (request, sample i) pair and its result so far.

Shared by the sampler (:mod:`localsession.engine.sampling`) and the continuous-batching
helpers (:mod:`localsession.engine.batch_join`), so neither imports the other's module;
also the seeded CPU generator every seeded draw uses (the scorers' too) and a finished
stream as the port's ``SampledSequence``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from localsession.port_results import SampledSequence, StopReason, TopLogprob

#: Uniforms drawn per generator call (see ``SampledStream.next_uniform``).
DRAW_CHUNK = 32
#: Seeds are taken modulo this (a CPU generator takes a seed below 2**64; a request's
#: ``seed + i`` may be any int).
_SEED_MOD = 2**63


def seeded_generator(seed: int) -> torch.Generator:
    """A CPU generator seeded ``seed`` (mod 2**63): the same draws on every device, and no
    per-stream kernel launch on a GPU."""
    gen = torch.Generator(device="cpu")
    gen.manual_seed(seed % _SEED_MOD)
    return gen


@dataclass
class SampledStream:
    """One (request, sample i) decode stream and its result so far."""

    request: int
    index: int  # the sample's index within its request
    prompt_len: int
    temperature: float
    top_k: int
    top_p: float
    max_tokens: int
    stop: tuple[str, ...]
    generator: torch.Generator
    stop_ids: frozenset[int] = frozenset()
    #: False: the model's EOS ids do not end this stream (a request's ``stop_at_eos``)
    stop_at_eos: bool = True
    #: top-k alternatives to record per sampled token (a request's ``topk_sample_logprobs``)
    topk: int = 0
    #: per sampled token: its top-``topk`` (id, logprob) pairs, likeliest first
    topk_rows: list[list[tuple[int, float]]] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    stop_reason: StopReason | None = None
    _draws: list[float] = field(default_factory=list)

    def next_uniform(self) -> float:
        """The stream's next U[0, 1) draw. Drawn ``DRAW_CHUNK`` at a time: a CPU generator's
        ``rand(n)`` yields exactly the values of ``n`` successive ``rand(1)`` calls."""
        if not self._draws:
            self._draws = torch.rand(DRAW_CHUNK, generator=self.generator).tolist()[::-1]
        return self._draws.pop()

    def put_back(self, unused: list[float]) -> None:
        """Return draws taken by :meth:`next_uniform` but not used, oldest first: the next
        calls give them again, in order (the static decoder's window cut short by a join)."""
        self._draws.extend(reversed(unused))


def as_sequence(stream: SampledStream) -> SampledSequence:
    """A finished decode stream as the port's sequence; ``topk_logprobs`` when asked."""
    assert stream.stop_reason is not None  # ``BatchSampler.run`` finishes every stream
    top = None
    if stream.topk:
        top = [[TopLogprob(t, v) for t, v in row] for row in stream.topk_rows]
    return SampledSequence(stream.tokens, stream.logprobs, stream.stop_reason, top)
