"""Model-package files (docs/semantics.md#5): the adapter, the AdamW state, a merged model.

A package holds safetensors and JSON only: nothing is pickled, nothing calls ``torch.load``.

- ``adapter_config.json`` + ``adapter_model.safetensors``: peft's own layout, so
  ``peft.PeftModel.from_pretrained(base, directory)`` loads it. Tensor keys are peft's (the
  live parameter name without the adapter name: ``...q_proj.lora_A.weight``). The config's
  ``base_model_name_or_path`` is a local directory or ``null``, never a hub id, so loading
  with an explicit base model never reaches for the hub.
- ``optimizer.safetensors``: ``<key>.exp_avg`` and ``<key>.exp_avg_sq`` per adapter key that
  has AdamW state; ``optimizer.json``: format tag, per-key step counts and the last step's
  hyperparameters (wire form).
- ``merged/``: the base with ``W + scaling * B @ A`` in every adapted layer (peft's
  ``get_delta_weight``; the live model is never merged), by ``save_pretrained`` with its tokenizer.

Readers check a package against the live adapter's :class:`AdapterLayout` (keys, shapes,
rank, alpha) completely before returning anything, and raise ``EngineInputError`` naming the
problem and the fix; callers copy into live state only after a reader returned.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from peft.tuners.lora import LoraLayer
from safetensors.torch import load_file, save_file
from torch import Tensor

from localsession import vocab
from localsession.numerics.optim import NamedMoments, split_group_problem
from localsession.port import AdamHyperparams, EngineInputError

ADAPTER_NAME = "default"
ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
OPTIMIZER_WEIGHTS = "optimizer.safetensors"
OPTIMIZER_CONFIG = "optimizer.json"
MERGED_DIR = "merged"
OPTIMIZER_FORMAT = "localsession-adamw"
OPTIMIZER_VERSION = 1
MOMENTS = ("exp_avg", "exp_avg_sq")


def file_key(param_name: str) -> str:
    """peft's saved key for a live parameter name (the adapter name dropped)."""
    return param_name.replace(f".{ADAPTER_NAME}.", ".")


@dataclass(frozen=True)
class AdapterLayout:
    """What a package must hold to fit the live adapter."""

    #: file key -> live parameter name (every trainable parameter, in model order)
    names: dict[str, str]
    #: file key -> tensor shape
    shapes: dict[str, tuple[int, ...]]
    rank: int
    alpha: float
    use_rslora: bool


def adapter_layout(model: Any) -> AdapterLayout:
    """The live adapter's layout (peft model, adapter ``default``)."""
    names: dict[str, str] = {}
    shapes: dict[str, tuple[int, ...]] = {}
    for name, p in model.named_parameters():
        if p.requires_grad:
            names[file_key(name)] = name
            shapes[file_key(name)] = tuple(p.shape)
    config = model.peft_config[ADAPTER_NAME]
    return AdapterLayout(
        names=names,
        shapes=shapes,
        rank=int(config.r),
        alpha=float(config.lora_alpha),
        use_rslora=bool(config.use_rslora),
    )


def _error(directory: str | Path, problem: str, fix: str) -> EngineInputError:
    return EngineInputError(f"package {str(directory)!r}: {problem}; {fix}")


def _read_json(directory: Path, name: str, fix: str) -> dict[str, Any]:
    path = directory / name
    if not path.is_file():
        raise _error(directory, f"{name} is missing", fix)
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise _error(directory, f"{name} cannot be read ({err})", fix) from None
    if not isinstance(value, dict):
        raise _error(directory, f"{name} is not a JSON object", fix)
    return value


def _read_tensors(directory: Path, name: str, fix: str) -> dict[str, Tensor]:
    path = directory / name
    if not path.is_file():
        raise _error(directory, f"{name} is missing", fix)
    try:
        tensors = load_file(str(path), device="cpu")
    except Exception as err:  # safetensors raises its own error types
        raise _error(directory, f"{name} cannot be read ({err})", fix) from None
    # own the memory: the file may be replaced or deleted later
    return {k: v.clone() for k, v in tensors.items()}


def _check_tensors(
    directory: Path, what: str, tensors: dict[str, Tensor], shapes: dict[str, tuple[int, ...]]
) -> None:
    """Exact key set, shapes and floating dtypes, or ``EngineInputError``."""
    missing = sorted(set(shapes) - set(tensors))
    extra = sorted(set(tensors) - set(shapes))
    fix = "load a package saved from a session with the same base model, rank and alpha"
    if missing or extra:
        parts = []
        if missing:
            parts.append(f"{len(missing)} missing (e.g. {missing[0]!r})")
        if extra:
            parts.append(f"{len(extra)} unexpected (e.g. {extra[0]!r})")
        raise _error(directory, f"{what} does not fit this adapter: keys " + ", ".join(parts), fix)
    for key, shape in shapes.items():
        value = tensors[key]
        if tuple(value.shape) != shape:
            raise _error(
                directory,
                f"{what}: {key!r} has shape {list(value.shape)}, this adapter needs "
                f"{list(shape)} (a different LoRA rank or base model?)",
                fix,
            )
        if not value.is_floating_point():
            raise _error(directory, f"{what}: {key!r} has non-float dtype {value.dtype}", fix)


# -- the adapter -----------------------------------------------------------------------


def adapter_config_dict(model: Any, base_model_path: str | None) -> dict[str, Any]:
    """peft's ``adapter_config.json`` content for the live adapter (inference mode)."""
    config = model.peft_config[ADAPTER_NAME].to_dict()
    config["base_model_name_or_path"] = base_model_path
    config["inference_mode"] = True
    for key, value in config.items():
        if isinstance(value, (set, frozenset)):
            config[key] = sorted(value)  # deterministic file content
    return config


def write_adapter(directory: Path, tensors: dict[str, Tensor], config: dict[str, Any]) -> None:
    """``adapter_model.safetensors`` (file keys) and ``adapter_config.json``."""
    save_file(tensors, str(directory / ADAPTER_WEIGHTS), metadata={"format": "pt"})
    text = json.dumps(config, indent=2, sort_keys=True, default=str)
    (directory / ADAPTER_CONFIG).write_text(text + "\n", encoding="utf-8")


def read_adapter(directory: str | Path, layout: AdapterLayout) -> dict[str, Tensor]:
    """The package's adapter tensors (file keys, CPU), checked against ``layout``."""
    path = Path(directory)
    if not path.is_dir():
        raise _error(
            directory,
            "no such package directory",
            "pass the directory of a saved package (save_weights_for_sampler / save_state)",
        )
    fix = (
        "load a package saved from a session with the same base model, rank and alpha "
        f"(this session: rank {layout.rank}, alpha {layout.alpha:g})"
    )
    config = _read_json(path, ADAPTER_CONFIG, fix)
    rank, alpha = config.get("r"), config.get("lora_alpha")
    if rank != layout.rank:
        raise _error(
            directory, f"the adapter has LoRA rank {rank}, this session {layout.rank}", fix
        )
    if not isinstance(alpha, (int, float)) or float(alpha) != layout.alpha:
        raise _error(
            directory, f"the adapter has lora_alpha {alpha}, this session {layout.alpha:g}", fix
        )
    if bool(config.get("use_rslora", False)) != layout.use_rslora:
        raise _error(directory, "the adapter's use_rslora differs from this session's", fix)
    tensors = _read_tensors(path, ADAPTER_WEIGHTS, fix)
    _check_tensors(path, ADAPTER_WEIGHTS, tensors, layout.shapes)
    return tensors


def adapter_scaling(rank: int, alpha: float, use_rslora: bool) -> float:
    """peft's LoRA scale: ``alpha / r`` (``alpha / sqrt(r)`` with rsLoRA)."""
    return float(alpha) / (float(rank) ** 0.5 if use_rslora else float(rank))


def read_sampling_adapter(
    directory: str | Path, layout: AdapterLayout
) -> tuple[dict[str, Tensor], float | None]:
    """A package's adapter for *sampling*, at whatever rank and alpha it was saved with.

    Returns ``(tensors by file key, None)`` when the package fits ``layout`` exactly (what
    :func:`read_adapter` returns), else ``(tensors, scaling)``: the same modules, with each
    ``lora_A`` of shape ``[r', in]`` and ``lora_B`` of shape ``[out, r']`` for the package's
    own rank ``r'``, and the scale its own ``adapter_config.json`` gives.
    """
    path = Path(directory)
    fix = "sample a package saved from a session on the same base model"
    config = _read_json(path, ADAPTER_CONFIG, fix) if path.is_dir() else {}
    rank, alpha = config.get("r"), config.get("lora_alpha")
    rslora = bool(config.get("use_rslora", False))
    if not path.is_dir() or (
        rank == layout.rank
        and isinstance(alpha, (int, float))
        and float(alpha) == layout.alpha
        and rslora == layout.use_rslora
    ):
        return read_adapter(directory, layout), None
    if type(rank) is not int or rank < 1 or not isinstance(alpha, (int, float)) or alpha <= 0:
        raise _error(directory, f"adapter_config.json has r={rank!r}, lora_alpha={alpha!r}", fix)
    tensors = _read_tensors(path, ADAPTER_WEIGHTS, fix)
    shapes: dict[str, tuple[int, ...]] = {}
    for key, shape in layout.shapes.items():
        if ".lora_A." in key and len(shape) == 2:
            shapes[key] = (rank, shape[1])  # [r', in]
        elif ".lora_B." in key and len(shape) == 2:
            shapes[key] = (shape[0], rank)  # [out, r']
        else:
            shapes[key] = shape
    _check_tensors(path, ADAPTER_WEIGHTS, tensors, shapes)
    return tensors, adapter_scaling(rank, float(alpha), rslora)


# -- the optimizer ---------------------------------------------------------------------


def adam_params_to_wire(hp: AdamHyperparams) -> dict[str, float]:
    """``hp`` as ``optimizer.json`` keeps it: ``AdamParamsConfig`` keys (unset optional keys
    left out)."""
    out: dict[str, float] = {}
    for wire, field_name in vocab.ADAM_WIRE_KEYS.items():
        value = getattr(hp, field_name)
        if value is not None:
            out[wire] = float(value)
    return out


def adam_params_from_json(saved: Any) -> AdamHyperparams:
    """The hyperparameters ``optimizer.json`` kept (see :func:`adam_params_to_wire`);
    raises ``EngineInputError`` for a file this module did not write."""
    if not isinstance(saved, dict) or not set(saved) <= set(vocab.ADAM_WIRE_KEYS):
        raise EngineInputError(f"`last_adam_params` must map AdamParamsConfig keys, got {saved!r}")
    values: dict[str, float] = {}
    for key, value in saved.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise EngineInputError(f"`last_adam_params.{key}` must be a number, got {value!r}")
        values[vocab.ADAM_WIRE_KEYS[key]] = float(value)
    params = AdamHyperparams(**values)
    params.check()
    return params


def write_optimizer(
    directory: Path, moments: dict[str, NamedMoments], last_params: AdamHyperparams | None
) -> None:
    """``optimizer.safetensors`` + ``optimizer.json`` for moments keyed by file key."""
    tensors: dict[str, Tensor] = {}
    for key, m in moments.items():
        tensors[f"{key}.exp_avg"] = m.exp_avg.contiguous()
        tensors[f"{key}.exp_avg_sq"] = m.exp_avg_sq.contiguous()
    save_file(tensors, str(directory / OPTIMIZER_WEIGHTS), metadata={"format": "pt"})
    steps = {key: m.step for key, m in sorted(moments.items())}
    meta = {
        "format": OPTIMIZER_FORMAT,
        "version": OPTIMIZER_VERSION,
        "optimizer": "AdamW",
        "step": max(steps.values(), default=0),
        "steps": steps,
        "last_adam_params": adam_params_to_wire(last_params) if last_params else None,
    }
    text = json.dumps(meta, indent=2, sort_keys=True)
    (directory / OPTIMIZER_CONFIG).write_text(text + "\n", encoding="utf-8")


def read_optimizer(
    directory: str | Path, layout: AdapterLayout
) -> tuple[dict[str, NamedMoments], AdamHyperparams | None]:
    """(moments by file key, last hyperparameters), checked against ``layout``."""
    path = Path(directory)
    fix = (
        "this package holds no usable optimizer state: load it without the optimizer "
        "(load_state), or save it with the optimizer (save_state)"
    )
    meta = _read_json(path, OPTIMIZER_CONFIG, fix)
    if meta.get("format") != OPTIMIZER_FORMAT or meta.get("version") != OPTIMIZER_VERSION:
        raise _error(
            directory,
            f"{OPTIMIZER_CONFIG} has format {meta.get('format')!r} version "
            f"{meta.get('version')!r}, expected {OPTIMIZER_FORMAT!r} version {OPTIMIZER_VERSION}",
            fix,
        )
    steps = meta.get("steps")
    if not isinstance(steps, dict) or not all(
        isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in steps.values()
    ):
        raise _error(directory, f"{OPTIMIZER_CONFIG}: `steps` must map keys to counts", fix)
    unknown = sorted(set(steps) - set(layout.shapes))
    if unknown:
        raise _error(
            directory,
            f"{OPTIMIZER_CONFIG} names {len(unknown)} parameter(s) this "
            f"adapter does not have (e.g. {unknown[0]!r})",
            fix,
        )
    if (split := split_group_problem(steps, layout.shapes)) is not None:
        raise _error(directory, f"{OPTIMIZER_CONFIG}: {split}", fix)
    last_params = None
    if meta.get("last_adam_params") is not None:
        try:
            last_params = adam_params_from_json(meta["last_adam_params"])
        except EngineInputError as err:
            raise _error(directory, f"{OPTIMIZER_CONFIG}: {err}", fix) from None
    tensors = _read_tensors(path, OPTIMIZER_WEIGHTS, fix)
    shapes = {f"{k}.{m}": layout.shapes[k] for k in steps for m in MOMENTS}
    _check_tensors(path, OPTIMIZER_WEIGHTS, tensors, shapes)
    for name, value in tensors.items():
        if not bool(torch.isfinite(value).all()):
            raise _error(directory, f"{OPTIMIZER_WEIGHTS}: {name!r} is not finite", fix)
    moments = {
        key: NamedMoments(step, tensors[f"{key}.exp_avg"], tensors[f"{key}.exp_avg_sq"])
        for key, step in steps.items()
    }
    return moments, last_params


# -- the merged model ------------------------------------------------------------------


@torch.no_grad()
def merged_state_dict(model: Any) -> dict[str, Tensor]:
    """The plain base model's state dict with every LoRA layer merged (``W + delta``).

    Keys are the un-adapted model's (``...q_proj.weight``); LoRA tensors are dropped.
    Unadapted tensors are the live (frozen) ones, not copies; merged ones are new CPU
    tensors. The live model is left untouched.
    """
    base = model.get_base_model()
    layers: dict[str, Any] = {
        name: m for name, m in base.named_modules() if isinstance(m, LoraLayer)
    }
    out: dict[str, Tensor] = {}
    for key, value in base.state_dict().items():
        prefix, sep, rest = key.partition(".base_layer.")
        if sep and prefix in layers:
            if rest == "weight":
                layer = layers[prefix]
                delta = layer.get_delta_weight(ADAPTER_NAME)
                value = (value + delta.to(value.dtype)).to("cpu")
            out[f"{prefix}.{rest}"] = value
            continue
        owner = key.rsplit(".lora_", 1)[0] if ".lora_" in key else None
        if owner is not None and owner in layers:
            continue
        out[key] = value
    for name in layers:
        if f"{name}.weight" not in out:
            raise RuntimeError(f"merge: adapted layer {name!r} has no base weight")
    head = base.get_output_embeddings()
    if head in layers.values() and head.base_layer.weight is base.get_input_embeddings().weight:
        raise EngineInputError(  # save_pretrained would keep one of the two tied tensors
            "merged weights: this adapter adapts an output head tied to the input embedding "
            "(train_unembed), which one merged checkpoint cannot hold; save without merged "
            "weights (the adapter alone samples and loads)"
        )
    return out


def write_merged(directory: Path, model: Any, state: dict[str, Tensor], tokenizer: Any) -> None:
    """``merged/``: config, generation config, safetensors weights and the tokenizer."""
    target = directory / MERGED_DIR
    target.mkdir(parents=True, exist_ok=True)
    base = model.get_base_model()
    with _quiet_transformers():  # no stray "Writing model shards" bar inside a user's loop
        base.save_pretrained(str(target), state_dict=state)  # safetensors by default
    tokenizer.save_pretrained(str(target))


@contextmanager
def _quiet_transformers() -> Iterator[None]:
    """transformers' progress bars off for the block, then as they were."""
    from transformers.utils import logging as hf_logging

    was_on = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_on:
            hf_logging.enable_progress_bar()
