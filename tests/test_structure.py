"""The package's shape, read from the source: no code outside ``localsession/runtime/`` reaches
a runtime object's ``_private`` attribute; it uses the public accessors instead.

Read with ``ast``, not by importing: every ``.py`` file of ``localsession`` (runtime excepted),
``fakes``, ``conformance``, ``tests``, ``examples`` and ``bench`` is checked for

- ``from localsession.runtime.x import _name`` (a runtime module's private name);
- ``module._name`` where ``module`` is bound to a runtime module in that file;
- ``obj._name`` where ``_name`` is a private attribute or method of a runtime class (a
  ``def _name`` or a ``self._name = ...`` in ``localsession/runtime/``), unless the file
  defines ``_name`` on its own classes too: then ``self._name`` (or another instance of the
  same class) is the file's own attribute, which is its business; so is an attribute of a
  name the file imports from elsewhere (``pool._worker`` of ``concurrent.futures.thread``).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RUNTIME = ROOT / "localsession" / "runtime"
CHECKED = ("localsession", "fakes", "conformance", "tests", "examples", "bench")


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def _own_private_attributes(tree: ast.Module) -> set[str]:
    """The private attributes the classes of ``tree`` define: their ``def _x`` and class-level
    ``_x``, and every ``self._x`` / ``cls._x`` they assign."""
    names: set[str] = set()
    for cls in (node for node in ast.walk(tree) if isinstance(node, ast.ClassDef)):
        for item in cls.body:
            if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and _private(item.name):
                names.add(item.name)
            targets = (
                item.targets
                if isinstance(item, ast.Assign)
                else [item.target]
                if isinstance(item, ast.AnnAssign)
                else []
            )
            names.update(t.id for t in targets if isinstance(t, ast.Name) and _private(t.id))
        for node in ast.walk(cls):
            target_lists = (
                node.targets
                if isinstance(node, ast.Assign)
                else [node.target]
                if isinstance(node, (ast.AnnAssign, ast.AugAssign))
                else []
            )
            for target in target_lists:
                for sub in ast.walk(target):
                    if (
                        isinstance(sub, ast.Attribute)
                        and isinstance(sub.value, ast.Name)
                        and sub.value.id in ("self", "cls")
                        and _private(sub.attr)
                    ):
                        names.add(sub.attr)
    return names


def _runtime_private_attributes() -> set[str]:
    names: set[str] = set()
    for path in RUNTIME.glob("*.py"):
        names |= _own_private_attributes(_parse(path))
    return names


def _checked_files() -> Iterator[Path]:
    for top in CHECKED:
        for path in sorted((ROOT / top).rglob("*.py")):
            if RUNTIME not in path.parents and ".venv" not in path.parts:
                yield path


def _runtime_module_aliases(tree: ast.Module) -> set[str]:
    """Names a file binds to runtime modules (``from localsession.runtime import service``,
    ``import localsession.runtime.service as svc``)."""
    modules = {path.stem for path in RUNTIME.glob("*.py")}
    aliases: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "localsession.runtime":
            aliases.update(a.asname or a.name for a in node.names if a.name in modules)
        elif isinstance(node, ast.Import):
            aliases.update(
                a.asname
                for a in node.names
                if a.asname and a.name.startswith("localsession.runtime.")
            )
    return aliases


def _foreign_imports(tree: ast.Module) -> set[str]:
    """Names a file binds by importing from outside the runtime (``import
    concurrent.futures.thread as pool``): their attributes are other libraries' business."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(
                a.asname or a.name.split(".")[0]
                for a in node.names
                if not a.name.startswith("localsession.runtime")
            )
        elif isinstance(node, ast.ImportFrom) and not (node.module or "").startswith(
            "localsession.runtime"
        ):
            names.update(a.asname or a.name for a in node.names)
    return names


def private_reaches(path: Path, runtime_private: set[str]) -> list[str]:
    """Every place ``path`` reaches a runtime ``_private`` name, as ``file:line: text``."""
    tree = _parse(path)
    rel = path.relative_to(ROOT).as_posix() if ROOT in path.parents else path.name
    own = _own_private_attributes(tree)
    modules = _runtime_module_aliases(tree)
    foreign = _foreign_imports(tree) - modules
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
            "localsession.runtime"
        ):
            found += [
                f"{rel}:{node.lineno}: from {node.module} import {a.name}"
                for a in node.names
                if _private(a.name)
            ]
        if not (isinstance(node, ast.Attribute) and _private(node.attr)):
            continue
        receiver = node.value
        if isinstance(receiver, ast.Name) and receiver.id in modules:
            found.append(f"{rel}:{node.lineno}: {receiver.id}.{node.attr}")
        elif (
            node.attr in runtime_private
            and node.attr not in own
            and not (isinstance(receiver, ast.Name) and receiver.id in foreign)
        ):
            found.append(f"{rel}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_module_outside_the_runtime_reaches_a_private_runtime_attribute() -> None:
    runtime_private = _runtime_private_attributes()
    assert {"_mutex", "_scheduler", "_registry"} <= runtime_private  # the scan sees the classes
    found = [hit for path in _checked_files() for hit in private_reaches(path, runtime_private)]
    assert found == [], "use the runtime's public accessors instead:\n" + "\n".join(found)


@pytest.mark.parametrize(
    ("source", "hits"),
    [
        ("service._scheduler.submit(job)\n", 1),
        ("x = fake.runtime._registry\n", 1),
        ("from localsession.runtime.service import _anything\n", 1),
        ("from localsession.runtime import service\nservice._helper()\n", 1),
        (
            "class Own:\n    def __init__(self):\n        self._mutex = 1\n"
            "    def f(self, other):\n        return self._mutex, other._mutex\n",
            0,
        ),  # fmt: skip
        ("service.session('s1').engine\n", 0),
        ("import concurrent.futures.thread as pool\nf = pool._worker\n", 0),
    ],
)
def test_the_check_flags_reaches_and_spares_a_files_own_attributes(
    tmp_path: Path, source: str, hits: int
) -> None:
    """The checker itself, on small sources: it must be able to fail, and must not flag
    a file's own ``self._x``."""
    path = tmp_path / "probe.py"
    path.write_text(source, encoding="utf-8")
    assert len(private_reaches(path, _runtime_private_attributes())) == hits
