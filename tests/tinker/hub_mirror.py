"""Small local stand-ins for the Hugging Face datasets that tinker-cookbook recipes load by name.

``datasets.load_dataset(path, name)`` loads a local directory when ``path`` exists relative to
the working directory, and a README.md ``configs:`` block gives it named configs. So a recipe
that hard-codes ``load_dataset("openai/gsm8k", "main")`` runs unmodified, offline, from a
working directory holding ``openai/gsm8k/``. The rows are ours (simple arithmetic, with
correct answers computed here), with the columns the recipes read: no_robots ``messages``,
gsm8k ``question`` / ``answer`` (ending ``#### N``), wikitext ``text``, SciKnowEval (the
``sdft`` recipe's) ``question`` / ``choices`` / ``answerKey`` with the domain, level and type
it filters on.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

_WORDS = ("after", "before", "during", "while", "until", "through", "over", "under")


def _write_rows(path: Path, rows: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")


def _configs(name: str, splits: list[str]) -> str:
    """A dataset card whose ``configs:`` block names config ``name`` with ``splits``."""
    files = "".join(f"  - split: {s}\n    path: {name}/{s}.jsonl\n" for s in splits)
    return f"---\nconfigs:\n- config_name: {name}\n  data_files:\n{files}---\n"


def _sums(start: int, count: int) -> list[tuple[int, int]]:
    return [(start + i, 2 * i + 3) for i in range(count)]


def write_hub_mirror(root: Path) -> None:
    """Write ``HuggingFaceH4/no_robots``, ``openai/gsm8k`` (config ``main``) and
    ``Salesforce/wikitext`` (config ``wikitext-103-raw-v1``) under ``root``."""
    for split, pairs in (("train", _sums(1, 8)), ("test", _sums(20, 2))):
        chats = [
            {
                "messages": [
                    {"role": "user", "content": f"What is {a} plus {b}?"},
                    {"role": "assistant", "content": f"{a} plus {b} is {a + b}."},
                ]
            }
            for a, b in pairs
        ]
        _write_rows(root / "HuggingFaceH4" / "no_robots" / f"{split}.jsonl", chats)
        problems = [
            {
                "question": f"Ann has {a} apples and buys {b} more. How many apples has she?",
                "answer": f"Ann has {a} + {b} = <<{a}+{b}={a + b}>>{a + b} apples.\n#### {a + b}",
            }
            for a, b in pairs
        ]
        _write_rows(root / "openai" / "gsm8k" / "main" / f"{split}.jsonl", problems)
    (root / "openai" / "gsm8k" / "README.md").write_text(_configs("main", ["train", "test"]))
    # WikiText's raw shape: " text . \n" lines, with blank lines the recipe skips.
    lines = [
        {
            "text": f" The river ran {_WORDS[i % 8]} the hill for {i} miles , and the town grew "
            f"{_WORDS[i * 3 % 8]} it . \n"
            if i % 10
            else ""
        }
        for i in range(60)
    ]
    wikitext = root / "Salesforce" / "wikitext"
    _write_rows(wikitext / "wikitext-103-raw-v1" / "train.jsonl", lines)
    (wikitext / "README.md").write_text(_configs("wikitext-103-raw-v1", ["train"]))
    # SciKnowEval's L3 multiple-choice rows, domain Chemistry (the sdft recipe's filter).
    mcq = [
        {
            "question": f"How many atoms does a molecule of {n} identical atoms have?",
            "choices": {"label": ["A", "B", "C", "D"], "text": [str(n + d) for d in range(4)]},
            "answerKey": "A",
            "domain": "Chemistry",
            "details": {"level": "L3"},
            "type": "mcq-4-choices",
        }
        for n in range(2, 12)
    ]
    _write_rows(root / "hicai-zju" / "SciKnowEval" / "test.jsonl", mcq)
