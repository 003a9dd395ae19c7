"""The fast path of botocore's client-side parameter check and the wire's copy: one pass,
compiled per shape. The exact path is client/param_check.py; this module only ever returns
what that one returns, or hands the request to it.

botocore's ``ParamValidator`` makes a Python call per value of a document (a loss input's
``TensorData.data``) and an ``isinstance`` per token: ~2 ms for an 8×128
``forward_backward``, on every op. :func:`conformer` compiles a shape once into a function
that proves a request valid and copies it in the same pass, with checks that run in C over
whole lists (``set(map(type, ...))``). It proves only requests made of plain JSON values
(``dict``, ``list``/``tuple``, ``str``, ``int``, ``float``, ``bool``, ``None``), for which
the copy is the JSON round trip. Anything else raises :class:`Unproven`, and
:func:`checked_copy` and :func:`check` hand it to the exact path, which asks botocore: the
proof may be strict where botocore is lenient, never the other way round
(tests/client/test_param_check_fast.py holds it to that against botocore).

What botocore checks, and so what the proof mirrors: a structure is a ``dict`` with its
required members, no unknown ones, and (for a tagged union) exactly one; a list is a list or
tuple; a map is a ``dict``; a scalar is of its type; ``min`` bounds a number, or a string's or
list's length; a document holds ``None``, text, numbers, booleans, lists and dicts at any
depth. Blobs, timestamps and JSON-value headers are left to botocore.

:func:`wire_copy` is the copy alone, for a relaxed client (no botocore check): what
``param_check.wire_copy`` (the JSON round trip) returns (tests/client/test_wire_copy.py).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any

from localsession.client import param_check

Conform = Callable[[Any], Any]


class Unproven(Exception):
    """The request is not proven valid and plain: botocore must decide."""


_UNPROVEN = Unproven()

#: The plain values each scalar type proves (a bool is an int to botocore, as in Python).
_EXACT: dict[str, frozenset[type]] = {
    "string": frozenset({str}),
    "integer": frozenset({int, bool}),
    "long": frozenset({int, bool}),
    "float": frozenset({float, int, bool}),
    "double": frozenset({float, int, bool}),
    "boolean": frozenset({bool}),
}
#: Values JSON keeps as they are; ``type(x) in`` rather than ``isinstance``: subclasses (an
#: ``IntEnum``, numpy's float64) take the JSON round trip, which decides what they become.
_PLAIN = frozenset({str, int, float, bool, type(None)})
#: Metadata that makes botocore check each item of a list of scalars, not only its type.
_CONSTRAINTS = {"required", "min", "document", "union"}


def _unmodelled(value: Any) -> Any:
    """A shape this module does not model: botocore decides."""
    raise _UNPROVEN


def _document(node: Any) -> Any:
    kind = type(node)
    if kind in _PLAIN:
        return node
    if kind is list:
        leaves = set(map(type, node)) <= _PLAIN  # numbers only: copied in C
        return list(node) if leaves else [*map(_document, node)]
    if kind is dict and set(map(type, node)) <= {str}:
        return {key: _document(item) for key, item in node.items()}
    raise _UNPROVEN


def _lowest(shape: Any) -> Any:
    """The ``min`` botocore enforces (a host label has an implicit 1), else None."""
    if "min" in shape.metadata:
        return shape.metadata["min"]
    serialization = getattr(shape, "serialization", None) or {}
    return 1 if serialization.get("hostLabel") else None


def _scalar(kinds: frozenset[type], lowest: Any, sized: bool) -> Conform:
    measure: Callable[[Any], Any] = len if sized else (lambda value: value)  # a string: length

    def scalar(given: Any) -> Any:
        if type(given) not in kinds or (lowest is not None and measure(given) < lowest):
            raise _UNPROVEN
        return given

    return scalar


class _Compiler:
    """Builds the function of each shape once; a shape reached again (recursion) shares it."""

    def __init__(self) -> None:
        self.built: dict[str, Conform] = {}

    def conform(self, shape: Any) -> Conform:
        from botocore.utils import is_json_value_header

        key = f"{shape.type_name}:{shape.name}:{_lowest(shape)}"  # a host label adds a min
        if key in self.built:
            return self.built[key]
        slot: list[Conform] = []
        self.built[key] = lambda value: slot[0](value)  # a recursive shape waits for its body
        kind = shape.type_name
        if is_json_value_header(shape):
            made: Conform = _unmodelled
        elif kind == "structure":
            made = _document if shape.is_document_type else self._structure(shape)
        elif kind == "list":
            made = self._list(shape)
        elif kind == "map":
            made = self._map(shape)
        elif kind in _EXACT:
            made = _scalar(_EXACT[kind], _lowest(shape), kind == "string")
        else:
            made = _unmodelled
        slot.append(made)
        self.built[key] = made
        return made

    def _structure(self, shape: Any) -> Conform:
        # scalar members are checked here, without a call: (types, min, whether on the length)
        scalars = {
            name: (_EXACT[member.type_name], _lowest(member), member.type_name == "string")
            for name, member in shape.members.items()
            if member.type_name in _EXACT
        }
        nodes = {n: self.conform(m) for n, m in shape.members.items() if n not in scalars}
        required = frozenset(shape.metadata.get("required", ()))
        union = shape.is_tagged_union

        def structure(value: Any) -> Any:
            if type(value) is not dict or (union and len(value) != 1):
                raise _UNPROVEN
            if not required <= value.keys():
                raise _UNPROVEN
            out = {}
            try:
                for name, item in value.items():
                    rule = scalars.get(name)
                    if rule is None:
                        out[name] = nodes[name](item)
                        continue
                    kinds, lowest, sized = rule
                    if type(item) not in kinds:
                        raise _UNPROVEN
                    if lowest is not None and (len(item) if sized else item) < lowest:
                        raise _UNPROVEN
                    out[name] = item
            except KeyError:  # an unknown member
                raise _UNPROVEN from None
            return out

        return structure

    def _list(self, shape: Any) -> Conform:
        member, lowest = shape.member, _lowest(shape)
        each = self.conform(member)
        kinds = _EXACT.get(member.type_name, frozenset())
        # botocore checks only the type of a scalar member without a min or other constraint
        plain = bool(kinds) and not (_CONSTRAINTS & member.metadata.keys())

        def listed(value: Any) -> Any:
            if type(value) not in (list, tuple) or (lowest is not None and len(value) < lowest):
                raise _UNPROVEN
            if plain and set(map(type, value)) <= kinds:  # a row of numbers: checked in C
                return list(value)
            return [*map(each, value)]

        return listed

    def _map(self, shape: Any) -> Conform:
        key, item = self.conform(shape.key), self.conform(shape.value)
        any_text = shape.key.type_name == "string" and _lowest(shape.key) is None

        def mapped(value: Any) -> Any:
            if type(value) is not dict or not set(map(type, value)) <= {str}:
                raise _UNPROVEN
            names = list(value) if any_text else [*map(key, value)]  # any str key is valid
            return dict(zip(names, map(item, value.values()), strict=True))

        return mapped


def wire_copy(data: Any) -> Any:
    """What ``param_check.wire_copy`` (``json.loads(json.dumps(data))``) returns (or
    raises), without the text in
    between for plain data: dicts with string keys and lists or tuples are copied, plain
    scalars kept, and anything else goes through JSON itself. An 8x128 ``forward_backward``
    request: ~1 ms through JSON, ~0.24 ms here."""
    kind = type(data)
    if kind is list or kind is tuple:
        if set(map(type, data)) <= _PLAIN:  # a row of numbers: copied in C
            return list(data)
        return [item if type(item) in _PLAIN else wire_copy(item) for item in data]
    if kind is dict and set(map(type, data)) <= {str}:  # plain values kept without a call
        return {k: v if type(v) in _PLAIN else wire_copy(v) for k, v in data.items()}
    if kind in _PLAIN:
        return data
    return json.loads(json.dumps(data))


@functools.lru_cache(maxsize=64)
def conformer(shape: Any) -> Conform:
    """The function of an operation's input ``shape``: a request botocore's ``ParamValidator``
    accepts and made of plain JSON values in, its JSON round trip out; :class:`Unproven`
    raised for anything else (botocore must decide)."""
    return _Compiler().conform(shape)


def checked_copy(params: dict[str, Any], shape: Any) -> Any:
    """``param_check.checked_copy``: proven and copied in one pass, else the exact path."""
    try:
        return conformer(shape)(params)
    except Unproven:  # not plain, or not valid: botocore decides
        return param_check.checked_copy(params, shape)


def check(params: dict[str, Any], shape: Any) -> None:
    """``param_check.check``: proven in one pass, else the exact path."""
    try:
        conformer(shape)(params)
    except Unproven:  # not plain, or not valid: botocore decides
        param_check.check(params, shape)
