"""Checkpoints: ``tinker://`` paths resolved to model packages (a mixin of the Dialect).

A checkpoint is a package whose description is its ``tinker://`` path, so it is listed by
``localsession packages list`` and survives a restart: a path the in-memory index does not
know is looked up among the packages of the session group.
"""

from __future__ import annotations

import json
import threading
from datetime import datetime
from typing import Any

from localsession import vocab
from localsession.runtime import errors
from localsession.runtime.errors import ServiceError
from localsession.runtime.service import Service

#: The most rows one ``ListModelPackages`` page holds (runtime/paging.py).
PAGE_SIZE = 100
#: The output head's module name in the catalog's (Llama-family) models.
HEAD = "lm_head"


class Checkpoints:
    """Path -> package ARN index and TTLs; the Dialect sets the attributes."""

    service: Service
    lock: threading.Lock
    paths: dict[str, str]
    ttl: dict[str, datetime]
    metadata: dict[str, dict[str, Any]]

    def packages(self) -> list[dict[str, Any]]:
        """Every package this dialect saved (description = its tinker path), newest first."""
        found: list[dict[str, Any]] = []
        token: str | None = None
        while True:
            request: dict[str, Any] = {
                "ModelPackageGroupName": vocab.DEFAULT_GROUP,
                "MaxResults": PAGE_SIZE,
            }
            if token:
                request["NextToken"] = token
            try:
                page = self.service.list_model_packages(request)
            except ServiceError:
                return found
            for item in page.get("ModelPackageSummaryList", []):
                if str(item.get("ModelPackageDescription") or "").startswith("tinker://"):
                    found.append(item)
            token = page.get("NextToken")
            if not token:
                return found

    def package_of(self, path: str, *, required: bool = True) -> str:
        if not path.startswith("tinker://"):
            if required:
                raise errors.validation(f"path {path!r} must be a tinker:// checkpoint path")
            return ""
        with self.lock:
            arn = self.paths.get(path)
        if arn is None:
            for item in self.packages():
                if item["ModelPackageDescription"] == path:
                    arn = str(item["ModelPackageArn"])
                    break
        if arn is None:
            if required:
                raise errors.not_found(
                    f"checkpoint {path} does not exist on this server; list them with "
                    "RestClient.list_checkpoints or `localsession packages list`",
                    runtime=True,
                )
            return ""
        with self.lock:
            self.paths[path] = arn
        return arn

    def adapts_head(self, arn: str) -> bool:
        """Whether the package's adapter covers the output head (``train_unembed``): its
        ``adapter_config.json`` lists ``lm_head`` among its targets."""
        try:
            config_file = self.service.registry.path(arn) / "adapter_config.json"
            targets = json.loads(config_file.read_text(encoding="utf-8")).get("target_modules")
        except (OSError, ValueError, ServiceError):
            return False  # no adapter config (the fakes' packages): nothing on the head
        return isinstance(targets, list) and HEAD in targets

    def forget(self, path: str) -> None:
        with self.lock:
            self.paths.pop(path, None)
            self.ttl.pop(path, None)
            self.metadata.pop(path, None)
