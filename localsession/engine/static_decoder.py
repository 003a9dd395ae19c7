"""The static decoder (``LOCALSESSION_DECODE=static``, the default since issue 56):
the batched sampler's decode loop over preallocated KV slots with a fixed-shape step
(docs/semantics.md#3).

Same contract and same results as the dynamic loop in sampling.py (``BatchSampler.run``),
which stays as the reference (``LOCALSESSION_DECODE=dynamic``): requests are prefilled as
there (left-padded, one forward per batch of prompts) and pick their first token there; then
their streams move into slots of a :class:`~localsession.engine.slot_cache.SlotCache`
(prompt first, no padding) and every decode step is
:func:`~localsession.engine.decode_step.decode_step` on the live rows padded up to their
batch-size bucket: forward, filters, seeded draw, logprobs, all on the device.

Host syncs are batched on an accelerator (on a CPU a sync costs nothing and the window is
one step, :data:`CPU_SYNC_STEPS`): the host fills a *window* of up to :data:`SYNC_STEPS`
steps with each sampled stream's next uniforms (from its own seeded CPU generator, one per
step as in the dynamic loop, so a stream's draws never depend on its batch mates), runs the
steps, then reads the window's tokens, logprobs and top logprobs in one copy and applies
them stream by stream: EOS and stop ids, stop strings, ``max_tokens``, ``on_token``
callbacks, exactly in token order. A stream that stops inside a window costs the rest of
the window's steps (its later tokens are dropped, its unused uniforms too: its generator is
not read again); a stream that continues gets its unused uniforms back. ``admit`` is asked
after every step (and after the prefill's pick, step 1); a step that admits ends the window
there, so joiners enter at the same step as in the dynamic loop. (Until the window's sync
the host does not know that every stream has ended, so ``admit`` may be asked up to
``SYNC_STEPS - 1`` steps later than the dynamic loop would stop asking; what it returns
then is decoded in this batch instead of the next.) Streams that finished are compacted out
once they are a quarter of the rows or the live rows fit a smaller bucket. When no stream
is left the slots are released.

Models whose prefilled cache is not a plain full-attention ``DynamicCache``
(``batch_join.joinable``), or whose attention is not ``sdpa`` or ``eager``, decode on the
dynamic loop instead.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import torch
from torch import Tensor

from localsession.engine import packed_linear, thread_policy
from localsession.engine.batch_join import Live, joinable
from localsession.engine.decode_common import (
    COMPACT_FRACTION,
    STEP_HOOKS,
    DecodeSampler,
    forward_kwargs,
    request_streams,
)
from localsession.engine.decode_step import StepFlags, StepKey, StepRunner, decode_step
from localsession.engine.row_state import RowState
from localsession.engine.slot_cache import SlotCache, bucket_for, columns_for, visible_for
from localsession.engine.streams import SampledStream
from localsession.port import SampleRequest, TokenCallback

#: Most decode steps between two host syncs on an accelerator.
SYNC_STEPS = 8
#: ... and on a CPU, where reading a token back costs no device sync: one, so a stream stops
#: the step it ends and callbacks see each token at once (tests set 8 to check windows).
CPU_SYNC_STEPS = 1
Admit = Callable[[], list[SampleRequest]]
RowHook = Callable[[Sequence[int]], None]
#: Attention implementations that take the 4-D mask as given.
MASKED_ATTENTION = ("sdpa", "eager")


def _base_config(model: torch.nn.Module) -> Any:
    get_base = getattr(model, "get_base_model", None)
    base = get_base() if callable(get_base) else model
    return getattr(base, "config", None)


class StaticDecoder:
    """Runs ``BatchSampler.run``'s contract on slots (module docstring)."""

    def __init__(
        self, sampler: DecodeSampler, runner: StepRunner, row_hook: RowHook | None = None
    ) -> None:
        """``row_hook``: as ``BatchSampler.run``'s (multi-adapter batches): told each step's
        rows by request before the step; only with an eager step (a captured graph or a
        compiled step would keep the rows of its capture)."""
        self.sampler, self.runner, self.device = sampler, runner, sampler.device
        self.row_hook = row_hook

    @torch.no_grad()
    def run(
        self,
        requests: Sequence[SampleRequest],
        model: torch.nn.Module,
        admit: Admit | None,
    ) -> list[list[SampledStream]] | None:
        """``BatchSampler.run`` on slots; ``None`` when this model must decode on the
        dynamic loop (nothing drawn yet)."""

        config = _base_config(model)
        attention = getattr(config, "_attn_implementation", None)
        if attention not in MASKED_ATTENTION or hasattr(model, "hf_device_map"):
            return None
        cache_kw, has_keep = forward_kwargs(model)
        dtype = next(model.parameters()).dtype
        self.call = {
            "cache_kw": cache_kw,
            "extra": {"logits_to_keep": 1} if has_keep else {},
            "dtype": dtype,
        }
        self.model = model
        self.requests = list(requests)
        self.grouped: list[list[SampledStream]] = []
        self.callbacks: list[TokenCallback | None] = []
        self.rows: list[SampledStream] = []  # slot i's stream
        self.cache: SlotCache | None = None
        self.state: RowState | None = None
        self.u_R: Tensor | None = None
        if not self._enter(self.requests, first_batch=True):
            return None
        try:
            self._loop(admit)
        finally:
            if self.cache is not None:  # free the slots now (steps refer to the cache)
                self.cache.steps.clear()
                self.cache.work.clear()
                self.cache.layers = []
            self.cache = self.state = self.u_R = None
        return self.grouped

    # -- joining ------------------------------------------------------------------------

    def _enter(self, new: list[SampleRequest], first_batch: bool = False) -> bool:
        """Prefill ``new`` requests, pick their first tokens and put their live streams in
        slots after the current rows. False (nothing drawn): the model's cache cannot."""
        sampler = self.sampler
        first = len(self.grouped)
        if not first_batch:
            self.requests.extend(new)
        streams = request_streams(new, first)
        groups: list[list[SampledStream]] = [[] for _ in new]
        for s in streams:
            groups[s.request - first].append(s)
        decoding = [s for s in streams if s.stop_reason is None]
        if first_batch:
            self._picked = bool(decoding)
        prefill = None
        if decoding:
            used = sorted({s.request for s in decoding})
            if self.row_hook is not None:
                self.row_hook(used)
            prefill = sampler.prefill(self.model, [self.requests[r].prompt for r in used])
            if first_batch and not joinable(prefill[1]):
                return False
        self.grouped.extend(groups)
        self.callbacks.extend(req.on_token for req in new)
        if prefill is None:
            return True
        logits_RV, dyn, _, _ = prefill
        self.vocab = int(logits_RV.shape[-1])
        row_of = {r: k for k, r in enumerate(used)}
        index = torch.tensor([row_of[s.request] for s in decoding], device=self.device)
        as_tensor = lambda xs, dtype: torch.tensor(xs, dtype=dtype, device=self.device)  # noqa: E731
        pick = Live(
            rows=decoding,
            cache=None,
            logits_SV=logits_RV[index],
            mask_SL=logits_RV.new_zeros(0),
            last_S=logits_RV.new_zeros(0),
            temp_S=as_tensor([s.temperature for s in decoding], torch.float32),
            k_S=as_tensor([s.top_k for s in decoding], torch.long),
            p_S=as_tensor([s.top_p for s in decoding], torch.float32),
        )
        sampler.pick(pick, self.callbacks)
        going = [j for j, s in enumerate(decoding) if s.stop_reason is None]
        if going:
            keep = index[torch.tensor(going, device=self.device)]
            self._place([decoding[j] for j in going], dyn, keep)
        return True

    def _place(self, streams: list[SampledStream], dyn: Any, index: Tensor) -> None:
        """Copy prefilled caches (``dyn``'s rows ``index``) into new slots for ``streams``."""
        n, m = len(self.rows), len(streams)
        prompts = [s.prompt_len for s in streams]
        width = max(prompts)
        columns = columns_for(width, max(s.prompt_len + s.max_tokens for s in streams))
        # the prefill is left-padded to its longest prompt, which may be a stream that ended
        # at its first token: its last ``width`` columns hold every placed stream's prompt
        layers = [
            (layer.keys[index][:, :, -width:], layer.values[index][:, :, -width:])
            for layer in dyn.layers
        ]
        if self.cache is None:
            self.cache = SlotCache(layers, bucket_for(m), columns)
            self.state = RowState(self.cache.rows, self.device)
        else:
            self._grow(bucket_for(n + m), columns)
        assert self.cache is not None and self.state is not None
        lengths = torch.tensor(prompts, device=self.device)
        self.cache.load(range(n, n + m), layers, lengths)
        self.state.write(n, streams)
        self.rows.extend(streams)

    def _grow(self, rows: int, columns: int) -> None:
        assert self.cache is not None and self.state is not None
        self.cache.grow(rows, columns, len(self.rows))
        self.state.grow(self.cache.rows)
        if self.u_R is not None and self.u_R.shape[0] < self.cache.rows:
            self.u_R = None

    # -- decoding -----------------------------------------------------------------------

    def _between(self, steps: int, admit: Admit | None) -> list[SampleRequest]:
        """What runs between two steps, as in the dynamic loop: the step hooks, the thread
        policy, ``admit``. -> the admitted requests."""

        for hook in list(STEP_HOOKS):
            hook(steps)
        thread_policy.revisit()  # the free cores may have changed (thread_policy.py)
        return admit() if admit is not None else []

    def _loop(self, admit: Admit | None) -> None:
        steps = 0
        if self._picked:  # the prefill's pick is step 1, as in the dynamic loop
            steps = 1
            pending = self._between(steps, admit)
            self._compact()
            if pending:
                self._enter(pending)
        most_steps = CPU_SYNC_STEPS if self.device.type == "cpu" else SYNC_STEPS
        while self.rows:
            assert self.cache is not None and self.state is not None
            live = [s for s in self.rows if s.stop_reason is None]
            window = min(most_steps, max(s.max_tokens - len(s.tokens) for s in live))
            need = max(
                min(s.prompt_len + len(s.tokens) - 1 + window, s.prompt_len + s.max_tokens - 1)
                for s in live
            )
            if need + 1 > self.cache.columns:
                most = max(s.prompt_len + s.max_tokens for s in live)
                self._grow(
                    self.cache.rows,
                    columns_for(need + 1, max(need + 1, min(most, 2 * self.cache.columns))),
                )
            bucket = bucket_for(len(self.rows))
            if self.device.type == "cpu" and self.runner.kind(self.device) == "eager":
                # no fixed shape to keep: attend over the columns live rows use (padding
                # rows' outputs are dropped; column 0 keeps their mask rows non-empty)
                self.cache.visible = visible_for(self.cache, need)
            if self.u_R is None:
                self.u_R = torch.zeros(self.cache.rows, device=self.device)
            flags = StepFlags(
                sampled=any(s.temperature > 0 for s in live),
                greedy=any(s.temperature <= 0 for s in live),
                top_k=any(s.temperature > 0 and s.top_k > 0 for s in live),
                top_p=any(s.temperature > 0 and s.top_p < 1.0 for s in live),
                top_logprobs=min(max(s.topk for s in live), self.vocab),
                scaled=any(s.temperature > 0 and s.temperature != 1 for s in live),
            )
            draws = self._draws(bucket, window, flags.sampled)
            key = StepKey(
                self.device.type, bucket, self.cache.columns, self.cache.generation, flags
            )
            rows_view, u_B, cache = self.state.view(bucket), self.u_R[:bucket], self.cache
            step = partial(decode_step, self.model, self.call, cache, rows_view, u_B, flags)
            outputs: list[tuple[Tensor, Tensor, Tensor, Tensor]] = []
            pending = []
            for j in range(window):
                if draws is not None:
                    u_B.copy_(draws[:, j])
                if self.row_hook is not None:  # padding rows take the first row's adapter
                    requests = [s.request for s in self.rows]
                    self.row_hook(requests + requests[:1] * (bucket - len(requests)))
                with packed_linear.decoding():
                    chosen, lp, top_v, top_i = self.runner.run(key, cache, step, rows_view)
                outputs.append((chosen.clone(), lp.clone(), top_v.clone(), top_i.clone()))
                steps += 1
                pending = self._between(steps, admit)
                if pending:
                    break
            self._apply(outputs, window)
            self._compact()
            if pending:
                self._enter(pending)

    def _draws(self, bucket: int, window: int, sampled: bool) -> Tensor | None:
        """Each live sampled row's next ``window`` uniforms ``[bucket, window]`` on the
        device (0.5 elsewhere: unused); None when no row samples."""
        self._taken: dict[int, list[float]] = {}
        if not sampled:
            return None
        unused = [0.5] * window
        u: list[list[float]] = [unused] * bucket
        for i, s in enumerate(self.rows):
            if s.stop_reason is None and s.temperature > 0:
                self._taken[i] = u[i] = [s.next_uniform() for _ in range(window)]
        # one host-to-device copy (a tensor per row cost ~4% of a small model's step)
        return torch.tensor(u, dtype=torch.float32).to(self.device)

    def _apply(self, outputs: list[tuple[Tensor, Tensor, Tensor, Tensor]], window: int) -> None:
        """Record a window's tokens stream by stream (module docstring)."""
        n, done = len(self.rows), len(outputs)
        ids = torch.stack([o[0][:n] for o in outputs], dim=1).tolist()  # [n, done]
        lps = torch.stack([o[1][:n] for o in outputs], dim=1).tolist()
        k = outputs[0][2].shape[-1]
        if k:
            top_v = torch.stack([o[2][:n] for o in outputs], dim=1).tolist()  # [n, done, K]
            top_i = torch.stack([o[3][:n] for o in outputs], dim=1).tolist()
        finished: list[int] = []
        for i, s in enumerate(self.rows):
            if s.stop_reason is not None:
                continue
            callback = self.callbacks[s.request]
            used = 0
            for j in range(done):
                token, lp = ids[i][j], lps[i][j]
                if s.topk:
                    s.topk_rows.append(list(zip(top_i[i][j], top_v[i][j], strict=True))[: s.topk])
                s.tokens.append(token)
                s.logprobs.append(lp)
                used += 1
                self.sampler.finish_check(s, token)
                if callback is not None:
                    callback(s.index, token, lp)
                if s.stop_reason is not None:
                    finished.append(i)
                    break
            if s.stop_reason is None and i in self._taken:
                # the window was cut short (a join): unused uniforms go back, in order
                s.put_back(self._taken[i][used:])
        assert self.state is not None
        for name in ("pos", "last_pos"):  # finished rows write column 0 of their own slot
            self.state.set(name, finished, 0)

    def _compact(self) -> None:
        """Drop finished rows once they are a quarter of the rows, or the live rows fit a
        smaller bucket (each compaction copies the live rows' slots once)."""

        if self.cache is None or self.state is None:
            return  # no stream has reached the slots
        keep = [i for i, s in enumerate(self.rows) if s.stop_reason is None]
        n = len(self.rows)
        if len(keep) == n:
            return
        if keep and n - len(keep) < COMPACT_FRACTION * n and bucket_for(len(keep)) == bucket_for(n):
            return
        if keep:
            index = torch.tensor(keep, device=self.device)
            self.cache.keep(index)
            self.state.keep(index)
        self.rows = [self.rows[i] for i in keep]
