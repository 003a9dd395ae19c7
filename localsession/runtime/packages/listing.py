"""The model registry's operations: List/Describe/Delete ModelPackage and the package groups.

:class:`ModelPackages` answers them in wire shapes over the on-disk :class:`Registry`
(runtime/packages/registry.py), which it opens only when first asked; the
:class:`Service` forwards its registry operations here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from localsession import vocab
from localsession.runtime.models import hub
from localsession.runtime.models.catalog import ModelCatalog, hub_content_name
from localsession.runtime.packages.registry import Registry
from localsession.runtime.paging import page


class ModelPackages:
    """The model-package operations over a registry (opened lazily by ``registry()``)."""

    def __init__(self, registry: Callable[[], Registry], catalog: ModelCatalog) -> None:
        self.registry = registry
        self.catalog = catalog

    def list_model_packages(self, request: dict[str, Any]) -> dict[str, Any]:
        """ListModelPackages, newest first, paginated by ``NextToken``."""
        packages = self.registry().list(str(request.get("ModelPackageGroupName") or ""))
        if request.get("SortOrder") == "Ascending":
            packages.reverse()
        return page(
            packages,
            request,
            "ModelPackageSummaryList",
            lambda p: {
                "ModelPackageArn": p.arn,
                "ModelPackageGroupName": p.group,
                "ModelPackageVersion": p.version,
                "CreationTime": p.created(),
                "ModelPackageDescription": p.description,
                "ModelPackageStatus": vocab.PackageStatus.COMPLETED,
            },
        )

    def describe_model_package(self, request: dict[str, Any]) -> dict[str, Any]:
        """DescribeModelPackage, with the fields the SDK reads (kind, base model, location)."""
        arn = str(request.get("ModelPackageName") or "")
        p = self.registry().get(arn)
        return {
            "ModelPackageName": p.group,
            "ModelPackageGroupName": p.group,
            "ModelPackageVersion": p.version,
            "ModelPackageArn": p.arn,
            "ModelPackageDescription": p.description,
            "CreationTime": p.created(),
            "ModelPackageStatus": vocab.PackageStatus.COMPLETED,
            "InferenceSpecification": {
                "Containers": [
                    {
                        "IsCheckpoint": p.kind == "checkpoint",
                        "BaseModel": {
                            "HubContentName": self.hub_name_of(p.base_model),
                            "HubContentVersion": hub.CONTENT_VERSION,
                        },
                        "ModelDataSource": {
                            "S3DataSource": {
                                "S3Uri": p.location(),
                                "S3DataType": "S3Prefix",
                            }
                        },
                    }
                ]
            },
            "CustomerMetadataProperties": {
                "LoraRank": str(p.lora_rank),
                "LoraAlpha": str(p.lora_alpha),
                "TrainingSession": p.session,
            },
        }

    def delete_model_package(
        self, request: dict[str, Any], *, delete_artifacts: bool = False
    ) -> dict[str, Any]:
        """DeleteModelPackage. In-process, ``delete_artifacts`` also removes the files;
        otherwise they move to ``retained/``. Returns where they went and how many were
        deleted (the in-process stand-in for the SDK's S3 step), and its ``S3Uri``."""
        arn = str(request.get("ModelPackageName") or "")
        registry = self.registry()
        location = registry.get(arn).location()
        kept, deleted = registry.delete(arn, keep_artifacts=not delete_artifacts)
        return {
            "RetainedAt": kept.as_uri() + "/" if kept else None,
            "ObjectsDeleted": deleted,
            "S3Uri": location,
        }

    def create_model_package_group(
        self, request: dict[str, Any], *, region: str | None = None
    ) -> dict[str, Any]:
        entry = self.registry().create_group(
            str(request.get("ModelPackageGroupName") or ""),
            str(request.get("ModelPackageGroupDescription") or ""),
            region,
        )
        return {"ModelPackageGroupArn": entry["ModelPackageGroupArn"]}

    def describe_model_package_group(self, request: dict[str, Any]) -> dict[str, Any]:
        return self.registry().describe_group(str(request.get("ModelPackageGroupName") or ""))

    def hub_name_of(self, model: str) -> str:
        """The ``BaseModel.HubContentName`` of a package: the model's Hub content name where
        that names the model back (so the SDK can rebuild a Hub ARN from it), else the model
        name."""
        name = hub_content_name(model)
        return name if self.catalog.canonical_name(name) == model else model
