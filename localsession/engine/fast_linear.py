"""Float32 CPU linear layers through oneDNN where it beats torch's default BLAS call.

On a CPU torch runs a float32 ``F.linear`` as an MKL ``sgemm``. On some CPUs MKL takes a
slow generic path: on the AMD EPYC (AVX-512) VMs the benchmarks run on, oneDNN's matmul
(``torch.ops.mkldnn._linear_pointwise``, which takes the dense weight as it is: no packing,
no copy kept) ran faster for SmolLM2-135M's layers, by how much depending on the host under
the VM. Per call, in microseconds, on two such hosts:

====================================  =====  ======  =====  ======
shape (rows × out × in)               MKL    oneDNN  MKL    oneDNN
====================================  =====  ======  =====  ======
64 × 1536 × 576 (a decode step)       740    317     800    600
2048 × 1536 × 576 (training forward)  22200  8800    21500  17400
2048 × 49152 × 576 (a training head)  --     --      1075k  748k
1 × 576 × 576                         20     29      --     --
====================================  =====  ======  =====  ======

oneDNN pays ~15 µs a call to set up, so a small product stays on MKL: :func:`linear` uses
oneDNN when the product has at least ``2**21`` multiply-adds or the weight at least ``2**19``
elements. Results agree with MKL's to float rounding (~1e-6 relative), not bit for bit.

``LOCALSESSION_LINEAR`` (``EngineOptions.linear``) chooses; each mode is decided once per
process, and the routing is process-wide: the mode of the engine loaded last is in force.

- ``auto`` (the default): a probe checks that the kernels agree and times them, interleaved,
  on a decode step's and a training micro-batch's product; oneDNN is used when the geometric
  mean of the two median speedups is at least 1.05×. On a CPU where MKL is as fast the probe
  keeps MKL, and with it the bit-for-bit results of plain torch. (A single best-of-5 on the
  decode shape against 1.25× read 1.25-1.40× on the second host above and flipped between
  processes, taking whole benchmark runs onto MKL.)
- ``onednn``: oneDNN wherever the size rule allows (it still needs a torch built with it).
- ``mkl`` (or ``off``): torch's own ``F.linear`` everywhere.

Whatever the mode, a decode step's products (a few rows each) go first to packed_linear.py,
which multiplies from a copy of the weight packed once for MKL where its own probe finds
that faster (``LOCALSESSION_PACKED_CACHE_MB=0`` turns it off, and
with ``mkl`` gives plain torch's results bit for bit).

Outside ``mkl`` mode an input of three or more dims that is not contiguous is copied first:
torch's matmul cannot fold a slice such as each row's last position ``[B, 1, in]`` of
``[B, T, in]`` (what transformers' ``logits_to_keep=1`` hands a prefill's head) into B rows,
and multiplies each row over the whole broadcast weight. For SmolLM2's 49,152-word head
that took 200 ms against 29 ms contiguous at 64 prompts (67 against 9 ms at 16).

Only float32 on the CPU is routed; any other dtype or device, and code being traced by
``torch.compile`` (compiled.py), runs ``F.linear``. Gradients: the input's through oneDNN on
the transposed weight (the same product shape), the weight's and the bias's by torch's own
``mm``, which reads transposed operands in place. :func:`install` re-classes a model's
``nn.Linear`` layers as :class:`FastLinear`, a subclass, so state-dict names,
``isinstance`` checks, copies and peft's wrapping all see the same layer (one under an
accelerate hook, placement.py, gets the new forward too), and lean_lora.py calls
:func:`linear` for its three matmuls.
"""

from __future__ import annotations

import logging
import threading
import types
from functools import partial
from typing import Any

import torch
import torch.nn.functional as F

from localsession.engine import packed_linear
from localsession.engine.probe_timing import geomean_speedup

LINEAR_ENV = "LOCALSESSION_LINEAR"
#: Smallest product (multiply-adds) and smallest weight (elements) oneDNN is used for.
MIN_MACS = 2**21
MIN_WEIGHT = 2**19
#: How much faster oneDNN must be in the ``auto`` probe to be chosen.
PROBE_MARGIN = 1.05

_log = logging.getLogger("localsession.engine.fast_linear")
_lock = threading.Lock()
#: mode -> (whether oneDNN is used, why), each decided once per process
_decisions: dict[str, tuple[bool, str]] = {}
#: the decision in force (the last installed mode's); None until one is made
_decision: tuple[bool, str] | None = None
#: whether the mode in force is ``mkl``: plain torch's ``F.linear``, input as given
_plain = False


def _onednn(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """``x @ weight.T + bias`` by oneDNN; ``weight`` may be a strided view (``W.t()``)."""
    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")  # type: ignore[no-any-return]


#: The probe's products (rows × out × in): a decode step's and a training micro-batch's.
PROBE_SHAPES = ((64, 1536, 576), (512, 1536, 576))
#: Interleaved timing rounds per probe shape (the median of each kernel's counts).
PROBE_ROUNDS = 7


def probe(mode: str = "auto") -> tuple[bool, str]:
    """(whether oneDNN should be used here for ``mode``, why): it must run, agree with
    ``F.linear`` and, for ``auto``, be at least :data:`PROBE_MARGIN` times faster: the
    geometric mean of its median speedups on :data:`PROBE_SHAPES`."""
    if mode == "mkl":
        return False, f"{LINEAR_ENV}={mode}"
    if mode not in ("auto", "onednn"):
        raise ValueError(f"linear mode {mode!r}: use auto, onednn or mkl")
    if not torch.backends.mkldnn.is_available():
        return False, "this torch has no oneDNN"
    gen = torch.Generator().manual_seed(0)
    operands = [
        (torch.randn(rows, k, generator=gen), torch.randn(n, k, generator=gen) / k**0.5)
        for rows, n, k in PROBE_SHAPES
    ]
    try:
        got_MN = _onednn(*operands[0], None)
    except (RuntimeError, AttributeError) as exc:  # no such op in this build, or no primitive
        return False, f"oneDNN linear failed: {exc}"
    if not torch.allclose(got_MN, F.linear(*operands[0]), rtol=1e-4, atol=1e-4):
        return False, "oneDNN linear disagrees with F.linear"
    if mode == "onednn":
        return True, f"{LINEAR_ENV}=onednn"
    trials = [(partial(F.linear, x, w), partial(_onednn, x, w, None)) for x, w in operands]
    speedup = geomean_speedup(trials, PROBE_ROUNDS)
    return speedup >= PROBE_MARGIN, f"oneDNN {speedup:.2f}x MKL on the probe"


def decision(mode: str | None = None) -> tuple[bool, str]:
    """(whether float32 CPU linears go through oneDNN, why). With ``mode``: that mode's,
    decided once per process and mode, and put in force (:func:`enabled`); without: the one
    in force (``auto``'s, decided now, when no engine has chosen yet)."""
    global _decision, _plain
    if mode is None:
        found = _decision
        if found is not None:
            return found
        mode = "auto"
    found = _decisions.get(mode)
    if found is None:
        with _lock:
            found = _decisions.get(mode)
            if found is None:
                use, why = found = probe(mode)
                _log.info("linear layers: %s (%s)", "oneDNN" if use else "torch/MKL", why)
                _decisions[mode] = found
    _decision, _plain = found, mode == "mkl"
    return found


def enabled() -> bool:
    """Whether float32 CPU linears go through oneDNN now (before any decision: ``auto``'s)."""
    return decision()[0]


def reset() -> None:
    """Forget every decision, so the next :func:`enabled` probes again (tests)."""
    global _decision, _plain
    with _lock:
        _decisions.clear()
        _decision, _plain = None, False


def _routed(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """Whether ``x @ weight.T`` goes to oneDNN: float32 CPU, big enough, not traced."""
    if x.numel() * weight.shape[0] < MIN_MACS and weight.numel() < MIN_WEIGHT:
        return False  # first: the cheapest test, and the one a small model's layers fail
    if x.dtype != torch.float32 or weight.dtype != torch.float32 or x.device.type != "cpu":
        return False
    return enabled() and not torch.compiler.is_compiling()


def _matmul_nt(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a @ b.T`` for 2-D (or leading-batched ``a``) operands, by oneDNN where routed."""
    return _onednn(a, b, None) if _routed(a, b) else a @ b.T


class _OneDnnLinear(torch.autograd.Function):
    """``linear`` by oneDNN, with the input's gradient by oneDNN too."""

    @staticmethod
    def forward(
        ctx: Any, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None
    ) -> torch.Tensor:
        ctx.save_for_backward(x if weight.requires_grad else None, weight)
        ctx.has_bias = bias is not None
        return _onednn(x, weight, bias)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(
        ctx: Any, grad_out: torch.Tensor
    ) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]:
        x, weight = ctx.saved_tensors  # x: [..., in] (None for a frozen weight); weight [out, in]
        need_x, need_w, need_b = ctx.needs_input_grad
        grad_x = _matmul_nt(grad_out, weight.T) if need_x else None  # [..., in]
        grad_w = grad_b = None
        g_MN = grad_out.reshape(-1, grad_out.shape[-1])  # [M, out]
        if need_w:  # torch's mm: it reads the transposed operands in place, where oneDNN
            # would copy both first (2.6x slower for a LoRA B's [1536, 32] gradient)
            x_MK = x.reshape(-1, x.shape[-1])  # [M, in]
            grad_w = g_MN.T @ x_MK  # [out, in]
        if need_b and ctx.has_bias:
            grad_b = g_MN.sum(0)  # [out]
        return grad_x, grad_w, grad_b


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``F.linear(x, weight, bias)``: from a packed weight where packed_linear.py routes it
    (a decode step's few rows), else by oneDNN where :func:`_routed` says so."""
    packed = packed_linear.product(x, weight, bias)
    if packed is not None:
        return packed
    if x.dim() > 2 and not _plain and not x.is_contiguous():
        # e.g. the last position [B, 1, in] of [B, T, in] (``logits_to_keep=1``): matmul
        # cannot fold it into B rows and multiplies B times over the broadcast weight
        x = x.contiguous()
    if not _routed(x, weight):
        return F.linear(x, weight, bias)
    grads = torch.is_grad_enabled() and (
        x.requires_grad or weight.requires_grad or (bias is not None and bias.requires_grad)
    )
    if grads:
        return _OneDnnLinear.apply(x, weight, bias)  # type: ignore[no-any-return]
    return _onednn(x, weight, bias)


class FastLinear(torch.nn.Linear):
    """An ``nn.Linear`` whose forward is :func:`linear`."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(x, self.weight, self.bias)


def install(model: torch.nn.Module, mode: str = "auto", packed_bytes: int | None = None) -> int:
    """Re-class every plain ``nn.Linear`` of ``model`` as :class:`FastLinear` (idempotent),
    deciding the kernel for ``mode`` (``EngineOptions.linear``) and, given ``packed_bytes``
    (``EngineOptions.packed_cache_mb``), whether decode products use packed weights first,
    so no forward pays for a probe; returns how many were."""
    decision(mode)
    if packed_bytes is not None:
        packed_linear.configure(packed_bytes, linear)
    count = 0
    for module in model.modules():
        if type(module) is torch.nn.Linear:
            module.__class__ = FastLinear
            if "_old_forward" in vars(module):  # accelerate's hook kept the old bound forward
                vars(module)["_old_forward"] = types.MethodType(FastLinear.forward, module)
            count += 1
    return count
