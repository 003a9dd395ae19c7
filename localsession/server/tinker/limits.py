"""What ``get_server_capabilities`` reports of each model beyond its name: the context
length its sessions enforce (``SupportedModel.max_context_length``).

The limit is the one the engine applies (engine/torch_engine.py ``max_positions``): a model
map entry's ``max_context`` (``NAME=TARGET;max_context=N``), else the model's own
``max_position_embeddings``, read here from its ``config.json`` without loading it. A GGUF
file's is known only once it is converted, so it is left out (the field is optional).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from localsession.chat_format import MAX_POSITIONS
from localsession.runtime.models.catalog import ModelCatalog


def max_context(catalog: ModelCatalog, base_model: str) -> int | None:
    """Prompt plus ``max_tokens`` positions sessions on ``base_model`` accept (None: not
    known without loading the model)."""
    try:
        resolved = catalog.resolve(base_model)
    except ValueError:
        return None
    if resolved.max_context:
        return int(resolved.max_context)
    if resolved.kind == "builtin":
        return MAX_POSITIONS
    if resolved.kind not in ("local", "hf_cache"):
        return None
    try:
        config = json.loads((Path(resolved.target) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    found = config.get("max_position_embeddings")
    if found is None and isinstance(config.get("text_config"), dict):  # multimodal configs
        found = config["text_config"].get("max_position_embeddings")
    return found if isinstance(found, int) and found > 0 else None


def supported_models(catalog: ModelCatalog, names: list[str]) -> list[dict[str, Any]]:
    """``GetServerCapabilitiesResponse.supported_models`` for ``names``."""
    rows = []
    for name in names:
        row: dict[str, Any] = {"model_name": name, "trainable": True, "sampleable": True}
        limit = max_context(catalog, name)
        if limit is not None:  # the limit sessions on it enforce
            row["max_context_length"] = limit
        rows.append(row)
    return rows
