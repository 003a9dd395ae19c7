"""Base-model name resolution: which weights a session's ``base_model`` name means.

Pure Python, no torch: the runtime and the CLI use it to list and validate names before any
engine is imported. A name resolves, in order, through:

1. the **model map**: ``LOCALSESSION_MODEL_MAP="openai/gpt-oss-20b=localsession/small,..."``
   (comma-separated ``NAME=TARGET``) and the JSON file ``$LOCALSESSION_HOME/models.json``
   (``{"NAME": "TARGET"}``; ``LOCALSESSION_HOME`` defaults to ``~/.localsession``). The
   environment wins over the file. A target is itself resolved by the steps below;
2. the **built-in** tiny models (``localsession/tiny``, ``localsession/small``);
3. an existing **local directory** holding a ``config.json``;
4. the local **Hugging Face cache** (``$HF_HUB_CACHE``, else ``$HF_HOME/hub``, else
   ``$XDG_CACHE_HOME/huggingface/hub``, else ``~/.cache/huggingface/hub``): a
   ``models--org--name`` folder with a snapshot containing ``config.json``. Nothing is
   ever downloaded.

Before those steps, a SageMaker Hub content ARN
(``arn:aws:sagemaker:<region>:aws:hub-content/SageMakerPublicHub/Model/<name>/<version>``) is
reduced to its ``<name>``, and a Hub content name (``localsession-tiny``, the form a model
package's ``BaseModel.HubContentName`` and the local Hub use) is turned back into the model
name it stands for. Anything else raises ``ValueError`` listing the available models and how
to map a name.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

BUILTIN_MODELS: tuple[str, ...] = ("localsession/tiny", "localsession/small")

MODEL_MAP_ENV = "LOCALSESSION_MODEL_MAP"
HOME_ENV = "LOCALSESSION_HOME"

ModelKind = Literal["builtin", "local", "hf_cache"]

_HUB_ARN_RE = re.compile(
    r"^arn:aws[a-z-]*:sagemaker:[^:]*:[^:]*:hub-content/[^/]+/Model/(?P<name>[^/]+)(/[^/]+)?$"
)


@dataclass(frozen=True)
class ResolvedModel:
    """Where a base-model name points.

    ``name`` is the name as asked; ``target`` is the built-in id (``kind == "builtin"``) or a
    directory that ``from_pretrained`` loads (``"local"``: the directory itself;
    ``"hf_cache"``: the snapshot directory of ``hf_id`` in the local cache).
    """

    name: str
    kind: ModelKind
    target: str
    hf_id: str | None = None


def localsession_home() -> Path:
    """The state directory: ``$LOCALSESSION_HOME`` or ``~/.localsession``."""
    env = os.environ.get(HOME_ENV)
    return Path(env).expanduser() if env else Path.home() / ".localsession"


def hf_hub_cache() -> Path:
    """The Hugging Face hub cache directory, following ``huggingface_hub``'s precedence."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    if os.environ.get("XDG_CACHE_HOME"):
        return Path(os.environ["XDG_CACHE_HOME"]).expanduser() / "huggingface" / "hub"
    return Path.home() / ".cache" / "huggingface" / "hub"


def _parse_env_map(raw: str) -> dict[str, str]:
    mapping: dict[str, str] = {}
    for entry in raw.split(","):
        entry = entry.strip()
        if not entry:
            continue
        name, sep, target = entry.partition("=")
        if not sep or not name.strip() or not target.strip():
            raise ValueError(
                f"{MODEL_MAP_ENV}: entry {entry!r} is not NAME=TARGET "
                f'(example: {MODEL_MAP_ENV}="openai/gpt-oss-20b=localsession/small")'
            )
        mapping[name.strip()] = target.strip()
    return mapping


def _read_map_file(path: Path) -> dict[str, str]:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: not a readable JSON object ({exc})") from exc
    if not isinstance(data, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in data.items()
    ):
        raise ValueError(f'{path}: must be a JSON object of strings, {{"NAME": "TARGET"}}')
    return dict(data)


def model_map() -> dict[str, str]:
    """The name map: ``models.json`` overlaid with ``LOCALSESSION_MODEL_MAP`` (env wins)."""
    mapping = _read_map_file(localsession_home() / "models.json")
    mapping.update(_parse_env_map(os.environ.get(MODEL_MAP_ENV, "")))
    return mapping


def _snapshot_dir(repo_dir: Path) -> Path | None:
    """The snapshot of a cached repo to load: ``refs/main`` if present, else the newest."""
    snapshots = repo_dir / "snapshots"
    ref = repo_dir / "refs" / "main"
    if ref.is_file():
        commit = ref.read_text(encoding="utf-8").strip()
        candidate = snapshots / commit
        if (candidate / "config.json").is_file():
            return candidate
    if not snapshots.is_dir():
        return None
    found = [d for d in snapshots.iterdir() if (d / "config.json").is_file()]
    if not found:
        return None
    return max(found, key=lambda d: (d.stat().st_mtime, d.name))


def hf_cache_models() -> dict[str, Path]:
    """``{"org/name": snapshot_dir}`` for every loadable model in the local HF cache."""
    cache = hf_hub_cache()
    found: dict[str, Path] = {}
    if not cache.is_dir():
        return found
    for repo_dir in sorted(cache.iterdir()):
        if not repo_dir.name.startswith("models--") or not repo_dir.is_dir():
            continue
        snapshot = _snapshot_dir(repo_dir)
        if snapshot is not None:
            found[repo_dir.name[len("models--") :].replace("--", "/")] = snapshot
    return found


def list_base_models() -> list[str]:
    """Every name a session may use: built-ins, then mapped names, then HF-cache models."""
    names: list[str] = list(BUILTIN_MODELS)
    for name in [*model_map(), *hf_cache_models()]:
        if name not in names:
            names.append(name)
    return names


def _is_model_dir(path: str) -> bool:
    return (Path(path).expanduser() / "config.json").is_file()


def _resolve_direct(name: str, asked: str) -> ResolvedModel | None:
    """Steps 2-4 (built-in, local directory, HF cache) without the map."""
    if name in BUILTIN_MODELS:
        return ResolvedModel(name=asked, kind="builtin", target=name)
    if _is_model_dir(name):
        return ResolvedModel(
            name=asked, kind="local", target=str(Path(name).expanduser().resolve())
        )
    cached = hf_cache_models().get(name)
    if cached is not None:
        return ResolvedModel(name=asked, kind="hf_cache", target=str(cached), hf_id=name)
    return None


def _unknown_model_message(name: str, detail: str = "") -> str:
    available = "\n".join(f"  - {m}" for m in list_base_models())
    home = localsession_home() / "models.json"
    return (
        f"unknown base model {name!r}{detail}. Available models:\n{available}\n"
        "To use a local model under this name, map it to a built-in id, a directory holding "
        "a config.json, or a model id in the local Hugging Face cache, either with the "
        "environment variable\n"
        f'  {MODEL_MAP_ENV}="{name}=localsession/small"\n'
        f"or in {home}:\n"
        f'  {{"{name}": "/path/to/model/dir"}}'
    )


def hub_content_name(model: str) -> str:
    """The Hub content name a model is published under locally: ``localsession/tiny`` →
    ``localsession-tiny`` (Hub content names allow only letters, digits and hyphens)."""
    return re.sub(r"[^a-zA-Z0-9]+", "-", model).strip("-")[:63]


def canonical_model_name(base_model: str) -> str:
    """The model name a session's ``base_model`` stands for.

    A Hub content ARN is reduced to its content name; a Hub content name that is not itself
    a known name becomes the listed model it stands for. Anything else is returned as is
    (and resolved, or refused, by :func:`resolve_base_model`).
    """
    match = _HUB_ARN_RE.match(base_model)
    name = match["name"] if match else base_model
    if name in BUILTIN_MODELS or name in model_map():
        return name  # the common case, without scanning the HF cache
    known = list_base_models()
    if name in known:
        return name
    return next((m for m in known if hub_content_name(m) == name), name)


def resolve_base_model(name: str) -> ResolvedModel:
    """Resolve ``name`` through the map, the built-ins, local directories and the HF cache.

    Hub content ARNs and names are accepted too (see the module docstring). Raises
    ``ValueError`` (listing the available models and how to map one) when nothing matches.
    Never downloads anything.
    """
    name = canonical_model_name(name)
    mapping = model_map()
    if name in mapping:
        target = mapping[name]
        resolved = _resolve_direct(target, name)
        if resolved is None:
            raise ValueError(
                _unknown_model_message(
                    name,
                    f" (it is mapped to {target!r}, which is not a built-in, a model "
                    "directory, or a model in the local Hugging Face cache)",
                )
            )
        return resolved
    resolved = _resolve_direct(name, name)
    if resolved is None:
        raise ValueError(_unknown_model_message(name))
    return resolved
