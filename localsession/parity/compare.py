"""A structural diff of two JSON values, numbers within declared tolerances.

Shapes compare exactly (the same keys, the same list lengths, the same types), and so do
strings, booleans, ``None`` and error codes and statuses, which are strings and integers.
Integers compare exactly. A float compares within the tolerance its key declares: the rule
for the innermost dict key on its path in ``tolerances["keys"]``, else ``tolerances
["default"]``; a rule is ``{"rtol": r, "atol": a}`` (``|got - recorded| <= atol + rtol *
|recorded|``) or ``"any"`` (any number: a wall-clock metric such as ``mfu``).
"""

from __future__ import annotations

import math
from typing import Any

from localsession import vocab

#: The tolerances localsession records with (docs/parity.md#tolerances). float32 results
#: of one model agree to about 1e-5 between runs whose batches were composed differently.
DEFAULT_TOLERANCES: dict[str, Any] = {
    "default": {"rtol": 1e-4, "atol": 1e-5},
    "keys": {
        vocab.Metric.MFU: "any",  # model FLOPs utilisation: divides by the wall clock
        vocab.Metric.PROMISED_FLOPS: "any",  # the device's peak: differs between machines
    },
}
#: Diffs listed in full; the rest are counted.
MAX_LISTED = 20


def _rule(tolerances: dict[str, Any], key: str) -> Any:
    keys = tolerances.get("keys") or {}
    return keys.get(key, tolerances.get("default") or {"rtol": 0.0, "atol": 0.0})


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def diff(
    recorded: Any,
    got: Any,
    tolerances: dict[str, Any] | None = None,
    path: str = "$",
    key: str = "",
) -> list[str]:
    """Every difference between ``recorded`` and ``got``, one line each, naming its path."""
    tol = tolerances if tolerances is not None else DEFAULT_TOLERANCES
    out: list[str] = []
    _walk(recorded, got, tol, path, key, out)
    return out


def _walk(a: Any, b: Any, tol: dict[str, Any], path: str, key: str, out: list[str]) -> None:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in a:
            if k not in b:
                out.append(f"{path}.{k}: missing (recorded {_show(a[k])})")
        for k in b:
            if k not in a:
                out.append(f"{path}.{k}: not recorded (got {_show(b[k])})")
        for k in a:
            if k in b:
                _walk(a[k], b[k], tol, f"{path}.{k}", str(k), out)
        return
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            out.append(f"{path}: length {len(b)}, recorded {len(a)}")
            return
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _walk(x, y, tol, f"{path}[{i}]", key, out)
        return
    if _number(a) and _number(b):
        if isinstance(a, int) and isinstance(b, int):
            if a != b:
                out.append(f"{path}: {b}, recorded {a}")
            return
        rule = _rule(tol, key)
        if rule == "any":
            return
        fa, fb = float(a), float(b)
        if math.isnan(fa) and math.isnan(fb):
            return
        limit = float(rule.get("atol", 0.0)) + float(rule.get("rtol", 0.0)) * abs(fa)
        if not abs(fb - fa) <= limit:
            out.append(f"{path}: {fb!r}, recorded {fa!r} (|diff| {abs(fb - fa):.3g} > {limit:.3g})")
        return
    if type(a) is not type(b) or a != b:
        out.append(f"{path}: {_show(b)}, recorded {_show(a)}")


def summarise(lines: list[str], limit: int = MAX_LISTED) -> str:
    """Diff lines for a message: the first ``limit`` and a count of the rest."""
    shown = lines[:limit]
    more = len(lines) - len(shown)
    return "\n".join(f"  {line}" for line in shown) + (f"\n  (+{more} more)" if more else "")
