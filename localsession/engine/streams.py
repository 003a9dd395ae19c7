"""One decode stream of the batched sampler: a (request, sample i) pair and its result so far.

Shared by the sampler (:mod:`localsession.engine.sampling`) and the continuous-batching
helpers (:mod:`localsession.engine.batch_join`), so neither imports the other's module.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from localsession.port_results import StopReason

#: Uniforms drawn per generator call (see ``SampledStream.next_uniform``).
DRAW_CHUNK = 32


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
