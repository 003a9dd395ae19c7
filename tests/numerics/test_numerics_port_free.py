"""``localsession.numerics`` holds pure functions on tensors: it builds no port result and,
but for the input checks every engine shares (``numerics.inputs``), reads no port datum.
The engine prepares its batch (engine/batch.py) and builds its result
(``ForwardResult.from_rows``). Proven on a planted violation of each kind.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: Port types that only the shared input checks may read.
DATUM_TYPES = frozenset({"TrainingDatum"})
INPUT_CHECKS = "inputs"


def port_reaches(root: Path) -> list[str]:
    """``numerics.<module>: <what>`` for each port result, and each port datum outside the
    input checks, that a module of ``localsession/numerics`` imports."""
    found: list[str] = []
    for path in sorted((root / "localsession" / "numerics").glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            named: list[str] = []
            if isinstance(node, ast.Import):
                named = [a.name for a in node.names if a.name == "localsession.port_results"]
            elif isinstance(node, ast.ImportFrom) and node.module is not None:
                if node.module == "localsession.port_results":
                    named = [f"{node.module}.{a.name}" for a in node.names]
                elif node.module == "localsession.port" and path.stem != INPUT_CHECKS:
                    named = [f"{node.module}.{a.name}" for a in node.names if a.name in DATUM_TYPES]
                elif node.module == "localsession" and path.stem != INPUT_CHECKS:
                    named = [
                        f"localsession.{a.name}" for a in node.names if a.name == "port_results"
                    ]
            found += [f"numerics.{path.stem}: {name}" for name in named]
    return found


def test_numerics_builds_no_port_result_and_reads_no_datum() -> None:
    assert port_reaches(ROOT) == [], (
        "numerics holds pure tensor functions: prepare batches and build results in the engine"
    )


def test_the_rule_finds_planted_violations(tmp_path: Path) -> None:
    numerics = tmp_path / "localsession" / "numerics"
    numerics.mkdir(parents=True)
    (numerics / "inputs.py").write_text("from localsession.port import TrainingDatum\n")
    (numerics / "batch.py").write_text(
        "from localsession.port import EngineInputError, TrainingDatum\n"
        "from localsession.port_results import ForwardResult\n"
    )
    (numerics / "other.py").write_text("import localsession.port_results\n")
    assert port_reaches(tmp_path) == [
        "numerics.batch: localsession.port.TrainingDatum",
        "numerics.batch: localsession.port_results.ForwardResult",
        "numerics.other: localsession.port_results",
    ]
