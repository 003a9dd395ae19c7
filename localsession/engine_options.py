"""The engine's settings in one value: :class:`EngineOptions`, and how each is read and checked.

Sixteen ``LOCALSESSION_*`` variables tune the torch engine (device, dtype, threads, kernels,
caches, placement, the decode loop). They are read here and nowhere else:
:meth:`EngineOptions.from_env` parses every one of them once, when the composition root
(:mod:`localsession.wiring`) builds a service, and the frozen value travels on each
:class:`~localsession.port.EngineSpec` to the engine, so an engine module never reads the
environment and a session records what it ran with. A spec built by hand carries
``EngineOptions()``, the defaults.

One error policy: a bad value raises :class:`SettingError` (a ``ValueError``) reading
``NAME='value': expected <the accepted values>``, before any model loads.

Each variable's name, default, accepted values and purpose are declared once, in
:data:`ENGINE_VARIABLES`; docs/configuration.md's table is generated from them
(:mod:`localsession.settings`). Pure Python: importing this module does not import torch.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any


class SettingError(ValueError):
    """A ``LOCALSESSION_*`` variable (or the option it sets) has a value it does not accept;
    the message names the variable, the value and the accepted values."""


@dataclass(frozen=True)
class Variable:
    """One ``LOCALSESSION_*`` variable as the docs' table lists it."""

    name: str
    default: str
    accepted: str
    purpose: str
    #: ``engine`` (an :class:`EngineOptions` field), ``service`` (runtime/config.py and the
    #: model catalog) or ``tooling`` (tests, benches, conformance).
    scope: str
    #: The :class:`EngineOptions` field it sets (engine variables only).
    field: str | None = None


def _problem(name: str, raw: str, accepted: str) -> SettingError:
    return SettingError(f"{name}={raw!r}: expected {accepted}")


def choice(name: str, raw: str, table: Mapping[str, Any], accepted: str) -> Any:
    """``table[raw]`` with case and surrounding blanks ignored (unset reads as ``""``)."""
    key = raw.strip().lower()
    if key not in table:
        raise _problem(name, raw, accepted)
    return table[key]


def whole_number(name: str, raw: str, accepted: str, *, least: int = 0) -> int:
    """``raw`` as an integer of at least ``least``."""
    text = raw.strip()
    if not text.isdigit() or int(text) < least:
        raise _problem(name, raw, accepted)
    return int(text)


def non_negative(name: str, raw: str, accepted: str) -> float:
    """``raw`` as a finite number >= 0 (seconds, megabytes)."""
    try:
        value = float(raw.strip())
    except ValueError:
        raise _problem(name, raw, accepted) from None
    if not value >= 0 or value == float("inf"):
        raise _problem(name, raw, accepted)
    return value


def parse_max_memory(
    raw: str, name: str = "LOCALSESSION_MAX_MEMORY"
) -> tuple[tuple[str, str], ...]:
    """``"0=20GiB,cpu=48GiB"`` -> ``(("0", "20GiB"), ("cpu", "48GiB"))``; ``""`` -> ``()``."""
    budget: dict[str, str] = {}
    for entry in raw.split(","):
        device, sep, size = entry.strip().partition("=")
        device, size = device.strip().lower(), size.strip()
        if not entry.strip():
            continue
        if not sep or not size or not (device == "cpu" or device.isdigit()):
            raise _problem(name, raw, _ACCEPTED["max_memory"])
        budget[device] = size
    if raw.strip() and not budget:
        raise _problem(name, raw, _ACCEPTED["max_memory"])
    return tuple(budget.items())


_OFF_ON = {"": False, "off": False, "0": False, "on": True, "1": True}
_COMPILE_OFF = frozenset({"", "0", "off", "false", "no", "eager"})
_COMPILE_INDUCTOR = frozenset({"1", "on", "true", "yes", "inductor"})
_DTYPES = {
    "": "default",
    "default": "default",
    "auto": "auto",
    "fp32": "fp32",
    "float32": "fp32",
    "bf16": "bf16",
    "bfloat16": "bf16",
}
_LINEARS = {"": "auto", "auto": "auto", "onednn": "onednn", "mkl": "mkl"}
_LINEARS.update(dict.fromkeys(("off", "0", "false", "no"), "mkl"))
STRATEGIES = ("auto", "balanced", "balanced_low_0", "sequential")

_ACCEPTED = {
    "device": "'cpu' or 'cuda' (or unset: CUDA when torch sees a GPU, else the CPU)",
    "dtype": "one of fp32, bf16, auto (unset: float32 on a CPU, bfloat16 on CUDA)",
    "threads": "'auto' (the default: follow the free cores) or a whole number of threads "
    "of at least 1, e.g. LOCALSESSION_THREADS=2",
    "compile": "off (the default), on (inductor) or a torch.compile backend name",
    "linear": "auto (the default), onednn or mkl",
    "packed_cache_mb": "a size in MB >= 0, e.g. 1024 (0 turns packed decode products off)",
    "fused_head": "on (the default) or off",
    "lora_precision": "mixed (the default: a half-precision base's LoRA products in its "
    "dtype) or fp32 (peft's float32 products)",
    "cudnn_attention": "off (the default: flash or memory-efficient attention) or on "
    "(torch's choice, cuDNN included)",
    "shared_prefix": "one of auto, on, off",
    "max_memory": "DEVICE=SIZE entries separated by commas, DEVICE a GPU index or 'cpu' "
    "(example: '0=20GiB,cpu=48GiB')",
    "device_map": "one of " + ", ".join(STRATEGIES),
    "offload_dir": "a directory path",
    "merged_cache_mb": "a size in MB >= 0, e.g. 512 (0 turns merged copies off)",
    "snapshot_cache_mb": "a size in MB >= 0, e.g. 256",
    "decode": "static (the default: preallocated KV slots, a fixed-shape step) or dynamic "
    "(the growing-cache reference loop)",
    "decode_compile": "auto (the default: CUDA graphs on CUDA, eager on a CPU), probe "
    "(on a CPU, inductor where a one-time probe finds it faster), on or off",
}


#: field -> how its variable's raw text (``""`` when unset) becomes the field's value
_PARSERS: dict[str, Callable[[str, str], Any]] = {
    "device": lambda n, r: choice(
        n, r, {"": "auto", "auto": "auto", "cpu": "cpu", "cuda": "cuda"}, _ACCEPTED["device"]
    ),
    "dtype": lambda n, r: choice(n, r, _DTYPES, _ACCEPTED["dtype"]),
    "threads": lambda n, r: (
        0
        if r.strip().lower() in ("", "auto")
        else whole_number(n, r, _ACCEPTED["threads"], least=1)
    ),
    "compile": lambda n, r: (
        ""
        if r.strip().lower() in _COMPILE_OFF
        else "inductor"
        if r.strip().lower() in _COMPILE_INDUCTOR
        else r.strip().lower()
    ),
    "linear": lambda n, r: choice(n, r, _LINEARS, _ACCEPTED["linear"]),
    "packed_cache_mb": lambda n, r: (
        non_negative(n, r, _ACCEPTED["packed_cache_mb"]) if r.strip() else 1024.0
    ),
    "fused_head": lambda n, r: choice(
        n, r, {**_OFF_ON, "": True, "auto": True}, _ACCEPTED["fused_head"]
    ),
    "lora_precision": lambda n, r: choice(
        n,
        r,
        {"": "mixed", "mixed": "mixed", "fp32": "fp32", "float32": "fp32"},
        _ACCEPTED["lora_precision"],
    ),
    "cudnn_attention": lambda n, r: choice(n, r, _OFF_ON, _ACCEPTED["cudnn_attention"]),
    "shared_prefix": lambda n, r: choice(
        n, r, {"": "auto", "auto": "auto", "on": "on", "off": "off"}, _ACCEPTED["shared_prefix"]
    ),
    "max_memory": lambda n, r: parse_max_memory(r, n),
    "device_map": lambda n, r: choice(
        n, r, {"": "auto", **{s: s for s in STRATEGIES}}, _ACCEPTED["device_map"]
    ),
    "offload_dir": lambda n, r: r.strip(),
    "merged_cache_mb": lambda n, r: (
        non_negative(n, r, _ACCEPTED["merged_cache_mb"]) if r.strip() else 512.0
    ),
    "snapshot_cache_mb": lambda n, r: (
        non_negative(n, r, _ACCEPTED["snapshot_cache_mb"]) if r.strip() else 256.0
    ),
    "decode": lambda n, r: choice(
        n, r, {"": "static", "static": "static", "dynamic": "dynamic"}, _ACCEPTED["decode"]
    ),
    "decode_compile": lambda n, r: choice(
        n,
        r,
        {
            "": "auto",
            "auto": "auto",
            "probe": "probe",
            "on": "on",
            "1": "on",
            "off": "off",
            "0": "off",
        },
        _ACCEPTED["decode_compile"],
    ),
}


@dataclass(frozen=True)
class EngineOptions:
    """Every setting of the torch engine (docs/configuration.md), each field named after its
    variable (``device`` is ``LOCALSESSION_DEVICE``). Build with :meth:`from_env` or
    :meth:`parse`; the constructor itself checks nothing, so pass values in the parsed form
    shown by each field's default."""

    #: ``auto`` (CUDA when torch sees one, else the CPU), ``cpu`` or ``cuda``
    device: str = "auto"
    #: ``default`` (unset: the device's, float32 on a CPU, bfloat16 on CUDA), ``auto`` (bf16
    #: where the device has bf16 instructions), ``fp32``, ``bf16``
    dtype: str = "default"
    #: torch threads per op: 0 follows the free cores (``auto``), else a fixed count
    threads: int = 0
    #: ``torch.compile`` backend of the training forward; ``""`` runs eager
    compile: str = ""
    #: float32 CPU linear kernel: ``auto`` (probed), ``onednn`` or ``mkl``
    linear: str = "auto"
    #: MB of float32 weights packed for MKL's decode products, process-wide (0: off)
    packed_cache_mb: float = 1024.0
    #: the fused output-head log-probabilities where a model allows them
    fused_head: bool = True
    #: a half-precision base's LoRA products: ``mixed`` (in its dtype) or ``fp32``
    lora_precision: str = "mixed"
    #: let SDPA use cuDNN on CUDA
    cudnn_attention: bool = False
    #: shared-prefix batches: ``auto`` (probed), ``on``, ``off``
    shared_prefix: str = "auto"
    #: per-device memory budget ``(("0", "20GiB"), ("cpu", "48GiB"))``; ``()``: no placement
    max_memory: tuple[tuple[str, str], ...] = ()
    #: accelerate's placement strategy (with ``max_memory``)
    device_map: str = "auto"
    #: where disk-offloaded weights go; ``""``: a scratch folder per model
    offload_dir: str = ""
    #: MB of merged decoding copies, all sessions of the process together (0: none)
    merged_cache_mb: float = 512.0
    #: MB of loaded package snapshots per session
    snapshot_cache_mb: float = 256.0
    #: sampler decode loop: ``static`` (slots, fixed-shape step) or ``dynamic`` (reference)
    decode: str = "static"
    #: how the static step runs: ``auto``, ``probe``, ``on`` (graphs / inductor), ``off``
    decode_compile: str = "auto"

    @classmethod
    def parse(cls, values: Mapping[str, str]) -> EngineOptions:
        """Options from raw variable texts (``{"LOCALSESSION_DTYPE": "bf16"}``); a name
        not given is unset. Every value is checked (:class:`SettingError`)."""
        parsed = {
            v.field: _PARSERS[v.field](v.name, values.get(v.name, ""))
            for v in ENGINE_VARIABLES
            if v.field is not None
        }
        return cls(**parsed)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> EngineOptions:
        """The options ``environ`` (default ``os.environ``) sets, then ``overrides`` (parsed
        values, e.g. ``serve``'s flags)."""
        env = os.environ if environ is None else environ
        options = cls.parse({v.name: env[v.name] for v in ENGINE_VARIABLES if v.name in env})
        return dataclasses.replace(options, **overrides) if overrides else options

    @property
    def packed_cache_bytes(self) -> int:
        return int(self.packed_cache_mb * 2**20)

    @property
    def merged_cache_bytes(self) -> int:
        return int(self.merged_cache_mb * 2**20)

    @property
    def snapshot_cache_bytes(self) -> int:
        return int(self.snapshot_cache_mb * 2**20)

    def as_dict(self) -> dict[str, Any]:
        """Field -> value, JSON-ready (bench and gpu_check output)."""
        out = dataclasses.asdict(self)
        out["max_memory"] = ",".join(f"{d}={s}" for d, s in self.max_memory)
        return out

    def line(self) -> str:
        """One line for a banner or a log: ``device=auto dtype=auto threads=auto ...``."""
        shown = self.as_dict()
        shown["threads"] = self.threads or "auto"
        shown["compile"] = self.compile or "off"
        for key in ("fused_head", "cudnn_attention"):
            shown[key] = "on" if shown[key] else "off"
        for key in ("packed_cache_mb", "merged_cache_mb", "snapshot_cache_mb"):
            shown[key] = f"{shown[key]:g}"
        return " ".join(f"{k}={v}" for k, v in shown.items() if v != "")


def _engine(name: str, default: str, purpose: str) -> Variable:
    key = name.removeprefix("LOCALSESSION_").lower()
    return Variable(name, default, _ACCEPTED[key], purpose, "engine", key)


#: The engine's variables, in :class:`EngineOptions` field order.
ENGINE_VARIABLES: tuple[Variable, ...] = (
    _engine("LOCALSESSION_DEVICE", "unset", "Device the engine loads models on (docs/device.md)."),
    _engine(
        "LOCALSESSION_DTYPE",
        "unset",
        "Weights' dtype; `auto` picks bf16 where the CPU has bf16 instructions.",
    ),
    _engine("LOCALSESSION_THREADS", "auto", "Torch threads per op (engine/thread_policy.py)."),
    _engine(
        "LOCALSESSION_COMPILE",
        "off",
        "Compile the training forward with torch.compile (engine/compiled.py).",
    ),
    _engine(
        "LOCALSESSION_LINEAR",
        "auto",
        "Float32 CPU linear kernel; `auto` probes oneDNN against MKL once per process.",
    ),
    _engine(
        "LOCALSESSION_PACKED_CACHE_MB",
        "1024",
        "Memory for float32 weights packed once for MKL, so a decode step's few-row products "
        "skip the per-call packing; probed once per process (engine/packed_linear.py).",
    ),
    _engine(
        "LOCALSESSION_FUSED_HEAD",
        "on",
        "Fused output-head log-probabilities (engine/head_logprobs.py).",
    ),
    _engine(
        "LOCALSESSION_LORA_PRECISION",
        "mixed",
        "Precision of a half-precision base's LoRA products (engine/lean_lora.py).",
    ),
    _engine(
        "LOCALSESSION_CUDNN_ATTENTION",
        "off",
        "Let attention use cuDNN's fused SDPA on CUDA (engine/cuda_attention.py).",
    ),
    _engine(
        "LOCALSESSION_SHARED_PREFIX",
        "auto",
        "Run datums with a common prompt as one packed row (engine/shared_prefix.py).",
    ),
    _engine(
        "LOCALSESSION_MAX_MEMORY",
        "unset",
        "Place a model bigger than the device across devices and disk (engine/placement.py).",
    ),
    _engine(
        "LOCALSESSION_DEVICE_MAP",
        "auto",
        "accelerate's placement strategy, with LOCALSESSION_MAX_MEMORY.",
    ),
    _engine(
        "LOCALSESSION_OFFLOAD_DIR",
        "a temporary folder",
        "Where disk-offloaded weights go, with LOCALSESSION_MAX_MEMORY.",
    ),
    _engine(
        "LOCALSESSION_MERGED_CACHE_MB",
        "512",
        "Memory for merged decoding copies of sampled checkpoints, all sessions together.",
    ),
    _engine(
        "LOCALSESSION_SNAPSHOT_CACHE_MB",
        "256",
        "Memory for loaded checkpoint adapters per session (sampling).",
    ),
    _engine(
        "LOCALSESSION_DECODE",
        "static",
        "Sampler decode loop: static KV slots and a fixed-shape step, or the dynamic "
        "reference (engine/static_decoder.py).",
    ),
    _engine(
        "LOCALSESSION_DECODE_COMPILE",
        "auto",
        "How the static decode step runs: CUDA graphs / inductor or eager (engine/decode_step.py).",
    ),
)

assert [v.field for v in ENGINE_VARIABLES] == [f.name for f in dataclasses.fields(EngineOptions)]
