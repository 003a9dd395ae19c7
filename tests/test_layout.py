"""The package's shape, drawn from its source: who imports whom, and how long a file may be.

- The engine and the shared math stand below the runtime: following every ``localsession``
  import from ``localsession.engine`` or ``localsession.numerics`` (statically, through the
  rest), no module under ``localsession.runtime`` is reached. What they share with the
  runtime is the port, ``localsession.port``, a leaf beside ``vocab``.
- Neither ``localsession.numerics`` nor the fakes import a module of ``localsession.engine``:
  both engines stand on the shared math (the fakes' service is given its own engine factory).
- The layers of ``LAYERS`` (top to bottom) import only downwards or within their layer: the
  entry points over the fronts (server, mock) over the client over the composition root
  (``wiring``) over the runtime over the engine over the shared math over the leaves (the
  port, the vocabulary, the public types). Every module of ``localsession`` has a layer.
- No import circles: no module of ``localsession``, ``fakes`` or ``conformance`` reaches
  itself again by import statements (``CIRCLE_ROOTS``).
- Only the composition root, ``localsession.wiring``, imports the engine: no other module of
  ``localsession``, ``fakes`` or ``conformance`` names ``localsession.engine``.
- Only the composition root writes a service's settings: no other module of ``localsession``,
  ``fakes`` or ``conformance`` builds a ``ServiceConfig`` (the doors choose a named profile:
  ``server_service``, ``inprocess_service``, ``fake_service``).
- One vocabulary: no file of ``localsession`` or ``fakes`` but ``vocab.py`` (and the
  SDK-forced ``types.py``) writes a word of a ``vocab.Word`` enum as a string literal, and
  none binds a module-level name to a vocab name (or a copy of one) unless the SDK exports
  that name (``SDK_NAMES``).
- A typed control plane: no dialect (nor the console, a reader of both) builds or reads a
  dict with a SageMaker key, calls ``.describe()`` or a SageMaker-shaped ``Service``
  operation, or reaches ``.registry``; a dialect reads no runtime ``Session``/``Operation``
  object either (``service.session(...)``): it calls ``Service.control`` instead.
- No ``.py`` file in ``localsession/``, ``fakes/`` or ``conformance/`` is longer than
  ``MAX_LINES`` unless its module docstring has a line starting with ``LENGTH_MARKER``
  followed by the reason.

Imports are read with ``ast`` (every ``import`` statement, including those inside functions
and under ``TYPE_CHECKING``), as are the control plane's calls, keys and attributes, so
nothing here imports torch.
"""

from __future__ import annotations

import ast
import re
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


# -- layers, circles and the composition root ------------------------------------------

#: The package's floors, top to bottom: a module may import its own floor or any below it.
#: Names are module prefixes under ``localsession`` ("" is the package's ``__init__``).
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("entry points", ("", "__main__", "cli", "cli_serve", "demo", "packages_cli", "plot",
                      "install_torch")),
    ("fronts", ("server", "mocking", "parity", "custom_loss")),
    ("client", ("client",)),
    ("composition root", ("wiring",)),
    ("runtime", ("runtime",)),
    ("engine", ("engine",)),
    ("shared math", ("numerics",)),
    (
        "leaves",
        ("port", "port_results", "port_commands", "vocab", "types", "exceptions", "futures",
         "chat_format", "metrics", "sandbox", "cli_parser", "_version", "ids", "cpu_threads",
         "engine_options", "settings"),
    ),
)  # fmt: skip
#: The one module allowed to name engine modules.
COMPOSITION_ROOT = "localsession.wiring"
#: Modules that plant defects into the torch engine's own methods for the conformance
#: self-check (a planted engine defect names what it breaks); they build no engine.
ENGINE_PLANTERS = frozenset({"conformance.selfcheck_tinker_spec"})
#: The top-level packages whose modules may not import each other in a circle.
CIRCLE_ROOTS = ("localsession", "fakes", "conformance")


def layer_of(module: str) -> int | None:
    """The index in LAYERS of a ``localsession`` module's floor (None: not placed)."""
    rest = module.split(".")[1:]
    for depth in range(len(rest), -1, -1):
        prefix = ".".join(rest[:depth])
        for floor, (_, prefixes) in enumerate(LAYERS):
            if prefix in prefixes and (prefix or not rest):
                return floor
    return None


def all_modules(root: Path, tops: tuple[str, ...]) -> list[str]:
    """Every module under the given top-level directories of ``root``."""
    return [name for top in tops if (root / top).is_dir() for name in package_modules(root, top)]


def unplaced(root: Path) -> list[str]:
    """Modules of ``localsession`` that LAYERS gives no floor."""
    return [m for m in all_modules(root, ("localsession",)) if layer_of(m) is None]


def upward_imports(root: Path) -> list[str]:
    """``a -> b`` for each import from a lower floor to a higher one, naming both floors."""
    found = []
    for module in all_modules(root, ("localsession",)):
        here = layer_of(module)
        path = module_file(root, module)
        if here is None or path is None:
            continue
        for name in sorted(set(imported_modules(root, path))):
            there = layer_of(name) if name.split(".")[0] == "localsession" else None
            if there is not None and there < here:
                found.append(f"{module} -> {name} ({LAYERS[here][0]} imports {LAYERS[there][0]})")
    return found


def import_graph(root: Path, tops: tuple[str, ...]) -> dict[str, set[str]]:
    """Module -> the modules under ``tops`` its import statements name (itself excluded)."""
    modules = set(all_modules(root, tops))
    graph: dict[str, set[str]] = {}
    for module in sorted(modules):
        path = module_file(root, module)
        assert path is not None
        graph[module] = {n for n in imported_modules(root, path) if n in modules} - {module}
    return graph


def import_cycles(root: Path, tops: tuple[str, ...]) -> list[list[str]]:
    """The import circles among the modules under ``tops``: each strongly connected set of
    two or more modules, sorted (Tarjan's algorithm, iterative)."""
    graph = import_graph(root, tops)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            nxt = next(edges, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                members = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    members.append(member)
                    if member == node:
                        break
                if len(members) > 1:
                    found.append(sorted(members))
    return sorted(found)


def engine_importers(root: Path) -> list[str]:
    """``a -> b`` for each module outside the engine and the composition root that imports
    an engine module."""
    found = []
    for module in all_modules(root, ("localsession", "fakes", "conformance")):
        if module in {COMPOSITION_ROOT, *ENGINE_PLANTERS} or module.startswith(
            "localsession.engine"
        ):
            continue
        path = module_file(root, module)
        assert path is not None
        for name in sorted(set(imported_modules(root, path))):
            if name == "localsession.engine" or name.startswith("localsession.engine."):
                found.append(f"{module} -> {name}")
    return found


def service_builders(root: Path) -> list[str]:
    """Modules outside the composition root that construct a ``Service`` themselves."""
    found = []
    for module in all_modules(root, ("localsession", "fakes", "conformance")):
        path = module_file(root, module)
        assert path is not None
        if module == COMPOSITION_ROOT:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call):
                callee = node.func
                name = (
                    callee.attr if isinstance(callee, ast.Attribute) else getattr(callee, "id", "")
                )
                if name == "Service":
                    found.append(module)
    return sorted(set(found))


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


def test_every_module_has_a_floor() -> None:
    assert unplaced(ROOT) == [], "add the module (or its package) to a floor of LAYERS"


def test_no_floor_imports_a_floor_above_it() -> None:
    assert upward_imports(ROOT) == [], (
        "an import runs back up the house: move what is shared down a floor (the port, the "
        "vocabulary), or pass it in from above"
    )


def test_no_import_circles() -> None:
    assert import_cycles(ROOT, CIRCLE_ROOTS) == [], (
        "modules that import each other: move what both need into a third module, or let "
        "one take a narrow Protocol instead of the other's class"
    )


def test_only_the_composition_root_imports_the_engine() -> None:
    assert engine_importers(ROOT) == [], (
        f"only {COMPOSITION_ROOT} names engine modules: ask it (build_service, "
        "default_engine_factory, server_catalog, listed_catalog) instead"
    )


def test_only_the_composition_root_builds_a_service() -> None:
    assert service_builders(ROOT) == [], (
        f"only {COMPOSITION_ROOT} constructs Service: call wiring.build_service instead"
    )


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


#: A small clean house: one module per floor, each importing the floor below it.
CLEAN_HOUSE = {
    "localsession/__init__.py": "from localsession import client\n",
    "localsession/client/__init__.py": "from localsession import wiring\n",
    "localsession/wiring.py": (
        "from localsession.runtime import service\nimport localsession.engine\n"
    ),
    "localsession/runtime/__init__.py": "",
    "localsession/runtime/service.py": "from localsession import port\n",
    "localsession/engine/__init__.py": "from localsession.numerics import losses\n",
    "localsession/numerics/__init__.py": "",
    "localsession/numerics/losses.py": "from localsession import port, vocab\n",
    "localsession/port.py": "from localsession import vocab\n",
    "localsession/vocab.py": "",
    "fakes/__init__.py": "from localsession.runtime import service\n",
}


def test_the_layer_rule_finds_a_planted_upward_import(tmp_path: Path) -> None:
    _tree(tmp_path, CLEAN_HOUSE)
    assert unplaced(tmp_path) == [] and upward_imports(tmp_path) == []
    _tree(
        tmp_path, {"localsession/numerics/losses.py": "from localsession.runtime import service\n"}
    )
    assert upward_imports(tmp_path) == [
        "localsession.numerics.losses -> localsession.runtime.service (shared math imports runtime)"
    ]
    _tree(tmp_path, {"localsession/newthing.py": ""})
    assert unplaced(tmp_path) == ["localsession.newthing"]


def test_the_circle_rule_finds_a_planted_circle(tmp_path: Path) -> None:
    _tree(tmp_path, CLEAN_HOUSE)
    assert import_cycles(tmp_path, ("localsession", "fakes")) == []
    _tree(
        tmp_path,
        {
            "localsession/runtime/a.py": "from localsession.runtime import b\n",
            "localsession/runtime/b.py": "def f():\n    from localsession.runtime.c import g\n",
            "localsession/runtime/c.py": "from localsession.runtime import a\n",
        },
    )
    assert import_cycles(tmp_path, ("localsession", "fakes")) == [
        ["localsession.runtime.a", "localsession.runtime.b", "localsession.runtime.c"]
    ]


def test_the_circle_rule_covers_conformance(tmp_path: Path) -> None:
    """A package and its own modules: the backends picked by ``backends/__init__`` must not
    import it back; what they share lives in a leaf (``backends/common.py``)."""
    _tree(
        tmp_path,
        {
            **CLEAN_HOUSE,
            "conformance/__init__.py": "",
            "conformance/adapter.py": "",
            "conformance/backends/__init__.py": (
                "from conformance.adapter import Backend\n"
                "def make(kind):\n    from conformance.backends.fakes import make_fakes\n"
            ),
            "conformance/backends/common.py": "GROUP = 'g'\n",
            "conformance/backends/fakes.py": "from conformance.backends.common import GROUP\n",
        },
    )
    assert import_cycles(tmp_path, CIRCLE_ROOTS) == []
    _tree(tmp_path, {"conformance/backends/fakes.py": "from conformance.backends import GROUP\n"})
    assert import_cycles(tmp_path, CIRCLE_ROOTS) == [
        ["conformance.backends", "conformance.backends.fakes"]
    ]
    assert import_cycles(tmp_path, ("localsession", "fakes")) == []  # the old roots missed it


def test_the_engine_rule_finds_a_planted_engine_import(tmp_path: Path) -> None:
    _tree(tmp_path, CLEAN_HOUSE)
    assert engine_importers(tmp_path) == []
    _tree(tmp_path, {"fakes/__init__.py": "from localsession.engine import loading\n",
                     "localsession/engine/loading.py": ""})  # fmt: skip
    assert engine_importers(tmp_path) == ["fakes -> localsession.engine.loading"]


def test_the_service_rule_finds_a_planted_construction(tmp_path: Path) -> None:
    _tree(tmp_path, CLEAN_HOUSE)
    assert service_builders(tmp_path) == []
    _tree(tmp_path, {"localsession/cli.py": "from x import runtime\ns = runtime.Service()\n"})
    assert service_builders(tmp_path) == ["localsession.cli"]


# -- dialects and the runtime (two adapters over one typed runtime API) ---------------------

#: The dialects beside the runtime: each parses its own wire into the port's typed commands
#: and serialises the typed results (the SageMaker dialect lives in the runtime itself).
DIALECTS = ("localsession.server.tinker",)
#: The runtime's public API, as a dialect may import it: the service (its methods take and
#: return the port's values), its errors, and the model catalog's names.
PUBLIC_RUNTIME = frozenset(
    {
        "localsession.runtime",
        "localsession.runtime.service",
        "localsession.runtime.control",
        "localsession.runtime.errors",
        "localsession.runtime.models",
        "localsession.runtime.models.hub",
        "localsession.runtime.models.catalog",
    }
)
#: The SageMaker wire's result keys; only its serialiser, runtime/sagemaker_wire.py, writes
#: them (engines return ``port_results`` values).
WIRE_RESULT_KEYS = frozenset(
    {
        "lossFnOutputs",
        "stopReason",
        "promptLogprobs",
        "topkPromptLogprobs",
        "topkLogprobs",
        "targetPromptLogprobs",
        "promptAltTokens",
        "tokenId",
        "tokenUsage",
        "modelPackageArn",
        "operationResult",
    }
)
#: The engines' sources: the torch engine, the shared math that builds their results, and
#: the fakes' engines.
ENGINE_SOURCES = (
    "localsession/engine",
    "localsession/numerics",
    "fakes/engine.py",
    "fakes/light.py",
    "fakes/sampler.py",
    "fakes/script.py",
)


def runtime_dialect_imports(root: Path) -> list[str]:
    """How the runtime reaches a module under ``localsession.server`` (a dialect), if it does."""
    closure = import_closure(root, package_modules(root, "localsession.runtime"), "localsession")
    return [
        chain(closure, name)
        for name in sorted(closure)
        if name == "localsession.server" or name.startswith("localsession.server.")
    ]


def wire_keys_written(root: Path, sources: tuple[str, ...] = ENGINE_SOURCES) -> list[str]:
    """``file:line: 'key'`` for each string constant in ``sources`` that is a wire result key."""
    found = []
    for source in sources:
        base = root / source
        paths = sorted(base.rglob("*.py")) if base.is_dir() else [base] if base.is_file() else []
        for path in paths:
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Constant) and node.value in WIRE_RESULT_KEYS:
                    found.append(
                        f"{path.relative_to(root).as_posix()}:{node.lineno}: {node.value!r}"
                    )
    return found


def _names_the_service(node: ast.expr) -> bool:
    """``service`` or ``<anything>.service``: the runtime's ``Service`` as dialects hold it."""
    return (isinstance(node, ast.Name) and node.id == "service") or (
        isinstance(node, ast.Attribute) and node.attr == "service"
    )


def private_runtime_uses(root: Path, dialects: tuple[str, ...] = DIALECTS) -> list[str]:
    """Where a dialect reaches past the runtime's public API: an import of a runtime module
    outside PUBLIC_RUNTIME, or a private attribute of the service (``service._x``)."""
    found = []
    for dialect in dialects:
        for module in package_modules(root, dialect):
            path = module_file(root, module)
            assert path is not None
            for name in sorted(set(imported_modules(root, path))):
                runtime = name == "localsession.runtime" or name.startswith("localsession.runtime.")
                if runtime and name not in PUBLIC_RUNTIME:
                    found.append(f"{module} imports {name}")
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if (
                    isinstance(node, ast.Attribute)
                    and node.attr.startswith("_")
                    and not node.attr.startswith("__")
                    and _names_the_service(node.value)
                ):
                    found.append(f"{module}:{node.lineno} uses service.{node.attr}")
    return found


def test_the_runtime_imports_no_dialect() -> None:
    assert runtime_dialect_imports(ROOT) == [], (
        "the runtime knows no dialect: a dialect calls the runtime's typed API "
        "(port_commands in, port_results out), never the other way round"
    )


def test_engines_write_no_wire_key() -> None:
    assert wire_keys_written(ROOT) == [], (
        "an engine returns port_results values; the SageMaker wire's keys are written only "
        "by runtime/sagemaker_wire.py (and the Tinker shapes by server/tinker/results.py)"
    )


def test_dialects_use_only_the_runtimes_public_api() -> None:
    assert private_runtime_uses(ROOT) == [], (
        "a dialect touches the runtime only through Service's methods and the port's types: "
        f"import only {sorted(PUBLIC_RUNTIME)} of the runtime, and no private attribute"
    )


def test_dialect_rules_find_planted_violations(tmp_path: Path) -> None:
    clean = {
        "localsession/__init__.py": "",
        "localsession/runtime/__init__.py": "",
        "localsession/runtime/service.py": "from localsession.runtime import helper\n",
        "localsession/runtime/helper.py": "import math\n",
        "localsession/runtime/sessions/__init__.py": "",
        "localsession/runtime/sessions/queue.py": "",
        "localsession/server/__init__.py": "",
        "localsession/server/tinker/__init__.py": "",
        "localsession/server/tinker/routes.py": (
            "from localsession.runtime.service import Service\n"
            "def f(service):\n    return service.submit_training\n"
        ),
        "localsession/engine/__init__.py": "",
        "localsession/engine/sample.py": "def f():\n    return {'tokens': [], 'stop': 1}\n",
    }
    _tree(tmp_path, clean)
    assert runtime_dialect_imports(tmp_path) == []
    assert wire_keys_written(tmp_path) == []
    assert private_runtime_uses(tmp_path) == []
    # the runtime reaching a dialect (inside a function)
    (tmp_path / "localsession/runtime/helper.py").write_text(
        "def f():\n    from localsession.server.tinker import routes\n", encoding="utf-8"
    )
    assert runtime_dialect_imports(tmp_path) == [
        "localsession.runtime.helper -> localsession.server.tinker.routes"
    ]
    # an engine writing a SageMaker wire key
    (tmp_path / "localsession/engine/sample.py").write_text(
        "def f():\n    return {'stopReason': 'stop'}\n", encoding="utf-8"
    )
    assert wire_keys_written(tmp_path) == ["localsession/engine/sample.py:2: 'stopReason'"]
    # a dialect importing a runtime internal, and reading a private attribute of the service
    (tmp_path / "localsession/server/tinker/routes.py").write_text(
        "from localsession.runtime.sessions import queue\n"
        "def f(self):\n    return self.service._registry\n",
        encoding="utf-8",
    )
    assert private_runtime_uses(tmp_path) == [
        "localsession.server.tinker.routes imports localsession.runtime.sessions.queue",
        "localsession.server.tinker.routes:3 uses service._registry",
    ]


# -- the dialects' control plane --------------------------------------------------------------

#: The packages that speak a wire of their own over the runtime (or read it for every
#: dialect, as the console does): they call Service's typed control plane
#: (runtime/control.py), never SageMaker's dict-shaped operations.
TYPED_CALLERS = ("localsession.server.tinker", "localsession.server.console")
#: A SageMaker wire key: two or more capitalised words run together ("TrainingSessionName",
#: "ModelPackageSummaryList", "ErrorDetails", "RoleArn").
_PASCAL = re.compile(r"^(?:[A-Z][a-z0-9]+){2,}$")
#: Reaches into the runtime's insides: the package registry (``Service.control`` reads it).
RUNTIME_INSIDES = frozenset({"registry", "_registry"})
#: The service's runtime objects (its ``Session`` and ``Operation`` records, tables and
#: schedulers): a dialect reads their state through typed calls instead (``Service.control``,
#: ``operation_outcome``). The console, which shows those records, may read them.
RUNTIME_OBJECTS = frozenset(
    {"session", "sessions", "operation", "table", "dataplane", "packages", "scheduler"}
)


def sagemaker_operations(root: Path) -> frozenset[str]:
    """The names of Service's SageMaker-shaped operations: its methods that take a
    ``request`` (a SageMaker request dict), read from runtime/service.py."""
    tree = ast.parse((root / "localsession/runtime/service.py").read_text(encoding="utf-8"))
    return frozenset(
        node.name
        for cls in tree.body
        if isinstance(cls, ast.ClassDef) and cls.name == "Service"
        for node in cls.body
        if isinstance(node, ast.FunctionDef) and any(a.arg == "request" for a in node.args.args)
    )


def _pascal(node: ast.expr | None) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and _PASCAL.match(node.value):
        return node.value
    return None


def sagemaker_reaches(
    root: Path, packages: tuple[str, ...] = TYPED_CALLERS, dialects: tuple[str, ...] = DIALECTS
) -> list[str]:
    """``module:line what`` for each place a typed caller builds or reads a SageMaker dict
    (a dict literal or ``dict(...)`` with a SageMaker key, a subscript or ``.get`` of one),
    calls a ``.describe()`` or one of Service's SageMaker operations, or reaches the
    runtime's ``.registry``; and where a dialect reads one of the service's
    ``RUNTIME_OBJECTS`` (``service.session(...)``, ``service.operation(...)``, ...)."""
    operations = sagemaker_operations(root)
    found = []
    for package in packages:
        dialect = package in dialects
        for module in package_modules(root, package):
            path = module_file(root, module)
            assert path is not None
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                what = None
                if isinstance(node, ast.Dict):
                    keys = [k for k in map(_pascal, node.keys) if k]
                    what = f"builds a SageMaker dict ({keys[0]!r})" if keys else None
                elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                    words = [k.arg for k in node.keywords if k.arg and _PASCAL.match(k.arg)]
                    if node.func.id == "dict" and words:
                        what = f"builds a SageMaker dict ({words[0]!r})"
                elif isinstance(node, ast.Subscript) and _pascal(node.slice):
                    what = f"reads a SageMaker key ({_pascal(node.slice)!r})"
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                    attr = node.func.attr
                    if attr == "get" and node.args and _pascal(node.args[0]):
                        what = f"reads a SageMaker key ({_pascal(node.args[0])!r})"
                    elif attr == "describe":
                        what = "calls .describe() (a SageMaker description)"
                    elif attr in operations:
                        what = f"calls the SageMaker operation .{attr}()"
                if isinstance(node, ast.Attribute) and node.attr in RUNTIME_INSIDES:
                    what = f"reaches .{node.attr}"
                elif (
                    dialect
                    and isinstance(node, ast.Attribute)
                    and node.attr in RUNTIME_OBJECTS
                    and _names_the_service(node.value)
                ):
                    what = f"reads the runtime's objects (service.{node.attr})"
                if what:
                    found.append(f"{module}:{node.lineno} {what}")
    return sorted(set(found))


def test_typed_callers_speak_no_sagemaker() -> None:
    assert sagemaker_reaches(ROOT) == [], (
        "a dialect (and the console) calls Service's typed control plane, Service.control "
        "(runtime/control.py: stop, state, packages by key, ...): no SageMaker request or "
        "response dict, no .describe(), no .registry"
    )


def test_the_control_plane_rule_finds_planted_violations(tmp_path: Path) -> None:
    service = (
        "class Service:\n"
        "    def stop_training_session(self, request):\n        pass\n"
        "    def list_model_packages(self, request, *, strict=None):\n        pass\n"
        "    def submit_training(self, name, seq, command):\n        pass\n"
    )
    clean = {
        "localsession/__init__.py": "",
        "localsession/runtime/__init__.py": "",
        "localsession/runtime/service.py": service,
        "localsession/server/__init__.py": "",
        "localsession/server/tinker/__init__.py": "",
        "localsession/server/tinker/rest.py": (
            "def f(service, name):\n"
            "    service.control.stop(name)\n"
            "    service.submit_training(name, 1, None)\n"
            "    return {'checkpoint_id': 'x', 'Content-Type': 'a', 'ID': 1}\n"
        ),
        "localsession/server/console/__init__.py": "",
        "localsession/server/console/view.py": (
            "def g(self, name):\n    return self.service.session(name).status\n"
        ),
    }
    _tree(tmp_path, clean)
    assert sagemaker_operations(tmp_path) == {"stop_training_session", "list_model_packages"}
    assert sagemaker_reaches(tmp_path) == []
    planted = (
        "def f(service, name):\n"
        "    service.stop_training_session({'TrainingSessionName': name})\n"
        "    page = service.list_model_packages(dict(MaxResults=100))\n"
        "    rows = page['ModelPackageSummaryList']\n"
        "    error = service.session(name).describe().get('ErrorDetails')\n"
        "    return service.registry.get(rows[0]), error\n"
        "def g(self, name, op):\n"
        "    return self.service.operation(name, op).result\n"
    )
    (tmp_path / "localsession/server/tinker/rest.py").write_text(planted, encoding="utf-8")
    (tmp_path / "localsession/server/console/view.py").write_text(
        "def g(self):\n    return self.service._registry.path('arn')\n", encoding="utf-8"
    )
    assert sagemaker_reaches(tmp_path) == [
        "localsession.server.console.view:2 reaches ._registry",
        "localsession.server.tinker.rest:2 builds a SageMaker dict ('TrainingSessionName')",
        "localsession.server.tinker.rest:2 calls the SageMaker operation .stop_training_session()",
        "localsession.server.tinker.rest:3 builds a SageMaker dict ('MaxResults')",
        "localsession.server.tinker.rest:3 calls the SageMaker operation .list_model_packages()",
        "localsession.server.tinker.rest:4 reads a SageMaker key ('ModelPackageSummaryList')",
        "localsession.server.tinker.rest:5 calls .describe() (a SageMaker description)",
        "localsession.server.tinker.rest:5 reads a SageMaker key ('ErrorDetails')",
        "localsession.server.tinker.rest:5 reads the runtime's objects (service.session)",
        "localsession.server.tinker.rest:6 reaches .registry",
        "localsession.server.tinker.rest:8 reads the runtime's objects (service.operation)",
    ]


# -- the composition root's profiles ---------------------------------------------------------

#: Modules that may build a ``ServiceConfig``: the root's profiles, and the config's own module.
CONFIG_WRITERS = (COMPOSITION_ROOT, "localsession.runtime.config")


def config_builders(root: Path) -> list[str]:
    """Modules outside ``CONFIG_WRITERS`` that call ``ServiceConfig(...)`` or one of its
    class methods (``ServiceConfig.from_env``): a door listing knobs instead of choosing a
    profile."""
    found = []
    for module in all_modules(root, ("localsession", "fakes", "conformance")):
        if module in CONFIG_WRITERS:
            continue
        path = module_file(root, module)
        assert path is not None
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call):
                continue
            callee = node.func
            if isinstance(callee, ast.Attribute) and callee.attr != "ServiceConfig":
                callee = callee.value  # ServiceConfig.from_env(...)
            name = callee.attr if isinstance(callee, ast.Attribute) else getattr(callee, "id", "")
            if name == "ServiceConfig":
                found.append(module)
    return sorted(set(found))


def test_only_the_composition_root_writes_service_settings() -> None:
    assert config_builders(ROOT) == [], (
        "build a service through a profile of localsession/wiring.py (server_service, "
        "inprocess_service, fake_service) instead of writing a ServiceConfig"
    )


def test_the_settings_rule_finds_a_planted_config(tmp_path: Path) -> None:
    _tree(tmp_path, CLEAN_HOUSE)
    _tree(tmp_path, {"localsession/wiring.py": "c = ServiceConfig.from_env(gap_timeout=0)\n"})
    assert config_builders(tmp_path) == []
    _tree(
        tmp_path,
        {
            "fakes/__init__.py": "from x import config\nc = config.ServiceConfig(gap_timeout=0)\n",
            "localsession/mocking/__init__.py": "c = ServiceConfig.from_env(strict=False)\n",
        },
    )
    assert config_builders(tmp_path) == ["fakes", "localsession.mocking"]


# -- fast paths beside their exact ones ------------------------------------------------------

#: A fast path's module name ends so; its exact module has the name without it.
FAST_SUFFIX = "_fast"


def fast_path_problems(root: Path) -> list[str]:
    """Each ``X_fast.py`` under ``localsession`` must have its exact ``X.py`` beside it, an
    equivalence test ``test_X_fast.py`` somewhere under ``tests/``, and the exact module must
    not import it (the exact path reads on its own; the fast one hands over to it)."""
    found = []
    tests = {p.name for p in (root / "tests").rglob("test_*.py")}
    for path in sorted((root / "localsession").rglob(f"*{FAST_SUFFIX}.py")):
        exact = path.with_name(path.name.removesuffix(f"{FAST_SUFFIX}.py") + ".py")
        name = module_name(root, path)
        if not exact.is_file():
            found.append(f"{name}: no exact module {exact.name} beside it")
            continue
        if f"test_{path.name}" not in tests:
            found.append(f"{name}: no equivalence test test_{path.name} under tests/")
        if name in set(imported_modules(root, exact)):
            found.append(f"{module_name(root, exact)} imports its fast path {name}")
    return found


def test_every_fast_path_sits_beside_its_exact_one() -> None:
    assert fast_path_problems(ROOT) == []


def test_the_fast_path_rule_finds_planted_violations(tmp_path: Path) -> None:
    _tree(
        tmp_path,
        {
            "localsession/__init__.py": "",
            "localsession/a.py": "",
            "localsession/a_fast.py": "from localsession import a\n",
            "tests/x/test_a_fast.py": "",
        },
    )
    assert fast_path_problems(tmp_path) == []
    _tree(
        tmp_path,
        {
            "localsession/a.py": "from localsession import a_fast\n",
            "localsession/b_fast.py": "",
            "localsession/c.py": "",
            "localsession/c_fast.py": "",
        },
    )
    assert fast_path_problems(tmp_path) == [
        "localsession.a imports its fast path localsession.a_fast",
        "localsession.b_fast: no exact module b.py beside it",
        "localsession.c_fast: no equivalence test test_c_fast.py under tests/",
    ]


# -- module names and the packages beside localsession ---------------------------------------

#: The importable packages whose modules may not share a name: a traceback, a log line or
#: ``-p name`` then says which module it means.
NAMED_ROOTS = ("localsession", "fakes")
#: The one name two modules share on purpose: pytest's name for a plugin, which users pass to
#: ``-p`` (``fakes.pytest_plugin``) and the package's entry point names
#: (``localsession.mocking.pytest_plugin``).
SHARED_NAMES = frozenset({"pytest_plugin"})
#: The repository's other top-level packages ``localsession`` may import, each only from the
#: modules named and only inside a function (``import localsession`` stays without them):
#: the fakes ship with it (``mock(engine="fake")``), and so does the conformance suite
#: (``localsession conformance``). Nothing in ``localsession`` imports bench, tests or examples.
OUTSIDE_IMPORTS: dict[str, frozenset[str]] = {
    "localsession.mocking.core": frozenset({"fakes"}),
    "localsession.mocking.fake_tokenizer": frozenset({"fakes"}),
    "localsession.cli": frozenset({"conformance"}),
}


def shared_names(root: Path) -> dict[str, list[str]]:
    """Module file names (``__init__`` aside) found more than once under ``NAMED_ROOTS``:
    name -> the modules."""
    by_name: dict[str, list[str]] = {}
    for top in NAMED_ROOTS:
        for path in sorted((root / top).rglob("*.py")) if (root / top).is_dir() else []:
            if path.stem != "__init__" and path.stem not in SHARED_NAMES:
                by_name.setdefault(path.stem, []).append(module_name(root, path))
    return {name: found for name, found in sorted(by_name.items()) if len(found) > 1}


def _function_imports(tree: ast.AST) -> set[int]:
    """The ids of the import nodes inside a function body."""
    inner: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            inner |= {id(n) for n in ast.walk(node) if isinstance(n, (ast.Import, ast.ImportFrom))}
    return inner


def outside_imports(root: Path) -> list[str]:
    """Imports in ``localsession`` of the repository's other top-level packages (any
    directory beside it holding ``.py`` files) that ``OUTSIDE_IMPORTS`` does not allow, or
    that run at module level."""
    tops = {p.name for p in root.iterdir() if p.is_dir() and p.name != "localsession"}
    tops = {t for t in tops if not t.startswith(".") and any((root / t).rglob("*.py"))}
    found = []
    for module in all_modules(root, ("localsession",)):
        path = module_file(root, module)
        assert path is not None
        tree = ast.parse(path.read_text(encoding="utf-8"))
        lazy = _function_imports(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            else:
                continue
            for top in sorted({name.split(".")[0] for name in names} & tops):
                if top not in OUTSIDE_IMPORTS.get(module, frozenset()):
                    found.append(f"{module} imports {top}")
                elif id(node) not in lazy:
                    found.append(f"{module} imports {top} at module level")
    return sorted(set(found))


def test_no_two_modules_share_a_name() -> None:
    assert shared_names(ROOT) == {}, "rename one of each pair: a name says which module it is"


def test_localsession_imports_the_packages_beside_it_only_where_declared() -> None:
    assert outside_imports(ROOT) == [], (
        "localsession may import fakes or conformance only from the modules OUTSIDE_IMPORTS "
        "names, inside a function; bench, tests and examples never"
    )


def test_the_name_rule_finds_a_planted_twin(tmp_path: Path) -> None:
    _tree(tmp_path, CLEAN_HOUSE)
    _tree(tmp_path, {"fakes/pytest_plugin.py": "", "localsession/pytest_plugin.py": ""})
    assert shared_names(tmp_path) == {}
    _tree(tmp_path, {"fakes/service.py": "", "localsession/numerics/service.py": ""})
    twins = ["localsession.numerics.service", "localsession.runtime.service", "fakes.service"]
    assert shared_names(tmp_path) == {"service": twins}


def test_the_outside_rule_finds_planted_imports(tmp_path: Path) -> None:
    _tree(tmp_path, CLEAN_HOUSE)
    _tree(
        tmp_path,
        {
            "bench/run.py": "",
            "localsession/mocking/core.py": "def f():\n    from fakes.service import S\n",
            "localsession/cli.py": "def g():\n    import conformance.run\n",
        },
    )
    assert outside_imports(tmp_path) == []
    _tree(
        tmp_path,
        {
            "localsession/mocking/core.py": "from fakes.service import S\n",
            "localsession/runtime/service.py": "def f():\n    import bench.run\n",
        },
    )
    assert outside_imports(tmp_path) == [
        "localsession.mocking.core imports fakes at module level",
        "localsession.runtime.service imports bench",
    ]


# -- one vocabulary ----------------------------------------------------------------------------

#: The only files that write the vocabulary's words: vocab.py, and types.py, whose literals
#: the SDK's signatures force.
VOCAB_FILES = frozenset({"localsession/vocab.py", "localsession/types.py"})
#: The packages the vocabulary rules read.
VOCAB_ROOTS = ("localsession", "fakes")
#: Module-level names bound to a vocab name that stay, each with the reason the SDK gives.
SDK_NAMES: dict[str, dict[str, str]] = {
    "localsession/client/service_client.py": {
        "DEFAULT_MODEL_PACKAGE_GROUP_NAME": "sagemaker.train.training_session exports it",
    },
}
#: Calls that copy a vocab table under a new name (``dict(vocab.RUNTIME_ERRORS)``).
COPIES = frozenset({"dict", "tuple", "list", "set", "frozenset"})


def vocabulary_words() -> dict[str, frozenset[str]]:
    """Each kind of word (every ``vocab.Word`` enum) -> its values."""
    from localsession import vocab

    kinds = vocab.Word.__subclasses__()
    return {kind.__name__: frozenset(str(word.value) for word in kind) for kind in kinds}


def _not_code(tree: ast.AST) -> set[int]:
    """The ids of string constants that are not code: docstrings and ``__all__`` entries
    (a function may be named as a loss is)."""
    skipped: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            first = body[0] if body else None
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                skipped.add(id(first.value))
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            skipped |= {id(n) for n in ast.walk(node.value)}
    return skipped


def _sources(root: Path) -> Iterator[tuple[str, ast.Module]]:
    """``(relative path, parsed module)`` of each file the vocabulary rules read."""
    for top in VOCAB_ROOTS:
        for path in sorted((root / top).rglob("*.py")):
            where = path.relative_to(root).as_posix()
            if where not in VOCAB_FILES:
                yield where, ast.parse(path.read_text(encoding="utf-8"))


def vocabulary_literals(root: Path, words: dict[str, frozenset[str]]) -> list[str]:
    """``file:line 'word' (Kind)`` for each word written as a string literal in code outside
    ``VOCAB_FILES``."""
    found = []
    for where, tree in _sources(root):
        skipped = _not_code(tree)
        for node in ast.walk(tree):
            if not isinstance(node, ast.Constant) or not isinstance(node.value, str):
                continue
            if id(node) in skipped:
                continue
            kinds = sorted(k for k, values in words.items() if node.value in values)
            if kinds:
                found.append(f"{where}:{node.lineno} {node.value!r} ({', '.join(kinds)})")
    return sorted(found)


def _vocab_name(value: ast.expr | None) -> str | None:
    """``vocab.X`` (or ``vocab.X.Y``) when ``value`` is that attribute, or a copy of it
    (``dict(vocab.X)``), else None."""
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name):
        if value.func.id in COPIES and len(value.args) == 1 and not value.keywords:
            value = value.args[0]
    parts = []
    while isinstance(value, ast.Attribute):
        parts.append(value.attr)
        value = value.value
    if isinstance(value, ast.Name) and value.id == "vocab" and parts:
        return ".".join(["vocab", *reversed(parts)])
    return None


def vocabulary_aliases(root: Path, allowed: dict[str, dict[str, str]]) -> list[str]:
    """``file:line NAME = vocab.X`` for each module-level name outside ``VOCAB_FILES`` bound
    to a vocab name (or a copy of one), or imported from vocab under another name, unless
    ``allowed`` lists it for that file."""
    found = []
    for where, tree in _sources(root):
        for node in tree.body:
            if isinstance(node, ast.ImportFrom) and node.module == "localsession.vocab":
                bound = [(a.asname, f"vocab.{a.name}") for a in node.names if a.asname]
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                source = _vocab_name(node.value)
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names = [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]
                bound = [(name, source) for name in names] if source else []
            else:
                continue
            for name, source in bound:
                if name not in allowed.get(where, {}):
                    found.append(f"{where}:{node.lineno} {name} = {source}")
    return sorted(found)


def test_the_vocabulary_is_written_only_in_vocab() -> None:
    assert vocabulary_literals(ROOT, vocabulary_words()) == [], (
        "write the word as its vocab enum member (vocab.SessionStatus.RUNNING, ...), not a "
        "string literal; where a plain str must leave (a request the client builds), "
        "write the member's .value"
    )


def test_no_module_renames_a_vocab_name() -> None:
    assert vocabulary_aliases(ROOT, SDK_NAMES) == [], (
        "use the vocab name itself (vocab.OpStatus.COMPLETED, vocab.OP_TERMINAL) instead of "
        "binding it to a second name; a name the SDK itself exports goes in SDK_NAMES"
    )


def test_every_sdk_name_is_still_bound_and_exported_by_the_sdk() -> None:
    """An SDK_NAMES entry that nothing binds any more is dropped, and each is a name the
    SDK's package really exports."""
    from sagemaker.train import training_session

    bound = vocabulary_aliases(ROOT, {})
    for where, names in SDK_NAMES.items():
        for name in names:
            assert any(line.startswith(f"{where}:") and f" {name} = " in line for line in bound)
            assert hasattr(training_session, name), f"{name}: not exported by the SDK"


def test_the_vocabulary_rule_finds_a_planted_literal(tmp_path: Path) -> None:
    words = {"SessionStatus": frozenset({"Running", "Failed"}), "OpStatus": frozenset({"Failed"})}
    _tree(
        tmp_path,
        {
            "localsession/vocab.py": 'RUNNING = "Running"\n',
            "localsession/types.py": 'Status = Literal["Running"]\n',
            "localsession/runtime/a.py": (
                '"""Running: a docstring says it freely."""\n__all__ = ["Running"]\n'
                "x = vocab.SessionStatus.RUNNING\n"
                'y = f"the session is {x}: Running"\n'
            ),
        },
    )
    assert vocabulary_literals(tmp_path, words) == []
    _tree(
        tmp_path,
        {
            "localsession/runtime/a.py": 'if status == "Running":\n    pass\n',
            "fakes/b.py": 'y = "Failed"\n',
        },
    )
    assert vocabulary_literals(tmp_path, words) == [
        "fakes/b.py:1 'Failed' (OpStatus, SessionStatus)",
        "localsession/runtime/a.py:1 'Running' (SessionStatus)",
    ]


def test_the_alias_rule_finds_planted_aliases(tmp_path: Path) -> None:
    _tree(
        tmp_path,
        {
            "localsession/vocab.py": "TERMINAL = OP_TERMINAL\n",
            "localsession/runtime/a.py": (
                "from localsession import vocab\n"
                "from localsession.vocab import OpStatus\n"
                "DONE = frozenset({vocab.OpStatus.COMPLETED, vocab.OpStatus.FAILED})\n"
                "x = vocab.OP_KINDS[0]\n"
                "def f():\n    local = vocab.OP_TERMINAL\n"
            ),
            "localsession/client/c.py": "DEFAULT_GROUP_NAME = vocab.DEFAULT_GROUP\n",
        },
    )
    allowed = {"localsession/client/c.py": {"DEFAULT_GROUP_NAME": "the SDK exports it"}}
    assert vocabulary_aliases(tmp_path, allowed) == []
    _tree(
        tmp_path,
        {
            "localsession/runtime/a.py": (
                "PENDING, FAILED = vocab.OP_STATUSES\n"
                "TERMINAL: frozenset[str] = vocab.OP_TERMINAL\n"
                "CODES = dict(vocab.RUNTIME_ERRORS)\n"
                "from localsession.vocab import OpStatus as Status\n"
            ),
            "fakes/b.py": "RUNNING = vocab.SessionStatus.RUNNING\n",
        },
    )
    assert vocabulary_aliases(tmp_path, allowed) == [
        "fakes/b.py:1 RUNNING = vocab.SessionStatus.RUNNING",
        "localsession/runtime/a.py:1 FAILED = vocab.OP_STATUSES",
        "localsession/runtime/a.py:1 PENDING = vocab.OP_STATUSES",
        "localsession/runtime/a.py:2 TERMINAL = vocab.OP_TERMINAL",
        "localsession/runtime/a.py:3 CODES = vocab.RUNTIME_ERRORS",
        "localsession/runtime/a.py:4 Status = vocab.OpStatus",
    ]
