"""Models bigger than the device: accelerate places the base across GPU, CPU and disk.

Configured by three engine options (engine_options.py; nothing is placed unless
``LOCALSESSION_MAX_MEMORY`` is set):

- ``LOCALSESSION_MAX_MEMORY``: the budget per device, ``"0=20GiB,cpu=48GiB"`` (GPU index or
  ``cpu`` = size, accelerate's size strings). Whatever does not fit goes to disk.
- ``LOCALSESSION_DEVICE_MAP``: accelerate's strategy, ``auto`` (default), ``balanced``,
  ``balanced_low_0`` or ``sequential``.
- ``LOCALSESSION_OFFLOAD_DIR``: where disk-offloaded weights live
  (default ``<temp dir>/localsession-offload/<model hash>``).

The base is loaded with ``from_pretrained(device_map=..., max_memory=..., offload_folder=...)``;
accelerate's hooks bring each offloaded layer's weights to the execution device for its
forward and drop them after. peft then wraps the model, but it creates the LoRA weights of
disk-offloaded layers on the ``meta`` device (their base weight lives there between calls),
and backward fails. :func:`materialise_lora` gives those LoRA weights real storage on the
execution device and re-draws the seeded initialisation, so a placed session starts with
exactly the adapter an unplaced one gets and computes the same losses and gradients.
"""

from __future__ import annotations

import hashlib
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from localsession.engine_options import EngineOptions
from localsession.port import ResolvedModel

MAX_MEMORY_ENV = "LOCALSESSION_MAX_MEMORY"


@dataclass(frozen=True)
class PlacementPlan:
    """A memory budget and where overflow goes."""

    max_memory: dict[int | str, str]
    strategy: str
    offload_dir: Path

    @property
    def execution_device(self) -> torch.device:
        """Where compute runs: the first GPU in the budget, else the CPU."""
        gpus = sorted(k for k in self.max_memory if isinstance(k, int))
        return torch.device("cuda", gpus[0]) if gpus else torch.device("cpu")

    @property
    def key(self) -> str:
        """A stable text for the base pool's key."""
        budget = ",".join(f"{k}={v}" for k, v in sorted(self.max_memory.items(), key=str))
        return f"{self.strategy}:{budget}:{self.offload_dir}"


def plan(resolved: ResolvedModel, options: EngineOptions) -> PlacementPlan | None:
    """The plan ``options`` configure (``max_memory``, ``device_map``, ``offload_dir``), or
    ``None`` (load the whole model on one device)."""
    if not options.max_memory:
        return None
    if resolved.kind == "builtin":
        raise ValueError(
            f"{MAX_MEMORY_ENV} places models loaded from a directory; {resolved.name!r} is "
            f"built in and tiny: unset {MAX_MEMORY_ENV}"
        )
    folder = options.offload_dir
    tag = hashlib.sha256(str(Path(resolved.target).resolve()).encode()).hexdigest()[:16]
    scratch = Path(tempfile.gettempdir()) / "localsession-offload" / tag
    offload = Path(folder).expanduser() if folder else scratch
    budget = {int(d) if d.isdigit() else d: size for d, size in options.max_memory}
    return PlacementPlan(budget, options.device_map, offload)


def load_placed(
    resolved: ResolvedModel, dtype: torch.dtype, plan: PlacementPlan
) -> tuple[Any, Any]:
    """(model dispatched by accelerate under ``plan``, tokenizer); nothing is downloaded."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    plan.offload_dir.mkdir(parents=True, exist_ok=True)
    model = AutoModelForCausalLM.from_pretrained(
        resolved.target,
        local_files_only=True,
        dtype=dtype,
        device_map=plan.strategy,
        max_memory=plan.max_memory,
        offload_folder=str(plan.offload_dir),
    )
    tokenizer = AutoTokenizer.from_pretrained(resolved.target, local_files_only=True)
    return model, tokenizer


def offloaded_modules(model: Any) -> list[str]:
    """Names of the modules whose weights accelerate keeps off the execution device."""
    device_map = getattr(model, "hf_device_map", None) or {}
    return [name for name, where in device_map.items() if where == "disk"]


@torch.no_grad()
def materialise_lora(peft_model: Any, device: torch.device, seed: int) -> int:
    """Give every LoRA parameter left on ``meta`` real storage on ``device``; re-draw the
    seeded A matrices (B stays zero). Returns how many parameters were materialised."""
    from localsession.engine.loading import seed_lora_a

    moved = 0
    for module_name, module in peft_model.named_modules():
        if ".lora_" not in f".{module_name}.":
            continue  # the base's own offloaded weights stay with accelerate's hooks
        for name, param in list(module.named_parameters(recurse=False)):
            if param.device.type != "meta":
                continue
            fresh = torch.zeros(param.shape, dtype=param.dtype, device=device)
            module._parameters[name] = torch.nn.Parameter(fresh, requires_grad=param.requires_grad)
            moved += 1
    if moved:
        seed_lora_a(peft_model, seed)
    return moved
