"""One-off: point the design-spec ``§`` references in code at the sections of docs/.

``python docs/relink.py FILE...`` rewrites, in place, ``local-semantics §N`` to
``docs/semantics.md#N`` and ``sagemaker-sdk.md §X.Y`` to the section of ``docs/wire.md`` (or
``docs/semantics.md``) that covers it; a bare ``§X`` is rewritten when the same file names only
one of the two specs. It prints what it leaves alone. Run it over files merged after the
restructuring, then delete this script.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

SEMANTICS, WIRE = "docs/semantics.md", "docs/wire.md"
_WIRE_BY_TOP = {0: 1, 1: 5, 2: 1, 3: 2, 4: 5, 5: 5, 6: 6, 7: 3, 8: 3, 9: 7, 11: 4, 12: 8,
                13: 9, 14: 4, 15: 5, 16: 1, 17: 10, 18: 10}  # fmt: skip
_WIRE_BY_SUB = {"4.5": 9, "14.1": 1, "14.2": 2, "14.3": 3, "14.5": 1, "16.2": 4, "16.3": 4,
                "16.4": 4, "16.5": 4}  # fmt: skip


def sdk_target(section: str) -> str:
    """Where a ``sagemaker-sdk.md`` section is covered now."""
    top = int(section.split(".")[0])
    if top == 10:
        return f"{SEMANTICS}#{4 if section.startswith('10.4') else 1}"
    return f"{WIRE}#{_WIRE_BY_SUB.get(section, _WIRE_BY_TOP[top])}"


SECTION = r"§\s?(\d+(?:\.\d+)*)"
CHAIN = re.compile(
    r"(?P<doc>local-semantics(?:\.md)?|sagemaker-sdk(?:\.md)?)\s?(?P<refs>"
    + SECTION
    + r"(?:\s?(?:/|,|and)\s?"
    + SECTION
    + r")*)\.?(?=\W|$)"
)
BARE = re.compile(SECTION)


def target(doc: str, section: str) -> str:
    if doc.startswith("local-semantics"):
        return f"{SEMANTICS}#{section.split('.')[0]}"
    return sdk_target(section)


def relink(text: str) -> tuple[str, list[str]]:
    def chain(match: re.Match[str]) -> str:
        sections = BARE.findall(match["refs"])
        links = [target(match["doc"], s) for s in sections]
        out = links[0]
        for link in links[1:]:
            same_doc = link.split("#")[0] == links[0].split("#")[0]
            out += f", #{link.split('#')[1]}" if same_doc else f", {link}"
        return out

    text = CHAIN.sub(chain, text)
    names_sem = "local-semantics" in text or SEMANTICS in text
    names_sdk = "sagemaker-sdk" in text or WIRE in text
    left: list[str] = []

    def bare(match: re.Match[str]) -> str:
        section = match[1]
        if names_sem and not names_sdk and "." not in section and int(section) <= 6:
            return f"{SEMANTICS}#{section}"
        if names_sdk and not names_sem:
            return sdk_target(section)
        left.append(match[0])
        return match[0]

    return BARE.sub(bare, text), left


def main(paths: list[str]) -> None:
    for name in paths:
        path = Path(name)
        text = path.read_text(encoding="utf-8")
        new, left = relink(text)
        if new != text:
            path.write_text(new, encoding="utf-8")
        for ref in left:
            print(f"{name}: left {ref!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
