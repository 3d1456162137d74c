"""Loads the runtime SQL from sql/queries/*.sql once, as named blocks.

The files are package data of `sql.queries`, read through importlib.resources, so an installed
wheel finds them wherever it runs from, exactly as a source checkout does.

A block starts at a line `-- name: <method>`; the name equals the store method that runs it,
so a reader can go from a method to its SQL by name. Duplicate names are an error.
"""

from __future__ import annotations

import functools
import re
from importlib import resources
from importlib.resources.abc import Traversable

_HEADER = re.compile(r"^--\s*name:\s*(\w+)\s*$", re.MULTILINE)
QUERIES_PACKAGE = "sql.queries"


def queries_dir() -> Traversable:
    return resources.files(QUERIES_PACKAGE)


def parse_blocks(text: str, source: str) -> dict[str, str]:
    blocks: dict[str, str] = {}
    headers = list(_HEADER.finditer(text))
    for i, header in enumerate(headers):
        end = headers[i + 1].start() if i + 1 < len(headers) else len(text)
        body = text[header.end() : end].strip()
        name = header.group(1)
        if name in blocks:
            raise ValueError(f"duplicate SQL block {name!r} in {source}")
        if not body:
            raise ValueError(f"empty SQL block {name!r} in {source}")
        blocks[name] = body
    return blocks


@functools.cache
def load(file_stem: str) -> dict[str, str]:
    resource = queries_dir().joinpath(f"{file_stem}.sql")
    return parse_blocks(resource.read_text(encoding="utf-8"), str(resource))
