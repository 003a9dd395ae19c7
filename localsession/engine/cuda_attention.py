"""Keep CUDA attention off cuDNN's fused kernel, whose plan is rebuilt for every new shape.

On a Hopper GPU torch's ``scaled_dot_product_attention`` (which transformers' ``sdpa``
attention calls) prefers cuDNN's fused attention for bf16 with a mask. cuDNN builds an
execution plan on the CPU for each new shape (batch, heads, query and key lengths) and
caches it. A decode step's key length is new at every step, and RL batches rarely repeat
their lengths, so most calls pay for a plan. Profiled on an H200 (torch 2.11, cu130), a 0.5B
model decoding 128 streams spent 918 of 1,479 ms of CPU time in ``_cudnn_attention_forward``
over 24 steps, while the GPU ran for 85 ms.

Measured there (bench/gpu_check.py's models; *cold*: a shape not seen before, *warm*: the
same call again), cuDNN on against off:

- decoding 128 streams × 64 tokens: 1,030 and 1,674 tok/s cold against 5,065 and 6,143;
  warm about equal (6,215 and 6,128 against 4,848 and 6,329);
- a 0.5B training step of 8 × ~1000 tokens: 368-1,353 ms cold against 188-236; warm equal
  (184-207 against 208-214 ms);
- a 1.1B shared-prefix step (packed rows, block mask, 8 prompts × 8 of ~500 + 128 tokens):
  533 ms cold against 418; warm cuDNN is faster, 365-378 ms against 415-424. gpu_check's
  fixed-shape row reads 114k tok/s with cuDNN and 97k without;
- gpu_check's sampling row: 1,589 tok/s with cuDNN, 3,786 without.

So cuDNN only wins a loop that repeats one shape; a training loop of fixed, packed shapes can
turn it back on.

``LOCALSESSION_CUDNN_ATTENTION`` (``EngineOptions.cudnn_attention``, checked with the other
options before any engine starts) chooses:

- ``off`` (the default): ``torch.backends.cuda.enable_cudnn_sdp(False)``, so SDPA takes its
  flash or memory-efficient kernel, which need no plan. The flag is process-wide: once a
  CUDA engine has started, the rest of the process runs SDPA without cuDNN as well.
- ``on``: torch's own choice, cuDNN included.

Only CUDA engines touch the flag.
"""

from __future__ import annotations

import logging

import torch

CUDNN_ATTENTION_ENV = "LOCALSESSION_CUDNN_ATTENTION"

_log = logging.getLogger("localsession.engine.cuda_attention")


def configure(device: torch.device, cudnn: bool) -> None:
    """Apply the choice ``cudnn`` (``EngineOptions.cudnn_attention``) for an engine on
    ``device``."""
    if device.type != "cuda" or cudnn:
        return
    if torch.backends.cuda.cudnn_sdp_enabled():
        torch.backends.cuda.enable_cudnn_sdp(False)
        _log.info(
            "attention: cuDNN's fused SDPA turned off process-wide (it plans every new "
            "shape); %s=on keeps it",
            CUDNN_ATTENTION_ENV,
        )
