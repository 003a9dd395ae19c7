"""botocore's client-side parameter check, compiled per shape for the requests that pass it.

``check_params`` must refuse exactly what botocore's ``ParamValidator`` refuses, with its
report. But ``ParamValidator`` makes a Python call per value of a document (a loss input's
``TensorData.data``) and an ``isinstance`` per token: ~2 ms for an 8×128 ``forward_backward``,
paid on every op of a strict client. :func:`proves_valid` compiles a shape once into a
predicate that proves a request valid with checks that run in C over whole lists
(``set(map(type, ...))``). A request it cannot prove valid goes to botocore itself, which
decides and writes the report: the predicate may be strict where botocore is lenient, never
the other way round (tests/client/test_param_check.py holds it to that against botocore).

What botocore checks, and so what the predicate mirrors: a structure is a ``dict`` with its
required members, no unknown ones, and (for a tagged union) exactly one; a list is a list or
tuple; a map is a ``dict``; a scalar is an instance of its type; ``min`` bounds a number, or
a string's or list's length; a document holds ``None``, text, numbers, booleans, lists and
dicts at any depth. Blobs, timestamps and JSON-value headers are left to botocore.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

Check = Callable[[Any], bool]

#: What a document may hold below a list without a look at each item.
_DOCUMENT_LEAVES = {str, int, float, bool, type(None)}
_DOCUMENT_SCALARS = (str, int, bool, float)
#: Metadata that makes botocore check each item of a list of scalars, not only its type.
_CONSTRAINTS = {"required", "min", "document", "union"}


def _undecided(value: Any) -> bool:
    """A shape this module does not model: botocore decides."""
    del value
    return False  # not proven: botocore checks it


def _document(value: Any) -> bool:
    if value is None or type(value) in _DOCUMENT_LEAVES:
        return True
    if isinstance(value, dict):
        return all(map(_document, value.values()))
    if isinstance(value, list):
        return set(map(type, value)) <= _DOCUMENT_LEAVES or all(map(_document, value))
    return isinstance(value, _DOCUMENT_SCALARS)


def _lowest(shape: Any) -> Any:
    """The ``min`` botocore enforces (a host label has an implicit 1), else None."""
    if "min" in shape.metadata:
        return shape.metadata["min"]
    serialization = getattr(shape, "serialization", None) or {}
    return 1 if serialization.get("hostLabel") else None


def _scalar(kinds: tuple[type, ...], lowest: Any, sized: bool) -> Check:
    if lowest is None:
        return lambda value: isinstance(value, kinds)
    measure: Callable[[Any], Any] = len if sized else (lambda value: value)  # a string: length
    return lambda value: isinstance(value, kinds) and not measure(value) < lowest


class _Compiler:
    """Builds the predicate of each shape once; a shape reached again (recursion) shares it."""

    def __init__(self, scalar_types: dict[str, tuple[type, ...]]) -> None:
        self.scalar_types = scalar_types
        self.built: dict[str, Check] = {}

    def check(self, shape: Any) -> Check:
        from botocore.utils import is_json_value_header

        key = f"{shape.type_name}:{shape.name}:{_lowest(shape)}"  # a host label adds a min
        if key in self.built:
            return self.built[key]
        slot: list[Check] = []
        self.built[key] = lambda value: slot[0](value)  # a recursive shape waits for its body
        kind = shape.type_name
        if is_json_value_header(shape):
            made: Check = _undecided
        elif kind == "structure":
            made = _document if shape.is_document_type else self._structure(shape)
        elif kind == "list":
            made = self._list(shape)
        elif kind == "map":
            made = self._map(shape)
        elif kind in self.scalar_types:
            made = _scalar(self.scalar_types[kind], _lowest(shape), kind == "string")
        else:
            made = _undecided
        slot.append(made)
        self.built[key] = made
        return made

    def _structure(self, shape: Any) -> Check:
        members = {name: self.check(member) for name, member in shape.members.items()}
        required = frozenset(shape.metadata.get("required", ()))
        union = shape.is_tagged_union

        def structure(value: Any) -> bool:
            if not isinstance(value, dict) or (union and len(value) != 1):
                return False  # not proven: botocore checks it
            if not required <= value.keys():
                return False  # not proven: botocore checks it
            for name, item in value.items():
                check = members.get(name)
                if check is None or not check(item):
                    return False  # not proven: botocore checks it
            return True

        return structure

    def _list(self, shape: Any) -> Check:
        member, lowest = shape.member, _lowest(shape)
        item_check = self.check(member)
        kinds = self.scalar_types.get(member.type_name, ())
        # botocore checks only the type of a scalar member without a min or other constraint
        plain = bool(kinds) and not (_CONSTRAINTS & member.metadata.keys())

        def each_item(value: Any) -> bool:
            if plain:  # one issubclass per distinct type, not per item
                return all(issubclass(kind, kinds) for kind in set(map(type, value)))
            return all(map(item_check, value))

        def listed(value: Any) -> bool:
            if not isinstance(value, (list, tuple)):
                return False  # not proven: botocore checks it
            return (lowest is None or not len(value) < lowest) and each_item(value)

        return listed

    def _map(self, shape: Any) -> Check:
        key_check, value_check = self.check(shape.key), self.check(shape.value)

        def mapped(value: Any) -> bool:
            if not isinstance(value, dict):
                return False  # not proven: botocore checks it
            return all(map(key_check, value)) and all(map(value_check, value.values()))

        return mapped


@functools.lru_cache(maxsize=64)
def proves_valid(shape: Any) -> Check:
    """The predicate of an operation's input ``shape``: True only for a request botocore's
    ``ParamValidator`` accepts (False: botocore must decide)."""
    from botocore.validate import ParamValidator

    return _Compiler(ParamValidator.SCALAR_TYPES).check(shape)
