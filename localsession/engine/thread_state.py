"""Whether torch's per-thread state on the calling thread is a fresh thread's.

Grad mode, ``inference_mode``, autocast, torch function or dispatch modes (a
``with torch.device(...)`` block, ``torch.set_default_device``) and the current CUDA device
and stream belong to the thread that set them. A session's worker thread has none of them;
a user's thread may. An engine call made on the user's thread (runtime/sessions/runner.py)
must compute what the worker computes, so it is made there only when this returns True.
"""

from __future__ import annotations

import torch


def plain_torch_thread() -> bool:
    """True when the calling thread has torch's defaults: grad on, no inference mode, no
    autocast, no function or dispatch mode, and (once CUDA is in use) device 0 and its
    default stream current."""
    return (
        torch.is_grad_enabled()
        and not torch.is_inference_mode_enabled()
        and not torch.is_autocast_enabled("cpu")
        and not torch.is_autocast_enabled("cuda")
        and not torch._C._is_torch_function_mode_enabled()
        and torch._C._len_torch_dispatch_stack() == 0
        and (not torch.cuda.is_initialized() or _cuda_defaults())
    )


def _cuda_defaults() -> bool:
    """Whether the calling thread's current CUDA device and stream are a new thread's."""
    return bool(
        torch.cuda.current_device() == 0
        and torch.cuda.current_stream() == torch.cuda.default_stream()
    )
