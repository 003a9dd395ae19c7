"""Keep CUDA attention off cuDNN's fused kernel, whose plan is rebuilt for every new shape.

On a Hopper GPU torch's ``scaled_dot_product_attention`` (which transformers' ``sdpa``
attention calls) prefers cuDNN's fused attention for bf16 with a mask. cuDNN builds an
execution plan for each new shape (batch, heads, query and key lengths) on the CPU, about
37 ms each on an H200 (torch 2.11, cu130), and caches it. A decode step's key length is new
at every step, and in RL no two batches share their lengths, so nearly every step pays it:
profiled on the H200, a 0.5B model decoding 128 streams spent 918 of 1,479 ms of CPU time in
``_cudnn_attention_forward`` over 24 steps, while the GPU ran for 85 ms; a cold 128-step
decode took 87 ms a step and the same decode repeated (plans cached) 30 ms.

``LOCALSESSION_CUDNN_ATTENTION`` chooses, read when an engine starts on CUDA:

- ``off`` (the default): ``torch.backends.cuda.enable_cudnn_sdp(False)``, so SDPA takes its
  flash or memory-efficient kernel, which need no plan. The flag is process-wide: once a
  CUDA engine has started, the rest of the process runs SDPA without cuDNN as well.
- ``on``: torch's own choice, cuDNN included.

Only CUDA engines touch the flag; on a CPU nothing is read or set.
"""

from __future__ import annotations

import logging
import os

import torch

from localsession.port import EngineConfigError

CUDNN_ATTENTION_ENV = "LOCALSESSION_CUDNN_ATTENTION"
#: What each accepted value of ``LOCALSESSION_CUDNN_ATTENTION`` means: whether cuDNN may run.
_SWITCH = {"": False, "off": False, "0": False, "on": True, "1": True}

_log = logging.getLogger("localsession.engine.cuda_attention")


def cudnn_allowed() -> bool:
    """Whether ``LOCALSESSION_CUDNN_ATTENTION`` lets SDPA use cuDNN (default: no)."""
    raw = os.environ.get(CUDNN_ATTENTION_ENV, "").strip().lower()
    if raw not in _SWITCH:
        raise EngineConfigError(
            f"{CUDNN_ATTENTION_ENV}={raw!r}: expected off (the default: flash or "
            "memory-efficient attention) or on (torch's choice, cuDNN included)"
        )
    return _SWITCH[raw]


def configure(device: torch.device) -> None:
    """Apply ``LOCALSESSION_CUDNN_ATTENTION`` for an engine starting on ``device``."""
    if device.type != "cuda" or cudnn_allowed():
        return
    if torch.backends.cuda.cudnn_sdp_enabled():
        torch.backends.cuda.enable_cudnn_sdp(False)
        _log.info(
            "attention: cuDNN's fused SDPA turned off process-wide (it plans every new "
            "shape); %s=on keeps it",
            CUDNN_ATTENTION_ENV,
        )
