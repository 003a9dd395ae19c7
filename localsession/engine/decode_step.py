"""One static-shape decode step, and how it runs: eager, inductor-compiled or a CUDA graph.

:func:`decode_step` feeds each row's ``ids`` at column ``pos`` through the model over a
:class:`~localsession.engine.slot_cache.SlotCache`, then, on the device and with no host
sync, picks the next token of every row exactly as the dynamic sampler's ``_choose`` does
(temperature, top-k, top-p, the inverse-CDF draw from the given uniforms, greedy rows by
argmax), reads its logprob and the top-K logprobs, and advances ``ids`` and ``pos`` in place
(``pos`` stops at ``last_pos``). Everything it reads has a fixed shape for a
:class:`StepKey`: the bucket (rows), the cache's columns and generation, and the
:class:`StepFlags` (which filters any live row needs: a filter no row needs is skipped, as
the dynamic sampler skips it). Outside ``torch.compile`` a step computes its ``[B, V]``
passes (tempering, log-softmax, the CDF) in buffers kept on the cache (``SlotCache.work``).
Fresh ones were handed back to the system by the allocator and faulted in again: 59 to
580 thousand page faults in a 64-row burst of 64 tokens on SmolLM2 (49,152 words), against
a few hundred with the buffers kept, and the picks' time fell from 0.50-0.63 to 0.36-0.49 s
of the ~10 s burst (five paired rounds in one process).

:class:`StepRunner` keeps one runnable step per key (``LOCALSESSION_DECODE_COMPILE``):

- ``off``: eager everywhere;
- ``on``: a CUDA graph per key on CUDA (captured the first time the key is met: two warm-up
  steps and a capture, whose side effects are undone), inductor (``torch.compile``) on a CPU;
- ``probe``: CUDA graphs on CUDA; on a CPU inductor only where a one-time probe
  (:func:`cpu_probe`: the first step met, compiled, timed against eager, interleaved) finds
  it at least :data:`PROBE_MARGIN` times faster. Decided and logged once per process.
- ``auto`` (the default): CUDA graphs on CUDA, eager on a CPU. Inductor's first compile of
  the step is what makes the CPU default eager: on the built-in tiny model it took 98 s on a
  busy 2-core box for a step of 7.7 ms against 10.8 ms eager (docs/device.md), a cost a
  first ``sample`` call should not pay unasked. The CPU choice is logged once.

A captured graph is replayed once against an eager step on the same inputs
(:func:`check_replay`) before it decodes. A capture or compile that fails, or a graph that
does not reproduce the eager step, falls back to eager for the process, logged once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from localsession.engine.probe_timing import interleaved_medians
from localsession.engine.slot_cache import SlotCache, mask_for
from localsession.numerics.filters import (
    row_argmax,
    sample_from_logits,
    top_k_filter,
    top_p_filter,
)

_log = logging.getLogger("localsession.engine.decode_step")
#: How much faster the compiled step must be in the CPU probe to be used.
PROBE_MARGIN = 1.1
#: How many keys' kinds a runner remembers (``StepRunner.kinds``).
KINDS_KEPT = 64
#: ``LOCALSESSION_DECODE_COMPILE`` values.
MODES = ("auto", "probe", "on", "off")
#: Timed rounds per kernel in the CPU probe (median).
PROBE_ROUNDS = 5


@dataclass(frozen=True)
class StepFlags:
    """What the live rows of a step need: any sampled row, any greedy row, any top-k,
    any top-p, how many top logprobs to report (0: none), and any sampled row whose
    temperature is not 1 (``scaled``; else the logits are used as dividing by 1 leaves
    them, without a pass over ``[B, V]``)."""

    sampled: bool
    greedy: bool
    top_k: bool
    top_p: bool
    top_logprobs: int
    scaled: bool = True


@dataclass(frozen=True)
class StepKey:
    """One compiled step / captured graph: everything that fixes its shapes."""

    device: str
    bucket: int
    columns: int
    generation: int
    flags: StepFlags


Outputs = tuple[Tensor, Tensor, Tensor, Tensor]


Work = dict[tuple[str, torch.Size], Tensor]


def _buffer(work: Work | None, name: str, like: Tensor) -> Tensor | None:
    """``work``'s float32 buffer ``name`` shaped like ``like``, made at first use. On a CPU
    buffers of another shape (a bucket the batch has left) go then. Elsewhere they stay as
    long as the cache: a CUDA graph captured for that bucket writes them at every replay, and
    the graph lives as long as the cache (freed, their memory could be another tensor's)."""
    if work is None:
        return None
    key = (name, like.shape)
    found = work.get(key)
    if found is None:
        if like.device.type == "cpu":
            for old in [k for k in work if k[1] != like.shape]:
                del work[old]
        found = work[key] = torch.empty(like.shape, dtype=torch.float32, device=like.device)
    return found


def choose(
    logits_BV: Tensor,
    rows: dict[str, Tensor],
    u_B: Tensor,
    flags: StepFlags,
    work: Work | None = None,
) -> Outputs:
    """Pick one token per row without a host sync. -> (ids [B], logprobs [B], top-K
    logprobs [B, K], their ids [B, K]); values as ``BatchSampler._choose`` gives. ``work``:
    buffers kept from step to step for the ``[B, V]`` passes (:func:`decode_step`)."""
    temp_B = rows["temp"]
    greedy_B = temp_B <= 0
    tempered_BV = logits_BV  # no live row scales: x / 1 == x exactly, skip the pass
    if flags.scaled:
        t_B = torch.where(greedy_B, torch.ones_like(temp_B), temp_B)
        tempered_BV = torch.div(
            logits_BV, t_B.unsqueeze(-1), out=_buffer(work, "tempered", logits_BV)
        )
    # before top-k / top-p
    logprobs_BV = torch.log_softmax(tempered_BV, dim=-1, out=_buffer(work, "logprobs", logits_BV))
    if flags.sampled:
        filtered_BV = tempered_BV
        if flags.top_k:
            filtered_BV = top_k_filter(filtered_BV, rows["top_k"], synced=False)
        if flags.top_p:
            filtered_BV = top_p_filter(filtered_BV, rows["top_p"], synced=False)
        chosen_B = sample_from_logits(filtered_BV, u_B, _buffer(work, "cdf", logits_BV))
        if flags.greedy:
            chosen_B = torch.where(greedy_B, row_argmax(logits_BV), chosen_B)
    else:
        chosen_B = row_argmax(logits_BV)
    lp_B = logprobs_BV.gather(-1, chosen_B.unsqueeze(-1)).squeeze(-1)
    top_vals_BK, top_ids_BK = logprobs_BV.topk(flags.top_logprobs, dim=-1)
    return chosen_B, lp_B, top_vals_BK, top_ids_BK


def decode_step(
    model: torch.nn.Module,
    call: dict[str, Any],
    cache: SlotCache,
    rows: dict[str, Tensor],
    u_B: Tensor,
    flags: StepFlags,
) -> Outputs:
    """One decode step of the ``B = len(rows["ids"])`` rows (module docstring). ``call``:
    the model's fixed keyword arguments (the cache's name, ``logits_to_keep``) and its dtype."""
    pos_B = rows["pos"]
    cache.active, cache.col_B = int(pos_B.shape[0]), pos_B
    mask = mask_for(cache, pos_B, call["dtype"])
    out = model(
        input_ids=rows["ids"].unsqueeze(-1),
        attention_mask=mask,
        position_ids=pos_B.unsqueeze(-1),
        use_cache=True,
        **{call["cache_kw"]: cache},
        **call["extra"],
    )
    logits_BV = out["logits"][:, -1, :].float()
    # eager: keep the [B, V] buffers (fresh ones of ~B * V * 4 bytes fault in every page)
    work = None if torch.compiler.is_compiling() else cache.work
    chosen_B, lp_B, top_vals_BK, top_ids_BK = choose(logits_BV, rows, u_B, flags, work)
    rows["ids"].copy_(chosen_B)
    rows["pos"].copy_(torch.minimum(pos_B + 1, rows["last_pos"]))
    return chosen_B, lp_B, top_vals_BK, top_ids_BK


def _rewinder(rows: dict[str, Tensor]) -> Callable[[], None]:
    """A function that puts ``rows`` back as they are now: a trial step (a warm-up, a probe,
    a replay check) advances ``ids`` and ``pos`` in place, and the real step must not see it."""
    saved = {name: t.clone() for name, t in rows.items()}

    def rewind() -> None:
        for name, t in rows.items():
            t.copy_(saved[name])

    return rewind


class _Graphed:
    """A step captured as a CUDA graph over fixed tensors; calling it replays the graph.
    The two warm-up steps advance ``ids`` and ``pos``: the caller puts them back."""

    def __init__(self, step: Callable[[], Outputs]) -> None:
        caller = torch.cuda.current_stream()
        stream = torch.cuda.Stream()
        stream.wait_stream(caller)
        try:
            with torch.cuda.stream(stream):
                for _ in range(2):  # warm-up: allocator and kernel choices settle
                    step()
        finally:
            caller.wait_stream(stream)
        self.graph = torch.cuda.CUDAGraph()
        try:
            # thread_local: CUDA calls of other threads (a training step beside the sampler)
            # may go on during the capture; only this thread's are checked
            with torch.cuda.graph(self.graph, capture_error_mode="thread_local"):
                self.outputs = step()
        except BaseException:
            torch.cuda.set_stream(caller)  # a capture that fails at its end leaves its stream
            raise

    def __call__(self) -> Outputs:
        self.graph.replay()
        return self.outputs


#: How far a captured graph's logprobs may stray from the eager step's in
#: :func:`check_replay` (the same kernels: only a changed reduction order may move them).
REPLAY_ATOL = 1e-3


def check_replay(
    eager: Callable[[], Outputs], made: Callable[[], Outputs], rows: dict[str, Tensor]
) -> None:
    """Raise unless ``made`` (a captured step) gives the eager step's outputs on the same
    inputs: every row's token, and its logprob and top logprobs within :data:`REPLAY_ATOL`.
    A capture that reads a stale buffer gives other tokens; it must not decode. Both runs
    start from the same rows and write the same cache column, so the rows are put back."""
    rewind = _rewinder(rows)
    want = [t.clone() for t in eager()]
    rewind()
    got = made()
    rewind()
    if not torch.equal(want[0], got[0]) or not all(
        torch.allclose(w.float(), g.float(), rtol=0, atol=REPLAY_ATOL)
        for w, g in zip(want[1:3], got[1:3], strict=True)
    ):
        raise RuntimeError("the captured step's tokens or logprobs differ from the eager step's")


#: mode -> whether the CPU step is compiled (the ``auto`` probe's result, once a process)
_cpu_choice: dict[str, bool] = {}
_failed: set[str] = set()
_lock = threading.Lock()


def cpu_probe(eager: Callable[[], Any], compiled: Callable[[], Any]) -> tuple[bool, str]:
    """(whether ``compiled`` should run, why): both run once untimed (the compile), then
    :data:`PROBE_ROUNDS` times each, interleaved; compiled wins at :data:`PROBE_MARGIN`x.
    Each run is the same step on the same inputs, so it rewrites the same cache column."""
    start = time.perf_counter()
    compiled()
    compile_s = time.perf_counter() - start
    medians = interleaved_medians({"eager": eager, "compiled": compiled}, PROBE_ROUNDS)
    e, c = medians["eager"], medians["compiled"]
    use = e >= PROBE_MARGIN * c
    why = f"step {c * 1e3:.1f} ms compiled vs {e * 1e3:.1f} ms eager, compile {compile_s:.1f} s"
    return use, why


class StepRunner:
    """Runnable steps by :class:`StepKey` for one mode (module docstring). Steps live in
    the cache's ``steps`` dict: they go when the cache does."""

    def __init__(self, mode: str) -> None:
        if mode not in MODES:
            raise ValueError(f"decode compile mode {mode!r}: use one of {', '.join(MODES)}")
        self.mode = mode
        #: how the latest keys' steps run (tests read it), at most ``KINDS_KEPT`` of them
        self.kinds: OrderedDict[StepKey, str] = OrderedDict()

    def kind(self, device: torch.device) -> str:
        """``eager``, ``graph`` or ``inductor`` for ``device`` before any probe."""
        if self.mode == "off" or self.mode in _failed:
            return "eager"
        if device.type == "cuda":
            return "graph"
        if self.mode == "auto":
            if "auto" not in _cpu_choice:
                _cpu_choice["auto"] = False
                _log.info("decode step on the CPU: eager (LOCALSESSION_DECODE_COMPILE=auto)")
            return "eager"
        if self.mode == "on" or _cpu_choice.get(self.mode):
            return "inductor"
        return "probe" if self.mode not in _cpu_choice else "eager"

    def run(
        self, key: StepKey, cache: SlotCache, step: Callable[[], Outputs], rows: dict[str, Tensor]
    ) -> Outputs:
        """Run ``step`` (the eager closure over the key's fixed tensors) as the key says."""
        fn = cache.steps.get(key)
        if fn is None:
            fn = self._make(key, step, rows)
            cache.steps[key] = fn
        return fn()  # type: ignore[no-any-return]

    def _make(
        self, key: StepKey, step: Callable[[], Outputs], rows: dict[str, Tensor]
    ) -> Callable[[], Outputs]:
        kind = self.kind(torch.device(key.device))
        made: Callable[[], Outputs] = step
        rewind = _rewinder(rows)  # trial steps (warm-ups, probes) advance ids and pos
        try:
            if kind == "graph":
                made = _Graphed(step)
                rewind()
                check_replay(step, made, rows)
            elif kind in ("inductor", "probe"):
                compiled = torch.compile(step, dynamic=False)
                if kind == "probe":
                    use, why = cpu_probe(step, compiled)
                    with _lock:
                        _cpu_choice[self.mode] = use
                    _log.info(
                        "decode step on the CPU: %s (%s)", "inductor" if use else "eager", why
                    )
                    made, kind = (compiled, "inductor") if use else (step, "eager")
                else:
                    compiled()  # compiles now, where a failure still falls back to eager
                    made = compiled
                rewind()
        except Exception as exc:  # noqa: BLE001 - any capture/compile failure: run eager
            rewind()  # a trial step may have run before the failure
            with _lock:
                _failed.add(self.mode)
            _log.warning("decode step %s failed, eager from now on: %s", kind, exc)
            made, kind = step, "eager"
        self.kinds[key] = kind
        while len(self.kinds) > KINDS_KEPT:  # a long-lived engine meets keys without end
            self.kinds.popitem(last=False)
        return made


def reset() -> None:
    """Forget the CPU probe's choice and any failure (tests)."""
    with _lock:
        _cpu_choice.clear()
        _failed.clear()
