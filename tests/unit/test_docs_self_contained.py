"""The repository explains itself: no comment, docstring or document cites a section ("\u00a7x") of
a document the repository does not hold, and every relative link of the project's documents
resolves to a file inside the repository.

A section sign is allowed only right after the path of a markdown file of the repository
(`docs/architecture.md \u00a7...`), so a reader can always open what is cited. The sign is written
as an escape in this file so the scan, which covers the tests too, does not find itself.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SECTION = "\u00a7"

# Every folder of code, SQL and the documents that live beside them.
SCANNED_DIRS = ("app", "workers", "migrations", "spark", "sql", "tests", "bench")
# The project's documents, whose links must stay inside the repository.
DOCUMENTS = ("README.md", "docs/*.md", "sql/reporting/README.md", "spark/README.md")

# A markdown file named just before the section sign, bare or as the target of a link.
_CITED_DOC = re.compile(r"([\w./-]+\.md)\)?\s*" + SECTION)
_INLINE_LINK = re.compile(r"!?\[[^\]\n]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_REFERENCE_LINK = re.compile(r"^\s{0,3}\[[^\]\n]+\]:\s*<?(\S+?)>?(?:\s+.*)?$", re.MULTILINE)
_FENCED = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)
_CODE_SPAN = re.compile(r"`[^`\n]*`")
_EXTERNAL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")  # http:, https:, mailto:, ...


def scanned_files() -> list[Path]:
    files: list[Path] = []
    for name in SCANNED_DIRS:
        folder = ROOT / name
        if not folder.is_dir():
            continue  # a folder that moved into the package is scanned there
        for path in sorted(folder.rglob("*")):
            relative = path.relative_to(ROOT).parts
            if not path.is_file() or any(p.startswith(".") or p == "__pycache__" for p in relative):
                continue
            files.append(path)
    for pattern in DOCUMENTS:
        files.extend(sorted(ROOT.glob(pattern)))
    return files


def text_of(path: Path) -> str | None:
    data = path.read_bytes()
    if b"\0" in data:
        return None  # binary (images, compiled files)
    return data.decode("utf-8", errors="replace")


def _inside_repository(target: Path) -> bool:
    try:
        target.resolve().relative_to(ROOT)
    except ValueError:
        return False
    return target.exists()


def _cites_repository_document(path: Path, cited: str) -> bool:
    return any(_inside_repository(base / cited) for base in (path.parent, ROOT))


def uncited_sections(path: Path, text: str) -> list[str]:
    """Lines whose section sign does not follow the path of a markdown file of the repository."""
    found = []
    for number, line in enumerate(text.splitlines(), start=1):
        if SECTION not in line:
            continue
        cited = _CITED_DOC.findall(line)
        if line.count(SECTION) > len(cited) or not all(_cites_repository_document(path, c) for c in cited):
            found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    return found


def link_targets(markdown: str) -> list[str]:
    """Relative link targets of a markdown text, code blocks and code spans left out."""
    prose = _CODE_SPAN.sub("", _FENCED.sub("", markdown))
    targets = _INLINE_LINK.findall(prose) + _REFERENCE_LINK.findall(prose)
    return [t for t in targets if not _EXTERNAL.match(t) and not t.startswith("#")]


def broken_links(path: Path, markdown: str) -> list[str]:
    broken = []
    for target in link_targets(markdown):
        file_part = target.split("#", 1)[0]
        if not _inside_repository(path.parent / file_part):
            broken.append(f"{path.relative_to(ROOT)}: {target}")
    return broken


def test_the_scan_sees_the_code_and_the_documents() -> None:
    files = {p.relative_to(ROOT).as_posix() for p in scanned_files()}
    assert {"app/main.py", "workers/dispatcher.py", "README.md", "docs/architecture.md"} <= files
    assert "tests/unit/test_docs_self_contained.py" in files


def test_no_section_cites_a_document_outside_the_repository() -> None:
    found = []
    for path in scanned_files():
        text = text_of(path)
        if text is not None:
            found.extend(uncited_sections(path, text))
    assert not found, "state the rule, or cite a document of the repository:\n" + "\n".join(found)


def test_every_relative_link_of_the_documents_resolves_in_the_repository() -> None:
    documents = [p for pattern in DOCUMENTS for p in sorted(ROOT.glob(pattern))]
    assert len(documents) >= 4
    broken = [link for path in documents for link in broken_links(path, path.read_text(encoding="utf-8"))]
    assert not broken, "links to files outside the repository, or to none:\n" + "\n".join(broken)


# --- the checks themselves can fail --------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "flagged"),
    [
        (f"# a rolling transaction (reference {SECTION}3.6)", True),
        (f"# see shared/reference/controller-semantics.md {SECTION}3.6", True),
        (f"# see docs/compatibility.md {SECTION}Watermarks and {SECTION}2", True),
        (f"# see docs/compatibility.md {SECTION}Watermarks", False),
        (f"see [the rules](docs/architecture.md) {SECTION}rules", False),
        ("# no section sign at all", False),
    ],
)
def test_section_rule(line: str, flagged: bool) -> None:
    assert bool(uncited_sections(ROOT / "app" / "example.py", line)) is flagged


@pytest.mark.parametrize(
    ("markdown", "broken"),
    [
        ("See [the architecture](../shared/ARCHITECTURE.md).", ["../shared/ARCHITECTURE.md"]),
        ("See [nothing](docs/none.md#top).", ["docs/none.md#top"]),
        ("See [the views](sql/reporting/README.md) and [Pravega](https://pravega.io).", []),
        ("[ref]: ../outside.md", ["../outside.md"]),
        ("A fragment [here](#layout) and code `[x](../y.md)` and\n```\n[x](../z.md)\n```\n", []),
    ],
)
def test_link_rule(markdown: str, broken: list[str]) -> None:
    assert broken_links(ROOT / "README.md", markdown) == [f"README.md: {b}" for b in broken]
