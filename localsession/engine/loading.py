"""Load a resolved base model onto a device and put a seeded LoRA adapter on it.

- Device (docs/semantics.md#2 and the engine contract): CUDA in bfloat16 when available,
  else CPU in float32; ``LOCALSESSION_DEVICE=cpu|cuda`` overrides. With ``cpu`` no CUDA API
  is touched at all.
- The base model is frozen. LoRA (peft) goes on every linear projection of the attention and
  MLP blocks (``target_modules="all-linear"``: q/k/v/o/gate/up/down on Llama; never the
  embeddings), and on the output head too when ``EngineSpec.train_unembed`` (a head tied to
  the input embedding stays tied: the adapter adds to the head's output only), with
  ``lora_dropout=0``, B = 0 (peft's default, so a new session behaves exactly like the base
  model) and A drawn from a private generator seeded with ``EngineSpec.seed`` (so equal specs
  start bit-identical on one device; the head's A is drawn last, so the other modules' A are
  the same with and without it).
- The model arrives resolved (``EngineSpec.model``, from the service's catalog); this module
  imports nothing from the runtime but the engine port. A ``"gguf"`` model is converted once
  by ``engine/gguf.py`` into a plain directory cached under ``ResolvedModel.cache_root``
  (``$LOCALSESSION_HOME/models``), then loaded like any other directory.
- The tokenizer's ``name_or_path`` is the model's canonical name (the id the session was
  created on), whatever directory it was read from.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
import transformers
from packaging.version import Version
from peft import LoraConfig, PeftModel, get_peft_model
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

from localsession.engine import fast_linear, head_logprobs, lean_lora
from localsession.engine.builtin import (
    BUILTIN_SHAPES,
    build_builtin,
    build_tokenizer,
    builtin_config,
)
from localsession.engine_options import EngineOptions
from localsession.port import EngineConfigError, EngineSpec, ResolvedModel

DEVICE_ENV = "LOCALSESSION_DEVICE"


@dataclass
class LoadedModel:
    """A base model with its trainable LoRA adapter, ready for the engine."""

    model: PeftModel
    tokenizer: Any
    device: torch.device
    dtype: torch.dtype
    vocab_size: int
    eos_ids: frozenset[int]
    pad_id: int
    #: Where the weights were loaded from (a GGUF model: its converted directory, "local").
    resolved: ResolvedModel
    #: The engine's settings this model was loaded with (engine_options.py).
    options: EngineOptions = field(default_factory=EngineOptions)


def pick_device(choice: str = "auto") -> tuple[torch.device, torch.dtype]:
    """(device, dtype) for ``choice`` (``EngineOptions.device``): ``cpu`` in float32;
    ``auto``: CUDA/bf16 when available, else CPU/float32; ``cuda`` requires CUDA."""
    if choice == "cpu":
        return torch.device("cpu"), torch.float32
    if choice not in ("auto", "cuda"):
        raise EngineConfigError(f"{DEVICE_ENV}={choice!r}: expected 'cpu' or 'cuda' (or unset)")
    if choice == "cuda" and not torch.cuda.is_available():
        raise EngineConfigError(
            f"{DEVICE_ENV}=cuda but torch sees no CUDA device; unset it or set it to 'cpu'"
        )
    if torch.cuda.is_available():
        return torch.device("cuda"), torch.bfloat16
    return torch.device("cpu"), torch.float32


def _dtype_kwarg() -> str:
    """``from_pretrained``'s dtype keyword: ``dtype`` since transformers 4.56."""
    return "dtype" if Version(transformers.__version__) >= Version("4.56") else "torch_dtype"


def model_directory(resolved: ResolvedModel) -> str:
    """The directory ``from_pretrained`` loads for a non-built-in model: the target itself,
    or for a GGUF file its converted copy (converted on first use, then cached)."""
    if resolved.kind != "gguf":
        return resolved.target
    if not resolved.cache_root:
        raise ValueError(f"GGUF model {resolved.name!r} was resolved without a cache_root")
    from localsession.engine.gguf import ensure_converted  # gguf + transformers, lazily

    return str(ensure_converted(Path(resolved.target), Path(resolved.cache_root)))


def load_tokenizer(resolved: ResolvedModel) -> Any:
    """The tokenizer of a resolved model, with ``name_or_path`` set to the model's name.

    A GGUF model's tokenizer is read from the file's own metadata (vocabulary, merges,
    special tokens, chat template) without converting the weights, so the Hub can export it
    in seconds; a session's engine reads the same tokenizer from the converted directory.
    """
    if resolved.kind == "builtin":
        return build_tokenizer(resolved.name, resolved.target)
    if resolved.kind == "gguf":
        gguf = Path(resolved.target)
        tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    else:
        tokenizer = AutoTokenizer.from_pretrained(resolved.target, local_files_only=True)
    tokenizer.name_or_path = resolved.name
    return tokenizer


def export_tokenizer(resolved: ResolvedModel, directory: Path) -> None:
    """Save the tokenizer and the model config (``AutoTokenizer.from_pretrained`` of a Hub
    id reads ``config.json`` too) of a resolved model into ``directory``; no weights."""
    config: Any
    if resolved.kind == "builtin":
        config = builtin_config(resolved.target)
    elif resolved.kind == "gguf":
        gguf = Path(resolved.target)
        config = AutoConfig.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    else:
        config = AutoConfig.from_pretrained(resolved.target, local_files_only=True)
    config.save_pretrained(str(directory))
    load_tokenizer(resolved).save_pretrained(str(directory))


def load_base(resolved: ResolvedModel, dtype: torch.dtype) -> tuple[Any, Any]:
    """(model, tokenizer) for a resolved name; nothing is downloaded."""
    model: Any
    if resolved.kind == "builtin":
        model, _ = build_builtin(resolved.target)
        return model.to(dtype=dtype), build_tokenizer(resolved.name, resolved.target)
    model = AutoModelForCausalLM.from_pretrained(
        resolved.target, local_files_only=True, **{_dtype_kwarg(): dtype}
    )
    return model, load_tokenizer(resolved)


def spec_model(spec: EngineSpec) -> ResolvedModel:
    """``spec.model``; a hand-built spec of a built-in model may leave it out."""
    if spec.model is not None:
        return spec.model
    if spec.base_model in BUILTIN_SHAPES:
        return ResolvedModel(name=spec.base_model, kind="builtin", target=spec.base_model)
    raise ValueError(
        f"EngineSpec for {spec.base_model!r} carries no resolved model: resolve the name "
        "through a model catalog (runtime/models/catalog.py) and pass it as EngineSpec.model"
    )


def eos_ids(model: Any, tokenizer: Any) -> frozenset[int]:
    ids: set[int] = set()
    for source in (getattr(model, "generation_config", None), model.config, tokenizer):
        value = getattr(source, "eos_token_id", None) if source is not None else None
        if isinstance(value, int):
            ids.add(value)
        elif isinstance(value, (list, tuple)):
            ids.update(int(v) for v in value)
    return frozenset(ids)


def head_name(model: Any) -> str:
    """The module name of ``model``'s output head (``lm_head`` on Llama), "" if none."""
    head = model.get_output_embeddings()
    return next((name for name, m in model.named_modules() if m is head and name), "")


@torch.no_grad()
def seed_lora_a(model: torch.nn.Module, seed: int) -> None:
    """Re-draw every LoRA A matrix from a generator seeded with ``seed``.

    Same distribution as peft's default (kaiming-uniform with a = sqrt(5), i.e.
    U(-1/sqrt(fan_in), 1/sqrt(fan_in))), drawn on the CPU in float32 in sorted-name order
    with the output head's last, so the values do not depend on the device, on the global
    RNG, or on whether the head is adapted.
    """
    gen = torch.Generator(device="cpu").manual_seed(seed)
    get_base = getattr(model, "get_base_model", None)
    head = head_name(get_base()) if callable(get_base) else ""
    named = sorted(
        ((name, p) for name, p in model.named_parameters() if ".lora_A." in name),
        key=lambda item: (bool(head) and f".{head}.lora_A." in item[0], item[0]),
    )
    for _name, weight_RI in named:  # [rank, in_features]
        bound = 1.0 / math.sqrt(weight_RI.shape[1])
        values_RI = torch.empty(weight_RI.shape, dtype=torch.float32)
        values_RI.uniform_(-bound, bound, generator=gen)
        weight_RI.copy_(values_RI)


def apply_lora(
    base: Any,
    rank: int,
    alpha: int,
    seed: int,
    *,
    unembed: bool = False,
    options: EngineOptions | None = None,
) -> PeftModel:
    """Freeze ``base`` and wrap it with a seeded LoRA adapter (see the module docstring);
    ``unembed`` adapts the output head too. ``options``' ``linear``, ``lora_precision`` and
    ``fused_head`` choose its kernels (default: :class:`EngineOptions`' defaults)."""
    options = options if options is not None else EngineOptions()
    if rank < 1:
        raise ValueError(f"LoRA rank must be >= 1, got {rank}")
    base.requires_grad_(False)
    targets: str | list[str] = "all-linear"
    if unembed:  # every linear layer's leaf name (what all-linear covers) plus the head
        head = head_name(base)
        if not head:
            raise EngineConfigError("train_unembed: this model has no output head to adapt")
        linear = {n for n, m in base.named_modules() if isinstance(m, torch.nn.Linear)}
        targets = sorted({name.rsplit(".", 1)[-1] for name in linear} | {head})
    config = LoraConfig(
        r=rank,
        lora_alpha=alpha,
        target_modules=targets,
        lora_dropout=0.0,
        bias="none",
        task_type="CAUSAL_LM",
    )
    # peft's own init must not move the global RNG; its FutureWarnings are transformers
    # deprecations that users cannot act on.
    with torch.random.fork_rng(devices=[]), warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        # peft warns that a tied head is adapted: intended (merged.py unties it on merge)
        warnings.filterwarnings("ignore", message=".*tie_word_embeddings.*")
        peft_model = get_peft_model(base, config)
    seed_lora_a(peft_model, seed)
    # oneDNN matmuls where they beat MKL; decode products from packed weights where they
    # pay, probed only for a float32 CPU base (packing takes no other products)
    first = next(base.parameters())
    cpu_fp32 = first.device.type == "cpu" and first.dtype == torch.float32
    fast_linear.install(
        peft_model, options.linear, options.packed_cache_bytes if cpu_fp32 else None
    )
    lean_lora.install(peft_model, options.lora_precision)  # no peft per-call dispatch
    head_logprobs.mark(peft_model, options.fused_head)
    peft_model.eval()  # no dropout anywhere; gradients still flow
    return peft_model  # type: ignore[no-any-return]


def local_model(resolved: ResolvedModel) -> ResolvedModel:
    """A GGUF model as the plain directory it loads from (converted once, then cached);
    any other model as it is."""
    if resolved.kind == "gguf":
        return replace(resolved, kind="local", target=model_directory(resolved))
    return resolved


def loaded_model(
    peft_model: PeftModel,
    base: Any,
    tokenizer: Any,
    device: torch.device,
    dtype: torch.dtype,
    resolved: ResolvedModel,
    options: EngineOptions | None = None,
) -> LoadedModel:
    """A session's :class:`LoadedModel`: its LoRA-wrapped model over ``base`` (whose
    embeddings give the vocabulary and whose configs give the EOS ids), and the tokenizer's
    pad id (its EOS id, else 0, when it has none)."""
    pad_id = tokenizer.pad_token_id
    if pad_id is None:
        pad_id = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else 0
    return LoadedModel(
        model=peft_model,
        tokenizer=tokenizer,
        device=device,
        dtype=dtype,
        vocab_size=int(base.get_input_embeddings().weight.shape[0]),
        eos_ids=eos_ids(base, tokenizer),
        pad_id=int(pad_id),
        resolved=resolved,
        options=options if options is not None else EngineOptions(),
    )
