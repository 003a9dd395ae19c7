"""Sampling (docs/semantics.md#3): the batched KV-cache sampler.

The logit filters (temperature, top-k, top-p, the inverse-CDF draw) live in
:mod:`localsession.numerics.filters`, shared with the fakes. The sampler
decodes every (request, sample i) *stream* of a batch together: prompts are prefilled once per
request (left padding + attention mask + position ids), the KV cache is fanned out to the
request's ``num_samples`` streams, and each step feeds one token per stream through the
cache. Finished streams stay in the batch, ignored, until a quarter of the rows are finished;
then the cache is compacted once (one copy instead of one per finished stream).

Per stream, a private CPU ``torch.Generator`` seeded ``seed + i`` draws exactly one uniform
per step while the stream is live (inverse-CDF sampling), so a stream's draws never depend
on what else is in the batch (and are the same on every device). Its logits do, to float
rounding: a batch's shape changes the reduction order of the matmuls, so a draw that lands
within rounding of a token boundary can pick the neighbouring token (docs/semantics.md#3).
Generation stops at an EOS id, at one of the request's ``stop_token_ids`` (checked the step
the id is drawn, so a stopped stream costs no further decode step) or when a stop string
appears in the decoded completion (special tokens decode to nothing there, so "<bos>" never
completes the stop string "o"); the returned tokens include that last token. Reported
logprobs are log-softmax(logits / T) of the chosen token before top-k / top-p (T = 0 is
greedy and reports T = 1 values).

Streaming: a request's ``on_token`` is called with (sample index, token, logprob) as each of
its tokens is chosen, between decode steps of the whole batch, so other requests keep being
decoded alongside. :func:`add_step_hook` registers a function run after every decode step
(tests use it to slow decoding down deterministically).

Scoring given tokens (prompt, target and alternative-token logprobs, ``compute_logprobs``)
needs no decoding: :mod:`localsession.engine.scoring`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor

from localsession.engine import packed_linear, thread_policy
from localsession.engine.batch_join import Live, joinable, pad_left
from localsession.engine.decode_common import (  # noqa: F401 - add_step_hook re-exported
    COMPACT_FRACTION,
    STEP_HOOKS,
    add_step_hook,
    forward_kwargs,
    output_cache,
    request_streams,
)
from localsession.engine.decode_step import StepRunner
from localsession.engine.kv_room import make_roomy
from localsession.engine.static_decoder import StaticDecoder
from localsession.engine.streams import SampledStream
from localsession.numerics.filters import (  # noqa: F401 - re-exported for callers
    apply_temperature,
    filter_logits,
    row_argmax,
    sample_from_logits,
    top_k_filter,
    top_p_filter,
)
from localsession.port import SampleRequest, TokenCallback


class BatchSampler:
    """Decodes a batch of ``SampleRequest`` s with one shared KV cache (no grad)."""

    def __init__(
        self,
        model: torch.nn.Module,
        tokenizer: Any,
        eos_ids: frozenset[int],
        pad_id: int,
        device: torch.device,
        decode: str = "static",
        decode_compile: str = "auto",
    ) -> None:
        """``decode``: ``static`` (static_decoder.py) or ``dynamic`` (this module's loop);
        ``decode_compile``: how the static step runs (decode_step.py)."""
        if decode not in ("static", "dynamic"):
            raise ValueError(f"decode {decode!r}: use static or dynamic")
        self.decode = decode
        self._runner = StepRunner(decode_compile)
        self.model = model
        self.tokenizer = tokenizer
        self.eos_ids = eos_ids
        self.pad_id = pad_id
        self.device = device
        self.cache_kw, self.has_logits_to_keep = forward_kwargs(model)
        #: ``run``'s ``row_hook``: told each forward's rows, by request index (multi_lora.py)
        self._rows: Callable[[Sequence[int]], None] | None = None

    def _step(self, model: torch.nn.Module, **kwargs: Any) -> tuple[Tensor, Any]:
        """Run ``model``; return (last-position logits [S, V] in float32, the cache)."""
        if self.has_logits_to_keep:
            kwargs["logits_to_keep"] = 1
        out = model(use_cache=True, **kwargs)
        return out["logits"][:, -1, :].float(), output_cache(out)

    def prefill(
        self, model: torch.nn.Module, prompts: Sequence[list[int]]
    ) -> tuple[Tensor, Any, Tensor, Tensor]:
        """Left-padded prefill. -> (logits [R, V], cache, attention mask [R, L], last pos [R]).
        Called by ``_start`` here and by the static decoder (static_decoder.py)."""
        width = max(len(p) for p in prompts)
        ids = [[self.pad_id] * (width - len(p)) + p for p in prompts]
        mask = [[0] * (width - len(p)) + [1] * len(p) for p in prompts]
        ids_RL = torch.tensor(ids, dtype=torch.long, device=self.device)
        mask_RL = torch.tensor(mask, dtype=torch.long, device=self.device)
        pos_RL = (mask_RL.cumsum(-1) - 1).clamp_(min=0)
        logits_RV, cache = self._step(
            model,
            input_ids=ids_RL,
            attention_mask=mask_RL,
            position_ids=pos_RL,
            **{self.cache_kw: None},
        )
        return logits_RV, cache, mask_RL, pos_RL[:, -1]

    def finish_check(self, stream: SampledStream, token: int) -> None:
        """Set ``stream.stop_reason`` if ``token``, just appended to it, ends it: an EOS id
        (unless the request asked not to stop there) or one of its stop ids, a stop string
        in the decoded completion, or ``max_tokens`` reached. Called by ``pick`` and by the
        static decoder for each token of a window (static_decoder.py)."""
        if (stream.stop_at_eos and token in self.eos_ids) or token in stream.stop_ids:
            stream.stop_reason = "stop"
        elif stream.stop and any(
            s in self.tokenizer.decode(stream.tokens, skip_special_tokens=True)
            for s in stream.stop
            if s
        ):
            stream.stop_reason = "stop"
        elif len(stream.tokens) >= stream.max_tokens:
            stream.stop_reason = "length"

    def _start(
        self, model: torch.nn.Module, requests: Sequence[SampleRequest], rows: list[SampledStream]
    ) -> Live:
        """Prefill each request of ``rows`` once, then fan its cache out to its streams."""
        used = sorted({s.request for s in rows})
        if self._rows is not None:
            self._rows(used)
        logits_RV, cache, mask_RL, last_R = self.prefill(model, [requests[r].prompt for r in used])
        row_of = {r: k for k, r in enumerate(used)}
        index = torch.tensor([row_of[s.request] for s in rows], device=self.device)
        cache.batch_select_indices(index)
        if joinable(cache):  # decode steps then write in place (kv_room.py)
            make_roomy(cache, max(s.max_tokens for s in rows))
        return Live(
            rows=rows,
            cache=cache,
            logits_SV=logits_RV[index],
            mask_SL=mask_RL[index],
            last_S=last_R[index],
            temp_S=torch.tensor([s.temperature for s in rows], device=self.device),
            k_S=torch.tensor([s.top_k for s in rows], device=self.device),
            p_S=torch.tensor([s.top_p for s in rows], device=self.device),
        )

    def pick(self, live: Live, callbacks: Sequence[TokenCallback | None]) -> Tensor:
        """Choose and record one token for every live row of ``live`` (each row's request's
        callback told). -> chosen ids [S]. Called by the dynamic loop for every step and by
        the static decoder for a prefill's first token (static_decoder.py)."""
        chosen_S, lp_S, logprobs_SV = self._choose(
            live.logits_SV, live.rows, live.temp_S, live.k_S, live.p_S
        )
        k = min(max((s.topk for s in live.rows), default=0), logprobs_SV.shape[-1])
        tops: list[list[tuple[int, float]]] = [[] for _ in live.rows]
        if k > 0:  # the top-k of the distribution each token was drawn from
            top_vals_SK, top_ids_SK = logprobs_SV.topk(k, dim=-1)
            tops = [
                list(zip(ids, vals, strict=True))
                for ids, vals in zip(top_ids_SK.tolist(), top_vals_SK.tolist(), strict=True)
            ]
        for s, token, lp, top in zip(
            live.rows, chosen_S.tolist(), lp_S.tolist(), tops, strict=True
        ):
            if s.stop_reason is None:
                if s.topk:
                    s.topk_rows.append(top[: s.topk])
                s.tokens.append(token)
                s.logprobs.append(lp)
                self.finish_check(s, token)
                callback = callbacks[s.request]
                if callback is not None:
                    callback(s.index, token, lp)
        return chosen_S

    @torch.no_grad()
    def run(
        self,
        requests: Sequence[SampleRequest],
        model: torch.nn.Module | None = None,
        admit: Callable[[], list[SampleRequest]] | None = None,
        row_hook: Callable[[Sequence[int]], None] | None = None,
    ) -> list[list[SampledStream]]:
        """Decode every stream of every request; returns the streams grouped per request.

        ``model`` (default: the sampler's own) is what decodes: the engine passes a plain,
        adapter-merged copy of the same architecture (``merged.py``).

        ``admit`` (continuous batching): called between decode steps, it returns requests
        that arrived since (already checked); they are prefilled, choose their first token,
        and join the running batch at the next step (their caches left-padded to a common
        length, masked out). Their stream groups follow ``requests``' in the result, in
        admission order. Only a model whose KV cache is a plain full-attention
        ``DynamicCache`` admits; otherwise ``admit`` is never called.

        ``row_hook`` (multi-adapter batches, ``multi_lora.py``): called before every forward
        with the request index of each of its rows, so ``model`` can give each row its own
        adapter; rows carry their request through joins and compaction.

        With ``decode="static"`` the static decoder runs it (static_decoder.py), where the
        model allows and, with a ``row_hook``, where its step runs eager (a CPU's default);
        else this module's loop.
        """
        self._rows = row_hook
        model = model if model is not None else self.model
        if self.decode == "static" and (
            row_hook is None or self._runner.kind(self.device) == "eager"
        ):
            done = StaticDecoder(self, self._runner, row_hook).run(requests, model, admit)
            if done is not None:
                return done
        requests = list(requests)
        grouped: list[list[SampledStream]] = [[] for _ in requests]
        for s in request_streams(requests, 0):
            grouped[s.request].append(s)
        callbacks = [req.on_token for req in requests]
        decoding = [s for g in grouped for s in g if s.stop_reason is None]  # in order
        if not decoding:
            return grouped
        live = self._start(model, requests, decoding)
        can_join = admit is not None and joinable(live.cache)
        steps = 0
        while True:
            chosen_S = self.pick(live, callbacks)
            steps += 1
            for hook in list(STEP_HOOKS):
                hook(steps)
            thread_policy.revisit()  # the free cores may have changed (thread_policy.py)
            if can_join and admit is not None:
                chosen_S = self._admit(model, live, chosen_S, admit(), requests, grouped, callbacks)
            rows = live.rows
            keep = [j for j, s in enumerate(rows) if s.stop_reason is None]
            if not keep:
                return grouped
            if len(rows) - len(keep) >= COMPACT_FRACTION * len(rows):
                idx = torch.tensor(keep, device=self.device)
                live.rows = [rows[j] for j in keep]
                live.cache.batch_select_indices(idx)
                chosen_S, live.mask_SL, live.last_S = (
                    chosen_S[idx],
                    live.mask_SL[idx],
                    live.last_S[idx],
                )
                live.temp_S, live.k_S, live.p_S = live.temp_S[idx], live.k_S[idx], live.p_S[idx]
            live.mask_SL = torch.cat(
                [live.mask_SL, live.mask_SL.new_ones(len(live.rows), 1)], dim=1
            )
            live.last_S = live.last_S + 1
            if row_hook is not None:
                row_hook([s.request for s in live.rows])
            with packed_linear.decoding():
                live.logits_SV, live.cache = self._step(
                    model,
                    input_ids=chosen_S.unsqueeze(-1),
                    attention_mask=live.mask_SL,
                    position_ids=live.last_S.unsqueeze(-1),
                    **{self.cache_kw: live.cache},
                )

    def _admit(
        self,
        model: torch.nn.Module,
        live: Live,
        chosen_S: Tensor,
        new: list[SampleRequest],
        requests: list[SampleRequest],
        grouped: list[list[SampledStream]],
        callbacks: list[TokenCallback | None],
    ) -> Tensor:
        """Join ``new`` requests to the running batch ``live`` (see ``run``). -> the chosen
        ids of every row, joined rows last."""
        if not new:
            return chosen_S
        first = len(requests)
        requests.extend(new)
        callbacks.extend(req.on_token for req in new)
        streams = request_streams(new, first)
        grouped.extend([] for _ in new)
        for s in streams:
            grouped[s.request].append(s)
        decoding = [s for s in streams if s.stop_reason is None]
        if not decoding:
            return chosen_S
        joined = self._start(model, requests, decoding)
        joined_N = self.pick(joined, callbacks)
        # both caches end at the newest position; pad the shorter on the left (masked out)
        width = max(live.mask_SL.shape[1], joined.mask_SL.shape[1])
        live.mask_SL = pad_left(live.mask_SL, width)
        joined.mask_SL = pad_left(joined.mask_SL, width)
        for mine, theirs in zip(live.cache.layers, joined.cache.layers, strict=True):
            mine.keys = torch.cat(
                [pad_left(mine.keys, width, -2), pad_left(theirs.keys, width, -2)]
            )
            mine.values = torch.cat(
                [pad_left(mine.values, width, -2), pad_left(theirs.values, width, -2)]
            )
        live.rows = live.rows + decoding
        live.mask_SL = torch.cat([live.mask_SL, joined.mask_SL])
        live.last_S = torch.cat([live.last_S, joined.last_S])
        live.temp_S = torch.cat([live.temp_S, joined.temp_S])
        live.k_S = torch.cat([live.k_S, joined.k_S])
        live.p_S = torch.cat([live.p_S, joined.p_S])
        return torch.cat([chosen_S, joined_N])

    def _choose(
        self, logits_SV: Tensor, rows: list[SampledStream], temp_S: Tensor, k_S: Tensor, p_S: Tensor
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Pick one token per row. -> (token ids [S], reported logprobs [S], the log-softmax
        they were read from [S, V]).

        Finished rows (still in the batch until the next compaction) draw nothing from their
        generator; their picks are ignored.
        """
        greedy_S = temp_S <= 0
        tempered_SV = apply_temperature(logits_SV, temp_S)
        logprobs_SV = torch.log_softmax(tempered_SV, dim=-1)  # before top-k / top-p (semantics #3)
        if bool(greedy_S.all()):
            chosen_S = row_argmax(logits_SV)
        else:
            filtered_SV = top_p_filter(top_k_filter(tempered_SV, k_S), p_S)
            draws = [
                s.next_uniform() if s.stop_reason is None and s.temperature > 0 else 0.5
                for s in rows
            ]
            u_S = torch.tensor(draws, dtype=torch.float32).to(self.device)
            chosen_S = sample_from_logits(filtered_SV, u_S)
            if bool(greedy_S.any()):  # a pass over the logits only where a row is greedy
                chosen_S = torch.where(greedy_S, row_argmax(logits_SV), chosen_S)
        lp_S = logprobs_SV.gather(-1, chosen_S.unsqueeze(-1)).squeeze(-1)
        return chosen_S, lp_S, logprobs_SV
