"""The differences from Pravega that docs/compatibility.md lists for the conformance runs: the
names in the first column (in backquotes) of the tables under a `##` heading."""

from __future__ import annotations

import re
from pathlib import Path

COMPATIBILITY = Path(__file__).parents[2] / "docs" / "compatibility.md"
_ROW = re.compile(r"^\|\s*`([^`]+)`")


def listed_differences(heading_words: str, document: Path = COMPATIBILITY) -> set[str]:
    """The first-column names of the table rows in the `##` section whose heading contains
    `heading_words` (case-insensitive)."""
    names: set[str] = set()
    in_section = False
    for line in document.read_text(encoding="utf-8").splitlines():
        if line.startswith("## "):
            in_section = heading_words.lower() in line.lower()
        elif in_section and (match := _ROW.match(line)):
            names.add(match.group(1))
    return names
