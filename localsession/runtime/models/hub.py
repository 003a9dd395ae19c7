"""The local SageMaker Public Hub: ``ListHubContents`` and ``DescribeHubContent``.

The SDK names base models through the Hub (docs/wire.md#3): ``list_base_models()`` scans
it and reports each entry's ``HuggingfaceId``, a model id is described to get a versioned ARN,
and ``get_tokenizer()`` calls ``AutoTokenizer.from_pretrained(HuggingfaceId)``. Locally, every
model the service's catalog lists is one Hub entry:

- its content name is :func:`~localsession.runtime.models.catalog.hub_content_name` of the model
  name (``localsession/tiny`` → ``localsession-tiny``);
- its keywords carry ``@capability:training_session`` (so the SDK lists it) and
  ``@huggingface-id:<id>`` (lowercased, as the real Hub's keywords are);
- its document's ``HuggingfaceId`` is the id a user types
  (:func:`~localsession.runtime.models.catalog.public_id`): ``localsession/tiny``, a mapped
  ``openai/gpt-oss-20b``, a real ``HuggingFaceTB/SmolLM2-135M-Instruct``.

So that ``AutoTokenizer.from_pretrained(id)`` works offline in the client, describing an
entry exports the model's tokenizer into **localsession's own** Hugging Face cache,
``<home>/hf-hub`` (``models--org--name/snapshots/<rev>`` with ``refs/main``), never into the
user's: a mapped ``openai/gpt-oss-20b`` must not leave a substitute tokenizer where real work
would find it. ``localsession serve`` prints ``HF_HUB_CACHE=<home>/hf-hub`` and
``HF_HUB_OFFLINE=1`` among its exports; the revision is a hash of what the id resolves to, so
remapping a name re-exports it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
import threading
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from localsession.runtime import errors
from localsession.runtime.models.catalog import ModelCatalog, hub_content_name, public_id

logger = logging.getLogger(__name__)

PUBLIC_HUB = "SageMakerPublicHub"
CONTENT_VERSION = "1.0.0"
#: The directory under the service's home that serves as the clients' HF cache.
HUB_CACHE_DIR = "hf-hub"
#: Bumped when what an export writes changes (the built-in tokenizer, say).
EXPORT_FORMAT = 2
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


def _entries(catalog: ModelCatalog) -> dict[str, str]:
    """``{Hub content name: model}`` for every listed id, first name wins."""
    entries: dict[str, str] = {}
    for listed in catalog.names():
        entries.setdefault(hub_content_name(listed), catalog.canonical_name(listed))
    return entries


def _keywords(model: str) -> list[str]:
    return ["@capability:training_session", f"@huggingface-id:{public_id(model).lower()}"]


def list_hub_contents(
    request: dict[str, Any], region: str, catalog: ModelCatalog
) -> dict[str, Any]:
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
            for name, model in _entries(catalog).items()
        ]
    }


def _identity(catalog: ModelCatalog, model: str) -> str:
    """A revision id for what ``model`` resolves to now (40 hex digits, like a commit)."""
    resolved = catalog.resolve(model)
    stamp = 0
    if resolved.kind != "builtin":
        try:
            stamp = os.stat(resolved.target).st_mtime_ns
        except OSError:
            stamp = 0
    key = json.dumps([EXPORT_FORMAT, resolved.kind, resolved.target, stamp, resolved.name])
    return hashlib.sha1(key.encode("utf-8")).hexdigest()


def export_tokenizer(catalog: ModelCatalog, model: str, cache: Path) -> Path:
    """Export ``model``'s tokenizer into the HF cache ``cache`` under its public id (once per
    resolution); return the snapshot directory."""
    repo = cache / ("models--" + public_id(model).replace("/", "--"))
    revision = _identity(catalog, model)
    snapshot = repo / "snapshots" / revision
    with _export_lock:
        if not (snapshot / "tokenizer_config.json").is_file():
            snapshot.parent.mkdir(parents=True, exist_ok=True)
            staging = Path(tempfile.mkdtemp(prefix=".export-", dir=snapshot.parent))
            try:
                catalog.export_tokenizer(model, staging)
                shutil.rmtree(snapshot, ignore_errors=True)
                staging.rename(snapshot)
            finally:
                shutil.rmtree(staging, ignore_errors=True)
        ref = repo / "refs" / "main"
        if not ref.is_file() or ref.read_text(encoding="utf-8") != revision:
            ref.parent.mkdir(parents=True, exist_ok=True)
            tmp = ref.with_name(".main.tmp")
            tmp.write_text(revision, encoding="utf-8")
            tmp.replace(ref)
    return snapshot


def export_all(catalog: ModelCatalog, cache: Path) -> None:
    """Export every listed model's tokenizer into the HF cache ``cache`` ahead of the first
    describe (a server warms its Hub with this on a background thread: a GGUF tokenizer takes
    seconds to read). The GGUF models' go last, so a client that loads a built-in or mapped
    name's tokenizer right after the server starts (tinker-cookbook's ``sl_loop``) finds it."""
    for listed in sorted(catalog.names(), key=lambda name: _converted(catalog, name)):
        try:
            export_tokenizer(catalog, catalog.canonical_name(listed), cache)
        except Exception as exc:  # noqa: BLE001 - describe reports it again, per model
            logger.warning("could not export the tokenizer of %r: %s", listed, exc)


def _converted(catalog: ModelCatalog, name: str) -> bool:
    """Whether ``name``'s tokenizer is converted from a GGUF file (seconds, not milliseconds)."""
    try:
        return catalog.resolve(name).kind == "gguf"
    except Exception:  # noqa: BLE001 - export_all reports it
        return True


def describe_hub_content(
    request: dict[str, Any], region: str, catalog: ModelCatalog, cache: Path
) -> dict[str, Any]:
    """DescribeHubContent of one base model, with its ``HuggingfaceId`` document; exports
    its tokenizer into the HF cache ``cache`` (see the module docstring)."""
    _check_hub(request)
    name = request.get("HubContentName")
    entries = _entries(catalog)
    model = entries.get(name) if isinstance(name, str) else None
    if name is None or model is None:
        raise errors.not_found(
            f"Hub content {name!r} does not exist. Local Hub models: "
            + ", ".join(sorted(entries))
            + ". Map a name to a local model with --model-map NAME=TARGET.",
            runtime=False,
        )
    try:
        export_tokenizer(catalog, model, cache)
    except Exception as exc:  # noqa: BLE001 - one broken model must not break the listing
        # The listing still answers; the client's tokenizer load will say it is missing.
        logger.warning("could not export the tokenizer of %r: %s", model, exc)
    document = {"HuggingfaceId": public_id(model), "LocalModel": model}
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
