"""The local SageMaker Public Hub: ``ListHubContents`` and ``DescribeHubContent``.

The SDK names base models through the Hub (docs/wire.md#3): ``list_base_models()`` scans
it, a model id or Hub content name is described to get a versioned ARN, and the tokenizer is
loaded from the ``HuggingfaceId`` in the Hub document. Locally, every model a session can start
on (:func:`~localsession.runtime.models.list_base_models`) is one Hub entry:

- its content name is :func:`~localsession.runtime.models.hub_content_name` of the model name
  (``localsession/tiny`` → ``localsession-tiny``);
- its keywords carry ``@capability:training_session`` (so the SDK lists it) and
  ``@huggingface-id:<model name>``;
- its document's ``HuggingfaceId`` is a location ``AutoTokenizer.from_pretrained`` loads
  offline: the model directory, the HF-cache id, or, for the built-in models (whose tokenizer
  is made locally), a directory under ``$LOCALSESSION_HOME/hub/`` the tokenizer is written to
  on first describe. The SDK prefers the document's id, so that location is also the id
  ``list_base_models()`` reports.
"""

from __future__ import annotations

import json
import threading
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from localsession.runtime import errors
from localsession.runtime.models import hub_content_name, list_base_models, resolve_base_model

PUBLIC_HUB = "SageMakerPublicHub"
CONTENT_VERSION = "1.0.0"
_EPOCH = datetime(2025, 1, 1, tzinfo=timezone.utc)
_export_lock = threading.Lock()


def hub_content_arn(region: str, name: str) -> str:
    return f"arn:aws:sagemaker:{region}:aws:hub-content/{PUBLIC_HUB}/Model/{name}/{CONTENT_VERSION}"


def _check_hub(request: dict[str, Any]) -> None:
    hub = request.get("HubName")
    if hub not in (PUBLIC_HUB, None) and not str(hub).endswith(f"/{PUBLIC_HUB}"):
        raise errors.not_found(
            f"Hub {hub!r} does not exist; the local Hub is {PUBLIC_HUB!r}.", runtime=False
        )
    if request.get("HubContentType", "Model") != "Model":
        raise errors.validation(
            f"HubContentType {request.get('HubContentType')!r} is not served locally; use 'Model'."
        )


def _entries() -> dict[str, str]:
    """``{Hub content name: model name}`` for every base model, first name wins."""
    entries: dict[str, str] = {}
    for model in list_base_models():
        entries.setdefault(hub_content_name(model), model)
    return entries


def _keywords(model: str) -> list[str]:
    return ["@capability:training_session", f"@huggingface-id:{model}"]


def list_hub_contents(request: dict[str, Any], region: str) -> dict[str, Any]:
    """ListHubContents: one summary per base model (a single page)."""
    _check_hub(request)
    return {
        "HubContentSummaries": [
            {
                "HubContentName": name,
                "HubContentArn": hub_content_arn(region, name),
                "HubContentVersion": CONTENT_VERSION,
                "HubContentType": "Model",
                "DocumentSchemaVersion": "2.0.0",
                "HubContentSearchKeywords": _keywords(model),
                "HubContentStatus": "Available",
                "CreationTime": _EPOCH,
            }
            for name, model in _entries().items()
        ]
    }


def _tokenizer_location(model: str, home: Path) -> str:
    """Where ``AutoTokenizer.from_pretrained`` finds this model's tokenizer, offline."""
    resolved = resolve_base_model(model)
    if resolved.kind == "local":
        return resolved.target
    if resolved.kind == "hf_cache" and resolved.hf_id:
        return resolved.hf_id
    directory = home / "hub" / hub_content_name(resolved.target)
    with _export_lock:
        if not (directory / "tokenizer_config.json").is_file():
            from localsession.engine.builtin import build_tokenizer  # transformers, lazily

            build_tokenizer().save_pretrained(str(directory))
    return str(directory.resolve())


def describe_hub_content(request: dict[str, Any], region: str, home: Path) -> dict[str, Any]:
    """DescribeHubContent of one base model, with its ``HuggingfaceId`` document."""
    _check_hub(request)
    name = request.get("HubContentName")
    model = _entries().get(name) if isinstance(name, str) else None
    if name is None or model is None:
        raise errors.not_found(
            f"Hub content {name!r} does not exist. Local Hub models: "
            + ", ".join(sorted(_entries()))
            + ". Map a name to a local model with --model-map NAME=TARGET.",
            runtime=False,
        )
    document = {"HuggingfaceId": _tokenizer_location(model, home), "LocalModel": model}
    return {
        "HubContentName": name,
        "HubContentArn": hub_content_arn(region, name),
        "HubContentVersion": CONTENT_VERSION,
        "HubContentType": "Model",
        "DocumentSchemaVersion": "2.0.0",
        "HubName": PUBLIC_HUB,
        "HubArn": f"arn:aws:sagemaker:{region}:aws:hub/{PUBLIC_HUB}",
        "HubContentDocument": json.dumps(document),
        "HubContentSearchKeywords": _keywords(model),
        "HubContentStatus": "Available",
        "CreationTime": _EPOCH,
    }
