"""The README's Configuration table, generated from the declarations; a unit test keeps the
README's copy equal to it, and `python -m app.settings --update-readme README.md` rewrites it.
"""

from __future__ import annotations

from app.settings.declaration import Setting
from app.settings.model import DECLARATIONS

HEADER = "| flag | env | default | meaning |"
_RULE = "|---|---|---|---|"
_SECTION = "## Configuration"


def markdown_table() -> str:
    rows = [HEADER, _RULE, *(_row(item) for item in DECLARATIONS)]
    return "\n".join(rows) + "\n"


def _row(item: Setting) -> str:
    flag = f"`{item.flag}`" if item.is_switch else f"`{item.flag} {item.metavar_text}`"
    env = f"`{item.env}`"
    cells = [flag + _formerly(item.old_flags), env + _formerly(item.old_envs), item.shown(), item.help]
    return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"


def _formerly(spellings: tuple[str, ...]) -> str:
    return " (formerly " + ", ".join(f"`{old}`" for old in spellings) + ")" if spellings else ""


def _table_span(readme: str) -> tuple[int, int]:
    """Start and end offsets of the table that follows the Configuration heading."""
    section = readme.index(_SECTION)
    start = readme.index(HEADER, section)
    end = start
    for line in readme[start:].splitlines(keepends=True):
        if not line.startswith("|"):
            break
        end += len(line)
    return start, end


def table_in(readme: str) -> str:
    start, end = _table_span(readme)
    return readme[start:end]


def with_table(readme: str) -> str:
    start, end = _table_span(readme)
    return readme[:start] + markdown_table() + readme[end:]
