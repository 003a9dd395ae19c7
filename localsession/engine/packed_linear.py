"""Float32 CPU inference products on weights packed once for MKL: a decode step's matmuls.

A decode step multiplies a few rows (one per live stream, 1 to 128) by every weight of the
model. For each call, MKL's ``sgemm`` first copies the weight into the blocked layout its
kernel reads. With a few rows that copy is a large share of the product. MKL can pack a
weight once (``cblas_sgemm_pack``) and multiply many times from the packed copy
(``cblas_sgemm_compute``); torch exposes the pair as ``torch.ops.mkl._mkl_reorder_linear_weight``
and ``torch.ops.mkl._mkl_linear`` (inductor's CPU weight-freezing pass emits them).

Measured on the 2-vCPU Intel Xeon (AVX-512, AMX) the benchmarks ran on, SmolLM2-135M's
products summed over one decode step (30 layers' seven matmuls and the 49,152-word head),
in ms, medians of interleaved rounds:

==========  ========  ======  ==========  ======  =======
rows        layers    packed  head        packed  overall
==========  ========  ======  ==========  ======  =======
8           46.3      21.4    10.1        6.3     2.0×
16          65.4      31.8    9.2         7.4     1.9×
64          112.5     81.4    28.8        19.2    1.4×
128         158.5     146.9   47.3        44.8    1.1×
==========  ========  ======  ==========  ======  =======

Above ~128 rows packing gains nothing, so :func:`product` takes a product when

- it runs inside a decode step (:func:`decoding`, which the static and the dynamic decode
  loops enter for each step) and nothing needs its gradient. Prefill, ``forward``,
  ``compute_logprobs`` and training keep their kernels, so a ``forward``'s loss still
  equals ``forward_backward``'s bit for bit;
- input and weight are float32 on the CPU, not traced by ``torch.compile``;
- the input has at most :data:`MAX_ROWS` rows and the weight at least :data:`MIN_WEIGHT`
  elements (smaller ones gain nothing);
- packing is on (:func:`configure`) and the weight's copy fits the budget.

**Packed copies.** One per weight, made at its first packed product and kept while the
weight lives (the cache holds a weak reference). A weight changed in place (a merged
decoding copy re-merged for another snapshot, merged.py) bumps torch's version counter and
is packed again at its next product. A copy is about as big as its weight, so copies are
bounded by ``LOCALSESSION_PACKED_CACHE_MB`` (``EngineOptions.packed_cache_mb``, default
1024) over the whole process: a weight whose copy does not fit runs unpacked. Copies are
never evicted for others: a forward touches every weight in turn, so an LRU smaller than the
model would repack every weight at every step.

MKL takes a row-count hint when packing (:data:`PACK_HINT`); the layout it picks is stored
in the packed buffer, and products of other row counts read it from there. The probe checks
exactly that before packing is used: products of several row counts from one packed weight
must agree with ``F.linear`` (they agree to float rounding, ~1e-6, not bit for bit).

**The decision** (:func:`configure`, once per process): packing needs MKL and oneDNN (the
packed buffer is a oneDNN tensor) in this torch; then a probe times the packed product
against the unpacked kernel in force (``kernel``: MKL's or oneDNN's, fast_linear.py) on a
decode step's products, interleaved, and packs when the geometric mean of the two median
speedups is at least :data:`PROBE_MARGIN`. A budget of 0 turns packing off.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from functools import partial

import torch
import torch.nn.functional as F

from localsession.engine.probe_timing import geomean_speedup

PACKED_ENV = "LOCALSESSION_PACKED_CACHE_MB"
#: Most input rows a packed product takes (more: packing gains nothing).
MAX_ROWS = 128
#: Fewest weight elements packed (a builtin tiny model's MLP weights, 128 × 512, are packed).
MIN_WEIGHT = 2**16
#: The row count MKL is told to pack for (best or level with the best from 4 to 128 rows).
PACK_HINT = 64
#: How much faster the packed products must be in the probe to be used.
PROBE_MARGIN = 1.05
#: The probe's products (rows × out × in): a decode step's MLP matmul at 64 and 16 streams.
PROBE_SHAPES = ((64, 1536, 576), (16, 1536, 576))
#: Row counts whose products from one packed weight must agree with ``F.linear``.
CHECK_ROWS = (1, 7, 16, PACK_HINT, MAX_ROWS)
PROBE_ROUNDS = 7

Kernel = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
_log = logging.getLogger("localsession.engine.packed_linear")


@dataclass
class _Packed:
    """A weight's packed copy, valid while the weight is alive at ``version``."""

    weight: weakref.ref[torch.Tensor]
    version: int
    packed: torch.Tensor
    nbytes: int


_lock = threading.RLock()  # a copy can be freed (and forgotten) while one is made
#: id(weight) -> its packed copy
_cache: dict[int, _Packed] = {}
_held = 0  # bytes of every packed copy in the cache
_budget = 0  # bytes; 0: packing off
#: (whether packing pays here, why): probed once per process
_verdict: tuple[bool, str] | None = None
#: whether the calling thread is in a decode step (:func:`decoding`)
_decoding: ContextVar[bool] = ContextVar("localsession_packed_decoding", default=False)


@contextmanager
def decoding() -> Iterator[None]:
    """Products in this block are a decode step's: packed where the rule allows."""
    token = _decoding.set(True)
    try:
        yield
    finally:
        _decoding.reset(token)


def available() -> bool:
    """Whether this torch has MKL's packed product (MKL and oneDNN both built in)."""
    return (
        torch.backends.mkl.is_available()
        and torch.backends.mkldnn.is_available()
        and hasattr(torch.ops.mkl, "_mkl_linear")
    )


def pack(weight: torch.Tensor) -> torch.Tensor:
    """``weight`` ``[out, in]`` packed for MKL (an opaque oneDNN tensor)."""
    return torch.ops.mkl._mkl_reorder_linear_weight(weight.detach(), PACK_HINT)  # type: ignore[no-any-return]


def packed_product(
    x: torch.Tensor, packed: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None
) -> torch.Tensor:
    """``x @ weight.T + bias`` from ``packed`` (:func:`pack` of ``weight``); ``x`` ``[..., in]``."""
    rows = x.numel() // x.shape[-1]
    return torch.ops.mkl._mkl_linear(x.contiguous(), packed, weight, bias, rows)  # type: ignore[no-any-return]


def probe(kernel: Kernel = F.linear) -> tuple[bool, str]:
    """(whether packed products should be used here, why): MKL's packed product must exist,
    agree with ``F.linear`` at every row count of :data:`CHECK_ROWS` from one packed weight,
    and be :data:`PROBE_MARGIN` times faster than ``kernel`` on :data:`PROBE_SHAPES`."""
    if not available():
        return False, "this torch has no MKL packed GEMM"
    gen = torch.Generator().manual_seed(0)
    _, n, k = PROBE_SHAPES[0]
    w_NK = torch.randn(n, k, generator=gen) / k**0.5
    try:
        packed = pack(w_NK)
        for rows in CHECK_ROWS:
            x_MK = torch.randn(rows, k, generator=gen)
            got_MN = packed_product(x_MK, packed, w_NK, None)
            if not torch.allclose(got_MN, F.linear(x_MK, w_NK), rtol=1e-4, atol=1e-5):
                return False, f"MKL's packed product disagrees with F.linear at {rows} rows"
    except (RuntimeError, AttributeError) as exc:  # an op missing from this build
        return False, f"MKL's packed product failed: {exc}"
    trials = []
    for rows, n, k in PROBE_SHAPES:
        x_MK = torch.randn(rows, k, generator=gen)
        w_NK = torch.randn(n, k, generator=gen) / k**0.5
        packed = pack(w_NK)
        trials.append(
            (partial(kernel, x_MK, w_NK), partial(packed_product, x_MK, packed, w_NK, None))
        )
    speedup = geomean_speedup(trials, PROBE_ROUNDS)
    return speedup >= PROBE_MARGIN, f"packed {speedup:.2f}x unpacked on a decode step's products"


def configure(budget_bytes: int, kernel: Kernel = F.linear) -> bool:
    """Set the packed copies' budget (``EngineOptions.packed_cache_mb``; 0: off) and, the first
    time it is not 0, probe whether packing pays against ``kernel``. Returns whether packed
    products are on. A smaller budget keeps the copies already made."""
    global _budget, _verdict
    with _lock:
        if budget_bytes > 0 and _verdict is None:
            _verdict = probe(kernel)
            use, why = _verdict
            _log.info("decode products: %s (%s)", "MKL packed" if use else "unpacked", why)
        _budget = budget_bytes if _verdict is not None and _verdict[0] else 0
        return _budget > 0


def held_bytes() -> int:
    """Bytes of packed copies alive (tests, logs)."""
    return _held


def _forgetter(key: int) -> Callable[[weakref.ref[torch.Tensor]], None]:
    """The callback that drops the copy under ``key`` when its weight is freed."""

    def forget(_: weakref.ref[torch.Tensor]) -> None:
        global _held
        with _lock:
            entry = _cache.get(key)
            if entry is not None and entry.weight() is None:
                del _cache[key]
                _held -= entry.nbytes

    return forget


def _packed_for(weight: torch.Tensor) -> torch.Tensor | None:
    """``weight``'s packed copy, made or remade now if needed; None when it does not fit."""
    global _held
    try:
        version = weight._version
    except RuntimeError:  # an inference-mode tensor has no version: in-place changes unseen
        return None
    key = id(weight)
    entry = _cache.get(key)
    if entry is not None and entry.weight() is weight and entry.version == version:
        return entry.packed
    with _lock:
        entry = _cache.pop(key, None)
        if entry is not None:
            _held -= entry.nbytes
        nbytes = weight.numel() * weight.element_size()
        if _held + nbytes > _budget:
            return None
        packed = pack(weight)
        _cache[key] = _Packed(weakref.ref(weight, _forgetter(key)), version, packed, nbytes)
        _held += nbytes
        return packed


def product(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None
) -> torch.Tensor | None:
    """``F.linear(x, weight, bias)`` from ``weight``'s packed copy where the module docstring's
    rule routes it, else None (the caller runs its own kernel)."""
    if _budget == 0 or weight.numel() < MIN_WEIGHT or not _decoding.get():
        return None  # first: the cheapest tests, and the ones most products fail
    if x.numel() > MAX_ROWS * x.shape[-1]:
        return None
    if x.dtype != torch.float32 or weight.dtype != torch.float32 or x.device.type != "cpu":
        return None
    if bias is not None and bias.dtype != torch.float32:
        return None
    if torch.is_grad_enabled() and (
        x.requires_grad or weight.requires_grad or (bias is not None and bias.requires_grad)
    ):
        return None
    if torch.compiler.is_compiling() or x.numel() == 0:
        return None
    packed = _packed_for(weight)
    return None if packed is None else packed_product(x, packed, weight, bias)
