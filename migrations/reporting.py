"""The analysts' contract, schema `reporting`: views defined in `sql/reporting/*.sql`.

The schema is dropped before every migration run and rebuilt after it when the database is
at head, in the same transaction: base tables can then change freely in migrations (no view
pins them), and analysts never see a half-built contract. A change to a reporting file
ships with a new revision, which is what makes a running database pick it up. Each rebuild
grants the views to the analyst group again (the drop took the grants with it) and takes
from PUBLIC the functions a migration may have added, so analysts read the views and only them.
The files are package data of `sql.reporting`, read through importlib.resources, so an installed
wheel applies the same views as a source checkout.
"""

from __future__ import annotations

import re
from importlib import resources
from importlib.resources.abc import Traversable

from sqlalchemy.engine import Connection

from app.store.analysts import (
    ANALYST_GROUP,
    REPORTING_SCHEMA,
    REVOKE_PUBLIC_FUNCTIONS,
    reporting_access_statements,
)

REPORTING_PACKAGE = "sql.reporting"
SCHEMA = REPORTING_SCHEMA
# Statements end with `;` at the end of a line; the files hold views only, no function bodies.
_STATEMENT_END = re.compile(r";[ \t]*$", re.MULTILINE)


def reporting_files() -> list[Traversable]:
    """The `*.sql` files of `sql.reporting`, in name order (the order they are applied in)."""
    files = (f for f in resources.files(REPORTING_PACKAGE).iterdir() if f.name.endswith(".sql"))
    return sorted(files, key=lambda f: f.name)


def reporting_statements() -> list[str]:
    """Every statement of every reporting file, files in name order."""
    statements: list[str] = []
    for path in reporting_files():
        for chunk in _STATEMENT_END.split(path.read_text(encoding="utf-8")):
            body = "\n".join(
                line for line in chunk.splitlines() if line.strip() and not line.strip().startswith("--")
            )
            if body.strip():
                statements.append(body)
    return statements


def drop_reporting(connection: Connection) -> None:
    connection.exec_driver_sql(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")


def build_reporting(connection: Connection) -> None:
    connection.exec_driver_sql(f"CREATE SCHEMA {SCHEMA}")
    for statement in reporting_statements():
        connection.exec_driver_sql(statement)
    grant_reporting(connection)


def grant_reporting(connection: Connection) -> None:
    connection.exec_driver_sql(REVOKE_PUBLIC_FUNCTIONS)
    # Absent when the migrating role could not create it; `db create-analyst` creates it and grants.
    group = connection.exec_driver_sql(
        f"SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{ANALYST_GROUP}')"
    ).scalar()
    if group:
        for statement in reporting_access_statements():
            connection.exec_driver_sql(statement)
