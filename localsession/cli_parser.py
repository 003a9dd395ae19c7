"""An ``argparse`` parser that suggests the option or subcommand a typo meant.

``localsession`` and the examples use it: ``--stpes 3`` fails with "did you mean --steps?",
``localsession serv`` with "did you mean serve?". Defaults are shown in ``--help`` where an
option has a real one (not ``None``, not an off switch). Standard library only.
"""

from __future__ import annotations

import argparse
import difflib
import re
from typing import Any, NoReturn

__all__ = ["SuggestingParser", "HelpFormatter"]

_CHOICE = re.compile(r"argument [^:]+: invalid choice: '([^']*)' \(choose from (.*)\)")


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """The description as written; ``(default: X)`` after an option's help when X is real."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        off = default is None or default is False or default == argparse.SUPPRESS
        shown = not off and bool(action.option_strings)
        if shown and "%(default)" not in text and "default" not in text:
            text = (text + " " if text else "") + "(default: %(default)s)"
        return text


class SuggestingParser(argparse.ArgumentParser):
    """``ArgumentParser`` whose errors add the closest known option or subcommand."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def _options(self) -> list[str]:
        return [s for a in self._actions for s in a.option_strings if s.startswith("--")]

    def _suggest(self, word: str, known: list[str]) -> str:
        close = difflib.get_close_matches(word, known, n=1, cutoff=0.6)
        return f"; did you mean {close[0]}?" if close else ""

    def error(self, message: str) -> NoReturn:
        unknown = re.match(r"unrecognized arguments: (\S+)", message)
        if unknown and unknown[1].startswith("-"):
            message += self._suggest(unknown[1].split("=")[0], self._options())
        choice = _CHOICE.match(message)
        if choice:
            known = re.findall(r"'([^']*)'", choice[2]) or [c.strip() for c in choice[2].split(",")]
            message += self._suggest(choice[1], known)
        super().error(message)
