"""What both decode loops share (``sampling.py``'s dynamic loop and ``static_decoder.py``):
the compaction threshold, the step hooks tests use to hold a decoder between steps, how a
model names its KV-cache argument, a batch's seeded streams, and what the static decoder
calls of the sampler (:class:`DecodeSampler`). A leaf: it imports neither loop."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import torch
from torch import Tensor

from localsession.engine.batch_join import Live
from localsession.engine.streams import SampledStream, seeded_generator
from localsession.port import SampleRequest, TokenCallback

#: Finished streams stay in the batch (their outputs ignored) until this fraction of rows
#: is finished; then the KV cache is compacted once, instead of once per finished stream.
COMPACT_FRACTION = 0.25

#: Functions run after every decode step with the number of steps done (``add_step_hook``).
STEP_HOOKS: list[Callable[[int], None]] = []


def add_step_hook(hook: Callable[[int], None]) -> Callable[[], None]:
    """Run ``hook(steps_done)`` after each decode step of every batch (a test seam: a hook
    that blocks holds the decoder there). Returns a function that removes it."""
    STEP_HOOKS.append(hook)
    return lambda: STEP_HOOKS.remove(hook)


def forward_kwargs(model: torch.nn.Module) -> tuple[str, bool]:
    """(name of the KV-cache kwarg, whether ``logits_to_keep`` is accepted) for a model."""
    base: Any = model
    get_base = getattr(model, "get_base_model", None)
    if callable(get_base):
        base = get_base()
    params = inspect.signature(base.forward).parameters
    cache_kw = "cache" if "cache" in params else "past_key_values"
    return cache_kw, "logits_to_keep" in params


def output_cache(out: Any) -> Any:
    """The KV cache a model's forward returned, under either of its names."""
    return out["cache"] if "cache" in out else out["past_key_values"]


def request_streams(requests: Sequence[SampleRequest], first: int) -> list[SampledStream]:
    """The (request, sample i) streams of ``requests``, numbered from request ``first``; a
    request with ``max_tokens <= 0`` gets streams already finished (``"length"``)."""
    streams: list[SampledStream] = []
    for r, req in enumerate(requests, start=first):
        for i in range(req.num_samples):
            # CPU generators: the same stream on every device, and no per-stream kernel
            # launch on a GPU (the draws move to the device in one copy per step).
            gen = seeded_generator(req.seed + i)
            streams.append(
                SampledStream(
                    r,
                    i,
                    len(req.prompt),
                    req.temperature,
                    req.top_k,
                    req.top_p,
                    req.max_tokens,
                    tuple(req.stop),
                    gen,
                    frozenset(req.stop_token_ids),
                    req.stop_at_eos,
                    max(0, req.topk_sample_logprobs),
                )
            )
            if req.max_tokens <= 0:
                streams[-1].stop_reason = "length"
    return streams


class DecodeSampler(Protocol):
    """What the static decoder (static_decoder.py) calls of ``sampling.BatchSampler``, so
    neither loop's module imports the other's: the prefill and first pick it shares with the
    dynamic loop, and the stop check it applies to each token of a window."""

    device: torch.device

    def prefill(
        self, model: torch.nn.Module, prompts: Sequence[list[int]]
    ) -> tuple[Tensor, Any, Tensor, Tensor]:
        """Left-padded prefill. -> (logits [R, V], cache, attention mask [R, L], last pos [R])."""
        ...

    def pick(self, live: Live, callbacks: Sequence[TokenCallback | None]) -> Tensor:
        """Choose and record one token for every live row of ``live``. -> chosen ids [S]."""
        ...

    def finish_check(self, stream: SampledStream, token: int) -> None:
        """Set ``stream.stop_reason`` if ``token`` (just appended) ends it."""
        ...
