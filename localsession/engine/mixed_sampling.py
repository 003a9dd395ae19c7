"""One sampling batch over several weights: each row with its own adapter.

``TorchEngine.sample_mixed`` takes (weights, request) pairs, ``weights`` a package directory
(this session's, or another's on the same base: equal ``mix_key``) or ``None`` (the base),
and decodes them all in one batch through
:class:`~localsession.engine.multi_lora.MultiLora`: every distinct adapter gets a slot (the
base is slot 0), each request's rows decode with its slot, and requests joining mid-batch
(``port.MixedAdmit``) may bring adapters the batch has not met yet. Packages are read before
the engine's lock is taken; a joiner's package is read when it is admitted, inside its
``check``, so a bad one fails that job alone. Prompt logprobs are then scored per weights on
the peft model, as ``sample`` scores them.

:class:`MixedSampling` gives ``TorchEngine`` the two members the runtime's scheduler looks
for (``mixes_weights``, ``sample_mixed``); :class:`MixedBatch` is one batch's bookkeeping.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import torch

from localsession.engine import scoring, thread_policy
from localsession.engine.base_pool import SharedBase
from localsession.engine.checkpoint import AdapterLayout
from localsession.engine.decoders import Decoders
from localsession.engine.loading import LoadedModel
from localsession.engine.multi_lora import MultiLora
from localsession.engine.request_checks import check_request
from localsession.engine.sampling import BatchSampler
from localsession.engine.snapshots import SnapshotCache, use_weights
from localsession.engine.streams import as_sequence
from localsession.port import MixedAdmit, SampleRequest
from localsession.port_results import SampleResult

Snapshot = dict[str, torch.Tensor] | None
#: (index, request) -> the checked request (``request_checks.check_request``)
Check = Callable[[int, SampleRequest], SampleRequest]


class MixedBatch:
    """The requests of one mixed batch, their weights and their adapters' slots."""

    def __init__(
        self,
        items: Sequence[tuple[str | None, SampleRequest]],
        snapshots: SnapshotCache,
        check: Check,
    ) -> None:
        self._snapshots, self._check = snapshots, check
        #: the checked requests (joiners appended), each one's weights and slot
        self.requests = [check(i, request) for i, (_, request) in enumerate(items)]
        self.weights = [weights for weights, _ in items]
        #: weights -> (slot key, adapter tensors), read outside the engine's lock
        self._loaded: dict[str | None, tuple[Hashable, Snapshot]] = {}
        for weights in dict.fromkeys(self.weights):
            self._load(weights)
        self._slots: list[int] = []

    def _load(self, weights: str | None) -> tuple[Hashable, Snapshot]:
        if weights not in self._loaded:
            key, snapshot = self._snapshots.get(weights)
            self._loaded[weights] = (key if key is not None else weights, snapshot)
        return self._loaded[weights]

    def snapshot(self, weights: str | None) -> Snapshot:
        """The adapter tensors of ``weights`` (None: the base)."""
        return self._load(weights)[1]

    def run(
        self, multi: MultiLora, sampler: BatchSampler, admit: MixedAdmit | None
    ) -> list[list[Any]]:
        """Decode every request in one batch (the caller holds the engine's lock); the
        stream groups per request, joiners last. The adapters are dropped at the end."""
        try:
            self._slots = [multi.slot(*self._load(w)) for w in self.weights]
            joiner = None if admit is None else self._joiner(multi, admit)
            return sampler.run(self.requests, multi.model, joiner, row_hook=self._rows(multi))
        finally:
            multi.clear()

    def _rows(self, multi: MultiLora) -> Callable[[Sequence[int]], None]:
        def rows(requests: Sequence[int]) -> None:  # each forward's rows -> their slots
            multi.set_rows([self._slots[r] for r in requests])

        return rows

    def _joiner(self, multi: MultiLora, admit: MixedAdmit) -> Callable[[], list[SampleRequest]]:
        def check(weights: str | None, request: SampleRequest) -> SampleRequest:
            checked = self._check(0, request)  # as a lone request 0 (request_checks)
            self._load(weights)  # a bad package raises here, for this job alone
            return checked

        def joiner() -> list[SampleRequest]:
            new = admit(check)
            for weights, request in new:
                self.requests.append(request)
                self.weights.append(weights)
                self._slots.append(multi.slot(*self._load(weights)))
            return [request for _, request in new]

        return joiner

    def results(
        self,
        grouped: list[list[Any]],
        score: Callable[[Snapshot, list[tuple[SampleRequest, SampleResult]]], list[SampleResult]],
    ) -> list[SampleResult]:
        """One result per request; ``score(snapshot, [(request, result)])`` returns those
        results with the prompt logprobs their requests ask for, one call per weights."""
        responses = [SampleResult([as_sequence(s) for s in streams]) for streams in grouped]
        for weights in dict.fromkeys(self.weights):
            wanted = [
                i
                for i, req in enumerate(self.requests)
                if self.weights[i] == weights and scoring.asks_prompt_scores(req)
            ]
            if wanted:
                pairs = [(self.requests[i], responses[i]) for i in wanted]
                for i, scored in zip(wanted, score(self.snapshot(weights), pairs), strict=True):
                    responses[i] = scored
        return responses


class MixedSampling:
    """``TorchEngine``'s multi-adapter sampling (the engine's own state, read here)."""

    _mutex: threading.Lock
    _threads: int | None
    _loaded: LoadedModel
    _adapter: dict[str, torch.nn.Parameter]
    _snapshots: SnapshotCache
    _decoders: Decoders
    _sampler: BatchSampler
    _token_bytes: int
    _released: bool
    max_positions: int | None
    _shared: SharedBase | None
    _layout: AdapterLayout
    _check_open: Callable[[], None]
    _trim: Callable[[int], None]

    @property
    def mixes_weights(self) -> bool:
        """Whether ``sample_mixed`` may be given several weights (multi_lora.can_mix)."""
        return not self._released and self._decoders.can_mix

    @property
    def mix_key(self) -> Hashable | None:
        """Engines with equal keys may sample each other's packages in one batch: one
        shared base (base_pool.py) and one set of adapted modules (any rank and alpha: a
        package of another reads as ``snapshots.ForeignSnapshot``). None: mix with none."""
        if not self.mixes_weights or self._shared is None:
            return None
        return (id(self._shared), frozenset(self._layout.names))

    def sample_mixed(
        self, items: list[tuple[str | None, SampleRequest]], admit: MixedAdmit | None = None
    ) -> list[SampleResult]:
        """(weights, request) pairs as one batch, each row with its own adapter, joined by
        ``admit``'s pairs (port.MixedAdmit). Where ``mixes_weights`` does not hold (DoRA),
        each weights runs as a batch of its own, in turn, and ``admit`` is not called."""
        self._check_open()
        if not self._decoders.can_mix:
            return self._one_weights_at_a_time(items)

        def check(i: int, request: SampleRequest) -> SampleRequest:
            return check_request(i, request, self._loaded.vocab_size, self.max_positions)

        batch = MixedBatch(items, self._snapshots, check)
        if not batch.requests:
            return []
        m = self._loaded

        def score(
            snapshot: Snapshot, pairs: list[tuple[SampleRequest, SampleResult]]
        ) -> list[SampleResult]:
            with use_weights(m.model, self._adapter, snapshot):  # as ``sample`` scores
                return [scoring.with_prompt_scores(r, m.model, q, m.device) for q, r in pairs]

        with self._mutex, torch.no_grad(), thread_policy.scope(self._threads):
            grouped = batch.run(self._decoders.multi(), self._sampler, admit)
            responses = batch.results(grouped, score)
        streams = sum(r.num_samples * (len(r.prompt) + r.max_tokens) for r in batch.requests)
        self._trim(streams * self._token_bytes)
        return responses

    def _one_weights_at_a_time(
        self, items: list[tuple[str | None, SampleRequest]]
    ) -> list[SampleResult]:
        sample: Callable[[str | None, list[SampleRequest]], list[SampleResult]]
        sample = self.sample  # type: ignore[attr-defined]  # the engine's
        results: list[SampleResult | None] = [None] * len(items)
        for weights in dict.fromkeys(w for w, _ in items):
            mine = [i for i, (w, _) in enumerate(items) if w == weights]
            for i, result in zip(mine, sample(weights, [items[i][1] for i in mine]), strict=True):
                results[i] = result
        return [r for r in results if r is not None]
