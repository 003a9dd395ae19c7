"""The package's shape, drawn from its source: who imports whom, and how long a file may be.

- The engine and the shared math stand below the runtime: following every ``localsession``
  import from ``localsession.engine`` or ``localsession.numerics`` (statically, through the
  rest), no module under ``localsession.runtime`` is reached. What they share with the
  runtime is the port, ``localsession.port``, a leaf beside ``vocab``.
- Neither ``localsession.numerics`` nor the fakes import a module of ``localsession.engine``:
  both engines stand on the shared math (the fakes' service is given its own engine factory).
- No ``.py`` file in ``localsession/``, ``fakes/`` or ``conformance/`` is longer than
  ``MAX_LINES`` unless its module docstring has a line starting with ``LENGTH_MARKER``
  followed by the reason.

Imports are read with ``ast`` (every ``import`` statement, including those inside functions
and under ``TYPE_CHECKING``), so nothing here imports torch.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: The roots whose files the length rule covers.
LENGTH_ROOTS = ("localsession", "fakes", "conformance")
MAX_LINES = 400
#: A module docstring line starting with this states why the file is longer than MAX_LINES.
LENGTH_MARKER = "Length:"
#: The engine port: the one module the runtime and the engines share.
ENGINE_PORT = "localsession.port"

# -- reading imports ----------------------------------------------------------------------


def module_file(root: Path, module: str) -> Path | None:
    """The source file of a dotted module under ``root`` (a package's ``__init__.py``)."""
    base = root.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def module_name(root: Path, path: Path) -> str:
    """The dotted name of a source file under ``root``."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_modules(root: Path, path: Path) -> Iterator[str]:
    """Every module an ``import`` statement in ``path`` names; ``from a import b`` yields
    ``a.b`` when ``b`` is a module under ``root``, else ``a``. Relative imports are resolved."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = module_name(root, path)
    if path.name != "__init__.py":
        package = package.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                anchor = ".".join(parts[: len(parts) - node.level + 1])
                base = f"{anchor}.{node.module}" if node.module else anchor
            else:
                base = node.module or ""
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                yield sub if module_file(root, sub) is not None else base


def import_closure(root: Path, start: list[str], prefix: str) -> dict[str, str]:
    """Every module named ``prefix`` or ``prefix.*`` reachable from ``start`` by import
    statements, each mapped to the module that first imported it."""
    seen: dict[str, str] = {name: "" for name in start}
    queue = list(start)
    while queue:
        current = queue.pop()
        path = module_file(root, current)
        if path is None:
            continue
        for name in imported_modules(root, path):
            if (name == prefix or name.startswith(prefix + ".")) and name not in seen:
                seen[name] = current
                queue.append(name)
    return seen


def package_modules(root: Path, package: str) -> list[str]:
    """The package and every module in it (recursively)."""
    directory = root.joinpath(*package.split("."))
    return sorted(module_name(root, p) for p in directory.rglob("*.py"))


def chain(closure: dict[str, str], name: str) -> str:
    """``a -> b -> name``: how ``name`` was reached."""
    links = [name]
    while closure.get(links[-1]):
        links.append(closure[links[-1]])
    return " -> ".join(reversed(links))


def runtime_reached(root: Path, package: str) -> list[str]:
    """The runtime modules ``package`` reaches, with how."""
    closure = import_closure(root, package_modules(root, package), "localsession")
    return [
        chain(closure, name)
        for name in sorted(closure)
        if name == "localsession.runtime" or name.startswith("localsession.runtime.")
    ]


# -- reading lengths ----------------------------------------------------------------------


def stated_reason(path: Path) -> str | None:
    """The text after ``LENGTH_MARKER`` in the module docstring, if a line starts with it."""
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    for line in doc.splitlines():
        if line.strip().startswith(LENGTH_MARKER):
            return line.strip()[len(LENGTH_MARKER) :].strip() or None
    return None


def overlong(root: Path) -> dict[str, int]:
    """Files under the length roots longer than MAX_LINES with no stated reason: lines."""
    found: dict[str, int] = {}
    for top in LENGTH_ROOTS:
        for path in sorted((root / top).rglob("*.py")):
            lines = len(path.read_text(encoding="utf-8").splitlines())
            if lines > MAX_LINES and stated_reason(path) is None:
                found[path.relative_to(root).as_posix()] = lines
    return found


# -- the checks ---------------------------------------------------------------------------


@pytest.mark.parametrize("package", ["localsession.engine", "localsession.numerics"])
def test_the_engine_and_numerics_import_nothing_under_the_runtime(package: str) -> None:
    assert runtime_reached(ROOT, package) == [], (
        f"{package} must not reach the runtime: what it shares with the runtime lives in "
        f"{ENGINE_PORT}; move it there or pass it in the EngineSpec"
    )


@pytest.mark.parametrize("package", ["localsession.numerics", "fakes"])
def test_shared_math_and_fakes_use_no_engine(package: str) -> None:
    closure = import_closure(ROOT, package_modules(ROOT, package), "localsession.engine")
    reached = [chain(closure, n) for n in sorted(closure) if n.startswith("localsession.engine")]
    assert reached == [], f"{package} must not import the torch engine (use numerics)"


def test_long_files_state_their_reason() -> None:
    found = overlong(ROOT)
    assert found == {}, (
        f"files over {MAX_LINES} lines: split them, or add a line starting {LENGTH_MARKER!r} "
        "to the module docstring saying why the file is one piece"
    )


# -- the checkers themselves, on a made-up tree ---------------------------------------------


def _tree(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def test_closure_finds_a_runtime_import_two_hops_away(tmp_path: Path) -> None:
    _tree(
        tmp_path,
        {
            "localsession/__init__.py": "",
            "localsession/runtime/__init__.py": "",
            "localsession/port.py": "",
            "localsession/runtime/service.py": "",
            "localsession/numerics/__init__.py": "",
            "localsession/numerics/helper.py": (
                "def f():\n    from localsession.runtime import service\n"
            ),
            "localsession/engine/__init__.py": "from localsession import port\n",
            "localsession/engine/step.py": "from ..numerics import helper\n",
        },
    )
    assert runtime_reached(tmp_path, "localsession.engine") == [
        "localsession.engine.step -> localsession.numerics.helper -> localsession.runtime.service"
    ]
    (tmp_path / "localsession/numerics/helper.py").write_text("import math\n", encoding="utf-8")
    assert runtime_reached(tmp_path, "localsession.engine") == []


def test_length_rule_counts_lines_and_reads_the_marker(tmp_path: Path) -> None:
    body = "x = 1\n" * MAX_LINES
    _tree(
        tmp_path,
        {
            "localsession/short.py": '"""Short."""\n' + "x = 1\n" * (MAX_LINES - 1),
            "localsession/long.py": '"""Long."""\n' + body,
            "fakes/reasoned.py": f'"""Long.\n\n{LENGTH_MARKER} one table.\n"""\n' + body,
            "conformance/empty_reason.py": f'"""Long.\n\n{LENGTH_MARKER}\n"""\n' + body,
        },
    )
    assert overlong(tmp_path) == {
        "conformance/empty_reason.py": MAX_LINES + 4,
        "localsession/long.py": MAX_LINES + 1,
    }
