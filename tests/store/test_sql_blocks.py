"""The named SQL blocks in sql/queries/*.sql and the store code that runs them agree.

A store module binds `_SQL = queries.load("<stem>")` and looks blocks up as `_SQL["<name>"]`.
One indirection exists: a helper taking the block name as a parameter (`_SQL[query]` inside
`PgStreamStore._conditional`), called with the name as a string literal. The source is read
with `ast`, so such calls count as references; any other non-literal lookup fails the test
rather than being silently ignored.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from importlib.resources.abc import Traversable
from pathlib import Path

import pytest

from app.store import queries

ROOT = Path(__file__).resolve().parents[2]
STORE = ROOT / "app" / "store"
# The rooms that run named SQL blocks: the store's adapters, and the dev data generators
# (`pgcontroller dev seed`'s seed.sql), which moved out of app/store to app/dev.
SQL_USERS = (STORE, ROOT / "app" / "dev")
# The files `queries.load` reads: the package data of `sql.queries`.
SQL_FILES = sorted(
    (f for f in queries.queries_dir().iterdir() if f.name.endswith(".sql")), key=lambda f: f.name
)


def stem(sql_file: Traversable) -> str:
    return sql_file.name.removesuffix(".sql")


@dataclass
class ModuleRefs:
    path: Path
    stem: str
    names: set[str] = field(default_factory=set)
    unresolved: list[str] = field(default_factory=list)


def _load_stem(tree: ast.Module) -> str | None:
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "_SQL" for t in node.targets)
            and isinstance(node.value, ast.Call)
            and isinstance(node.value.func, ast.Attribute)
            and node.value.func.attr == "load"
            and node.value.args
            and isinstance(node.value.args[0], ast.Constant)
        ):
            return str(node.value.args[0].value)
    return None


def _sql_lookups(func: ast.AST) -> list[ast.Subscript]:
    return [
        n
        for n in ast.walk(func)
        if isinstance(n, ast.Subscript) and isinstance(n.value, ast.Name) and n.value.id == "_SQL"
    ]


def module_refs(path: Path) -> ModuleRefs | None:
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    stem = _load_stem(tree)
    if stem is None:
        return None
    refs = ModuleRefs(path, stem)

    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}

    def enclosing_function(node: ast.AST) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
        while node in parents:
            node = parents[node]
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                return node
        return None

    # Helpers whose parameter is the block name: function name -> positional index (no self).
    forwarders: dict[str, int] = {}
    for sub in _sql_lookups(tree):
        key = sub.slice
        func = enclosing_function(sub)
        params = [] if func is None else [a.arg for a in func.args.args if a.arg not in ("self", "cls")]
        if isinstance(key, ast.Constant) and isinstance(key.value, str):
            refs.names.add(key.value)
        elif isinstance(key, ast.Name) and func is not None and key.id in params:
            forwarders[func.name] = params.index(key.id)
        else:
            refs.unresolved.append(f"{path.name}:{sub.lineno}: {ast.unparse(sub)}")

    for call in (n for n in ast.walk(tree) if isinstance(n, ast.Call)):
        callee = call.func
        name = callee.attr if isinstance(callee, ast.Attribute) else getattr(callee, "id", None)
        if name not in forwarders:
            continue
        index = forwarders[name]
        arg = call.args[index] if index < len(call.args) else None
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            refs.names.add(arg.value)
        else:
            refs.unresolved.append(f"{path.name}:{call.lineno}: {ast.unparse(call)[:80]}")
    return refs


def all_module_refs() -> list[ModuleRefs]:
    found = [module_refs(p) for room in SQL_USERS for p in sorted(room.rglob("*.py"))]
    return [r for r in found if r is not None]


def test_there_is_sql_to_check() -> None:
    assert {stem(p) for p in SQL_FILES} >= {"scopes", "streams", "segment_data"}
    refs = all_module_refs()
    assert {r.stem for r in refs} >= {"scopes", "streams", "segment_data"}
    # The indirection through PgStreamStore._conditional is seen (set_config is only used so).
    streams = next(r for r in refs if r.stem == "streams")
    assert "set_config" in streams.names


def test_no_unresolvable_sql_lookups() -> None:
    unresolved = [u for r in all_module_refs() for u in r.unresolved]
    assert unresolved == [], f"SQL block lookups this test cannot resolve to a name: {unresolved}"


@pytest.mark.parametrize("sql_file", SQL_FILES, ids=lambda p: p.name)
def test_every_block_is_used_by_the_store(sql_file: Traversable) -> None:
    blocks = queries.parse_blocks(sql_file.read_text(encoding="utf-8"), str(sql_file))
    assert blocks, f"{sql_file.name} has no blocks"
    users = [r for r in all_module_refs() if r.stem == stem(sql_file)]
    assert users, f"no module in app/store or app/dev loads {sql_file.name}"
    used = set().union(*(r.names for r in users))
    unused = sorted(set(blocks) - used)
    assert unused == [], f"blocks in {sql_file.name} that no store code runs: {unused}"


def test_every_lookup_names_an_existing_block() -> None:
    missing: list[str] = []
    for refs in all_module_refs():
        path = queries.queries_dir().joinpath(f"{refs.stem}.sql")
        assert path.is_file(), f"{refs.path.name} loads {path.name}, which does not exist"
        blocks = queries.parse_blocks(path.read_text(encoding="utf-8"), str(path))
        missing += [f"{refs.path.name} -> {path.name}:{n}" for n in sorted(refs.names - set(blocks))]
    assert missing == [], f"lookups of blocks that do not exist: {missing}"


def test_load_reads_every_file() -> None:
    for path in SQL_FILES:
        assert queries.load(stem(path)) == queries.parse_blocks(path.read_text(encoding="utf-8"), str(path))


# --- parse_blocks ------------------------------------------------------------------------------


def test_parse_blocks_splits_on_headers() -> None:
    text = "-- a file comment\n\n-- name: first\nSELECT 1;\n\n-- name:second\n-- a comment\nSELECT 2;\n"
    assert queries.parse_blocks(text, "t.sql") == {
        "first": "SELECT 1;",
        "second": "-- a comment\nSELECT 2;",
    }


def test_parse_blocks_rejects_duplicates() -> None:
    text = "-- name: twice\nSELECT 1;\n-- name: other\nSELECT 2;\n-- name: twice\nSELECT 3;\n"
    with pytest.raises(ValueError, match=r"duplicate SQL block 'twice' in dup\.sql"):
        queries.parse_blocks(text, "dup.sql")


@pytest.mark.parametrize(
    "text",
    [
        "-- name: empty\n-- name: full\nSELECT 1;\n",
        "-- name: full\nSELECT 1;\n-- name: empty\n   \n\n",
        "-- name: empty",
    ],
    ids=["before-another", "at-the-end", "header-only"],
)
def test_parse_blocks_rejects_empty_blocks(text: str) -> None:
    with pytest.raises(ValueError, match=r"empty SQL block 'empty' in e\.sql"):
        queries.parse_blocks(text, "e.sql")
