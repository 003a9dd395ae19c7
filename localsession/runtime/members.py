"""The members each request structure may carry, read from botocore's model of the service.

``MEMBERS[shape]`` is the set of member names the service model defines: keyed by operation
name for operation inputs (``ExecuteTrainingOperation``, less the members bound to the URI),
by union member for op configs (``forwardBackward``, ``sample``, ...) and by shape name for
everything they nest (``Datum``, ``ModelInput``, ``EncodedTextChunk``, ``TensorData``, ...).
The runtime's shapes come from ``sagemakertrainingsessionruntime``; ``CreateTrainingSession``
from ``sagemaker``, whose model is large, so it is read only when first asked for. Nothing is
written here by hand: a new member in botocore's model is accepted without a code change.
:func:`known_members` refuses any other member, naming it and the ones the shape takes.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping
from typing import Any

from localsession.runtime.errors import validation

RUNTIME, CONTROL_PLANE = "sagemakertrainingsessionruntime", "sagemaker"
RUNTIME_OPERATIONS = ("ExecuteTrainingOperation", "ExecuteSamplingOperation")
CONTROL_PLANE_OPERATIONS = ("CreateTrainingSession",)


@functools.lru_cache(maxsize=2)
def service_model(service: str) -> Any:
    """botocore's ``ServiceModel`` for ``service``, read once per process from botocore's
    data files (a loader, not a whole botocore session: the same model, sooner)."""
    from botocore.loaders import create_loader
    from botocore.model import ServiceModel

    return ServiceModel(create_loader().load_service_model(service, "service-2"), service)


def _walk(shape: Any, key: str, out: dict[str, frozenset[str]]) -> None:
    if shape.type_name == "list":
        _walk(shape.member, shape.member.name, out)
    elif shape.type_name == "map":
        _walk(shape.value, shape.value.name, out)
    elif shape.type_name == "structure" and key not in out:
        out[key] = frozenset(shape.members)
        union = bool(shape.metadata.get("union"))
        for name, member in shape.members.items():
            _walk(member, name if union else member.name, out)


def _operation(service: str, operation: str) -> dict[str, frozenset[str]]:
    shape = service_model(service).operation_model(operation).input_shape
    out: dict[str, frozenset[str]] = {}
    body = {n: m for n, m in shape.members.items() if "location" not in m.serialization}
    out[operation] = frozenset(body)
    for member in body.values():
        _walk(member, member.name, out)
    return out


@functools.lru_cache(maxsize=1)
def runtime_members() -> dict[str, frozenset[str]]:
    out: dict[str, frozenset[str]] = {}
    for operation in RUNTIME_OPERATIONS:
        for key, members in _operation(RUNTIME, operation).items():
            out.setdefault(key, members)
    return out


@functools.lru_cache(maxsize=1)
def control_plane_members() -> dict[str, frozenset[str]]:
    out: dict[str, frozenset[str]] = {}
    for operation in CONTROL_PLANE_OPERATIONS:
        out[operation] = _operation(CONTROL_PLANE, operation)[operation]
    return out


class _Members(Mapping[str, frozenset[str]]):
    """``MEMBERS``: the runtime's shapes, then the control plane's, each loaded on first use."""

    def __getitem__(self, shape: str) -> frozenset[str]:
        if shape in CONTROL_PLANE_OPERATIONS:
            return control_plane_members()[shape]
        return runtime_members()[shape]

    def __iter__(self) -> Iterator[str]:
        yield from runtime_members()
        yield from CONTROL_PLANE_OPERATIONS

    def __len__(self) -> int:
        return len(runtime_members()) + len(CONTROL_PLANE_OPERATIONS)


MEMBERS: Mapping[str, frozenset[str]] = _Members()

#: ``MEMBERS`` by shape, once asked for: a dict lookup (``MEMBERS[...]`` is a Python call).
_ALLOWED: dict[str, frozenset[str]] = {}


def known_members(value: dict[str, Any], shape: str, where: str) -> None:
    """Refuse a member the service model does not define for ``shape``."""
    allowed = _ALLOWED.get(shape)
    if allowed is None:
        allowed = _ALLOWED[shape] = MEMBERS[shape]
    if value.keys() <= allowed:
        return
    for key in value:
        if key not in allowed:
            raise validation(
                f"{where} has unknown member {str(key)[:100]!r}; {shape} takes only "
                + ", ".join(sorted(allowed))
            )
