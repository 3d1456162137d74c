"""Analyst roles: LOGIN roles that may SELECT the `reporting` views (and the pipeline's
`reporting_marts` tables) and nothing else.

Invariant: an analyst belongs to the NOLOGIN group `pgc_analysts` only, holds no privilege of its
own, and PUBLIC holds nothing in the database an analyst could write with or read base data
through; create_analyst checks exactly that before it commits, and commits nothing otherwise.
The password never reaches the server (or its statement log) in clear: only a SCRAM verifier.
"""

from __future__ import annotations

import base64
import enum
import hashlib
import hmac
import re
import secrets
import stringprep
import unicodedata
from dataclasses import dataclass

import asyncpg

from app.domain.errors import AlreadyExists, IllegalState, InvalidInput, OperationNotAllowed
from app.store import queries
from app.store.dsn import open_connection
from app.store.errors import translated

_SQL = queries.load("analysts")

ANALYST_GROUP = "pgc_analysts"
REPORTING_SCHEMA = "reporting"
# Written by the PySpark pipeline (spark/), which grants the group SELECT on it; read-only too.
MARTS_SCHEMA = "reporting_marts"
MIN_PASSWORD_LENGTH = 12
MAX_CONNECTION_LIMIT = 10_000

_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")
_SCRAM_ITERATIONS = 4096

# Catalog functions PUBLIC may execute by default that let any role change shared state: session
# advisory locks are how controllers own buckets and leadership (an analyst holding one would stall
# that work), and large objects are storage an analyst could create. Matched by name so every
# signature (bigint; int, int) is covered on every PostgreSQL version.
_GUARDED_CATALOG_FUNCTIONS = r"^(pg_(try_)?advisory_(xact_)?lock(_shared)?|lo_(create|creat|from_bytea))$"


def reporting_access_statements() -> list[str]:
    """What the group may do, re-applied after every rebuild of the schema (a DROP SCHEMA
    CASCADE takes its grants with it, and default privileges cannot name a schema not yet made)."""
    return [
        f"REVOKE ALL ON SCHEMA {REPORTING_SCHEMA} FROM PUBLIC",
        f"GRANT USAGE ON SCHEMA {REPORTING_SCHEMA} TO {ANALYST_GROUP}",
        f"GRANT SELECT ON ALL TABLES IN SCHEMA {REPORTING_SCHEMA} TO {ANALYST_GROUP}",
    ]


# Functions are executable by PUBLIC when created; a migration that adds one must not hand it to
# analysts, so this runs after every migration run too. The controller owns them and keeps them.
REVOKE_PUBLIC_FUNCTIONS = "REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA public FROM PUBLIC"


class AnalystOutcome(enum.Enum):
    CREATED = "created"
    UPDATED = "updated"


@dataclass(frozen=True, slots=True)
class AnalystLimits:
    """Defaults the analyst's sessions start with, and its concurrent-connection cap."""

    statement_timeout_ms: int
    connection_limit: int

    def validate(self) -> None:
        if self.statement_timeout_ms <= 0:
            raise InvalidInput(f"the statement timeout must be positive, got {self.statement_timeout_ms} ms")
        if self.statement_timeout_ms > 2**31 - 1:
            raise InvalidInput("the statement timeout must be at most 2147483647 ms")
        if not 1 <= self.connection_limit <= MAX_CONNECTION_LIMIT:
            raise InvalidInput(
                f"the connection limit must be between 1 and {MAX_CONNECTION_LIMIT}, "
                f"got {self.connection_limit}"
            )


def validate_analyst_name(name: str) -> None:
    if not _NAME.fullmatch(name):
        raise InvalidInput(
            f"analyst name {name!r} must be 1-63 characters of a-z, 0-9 and _, not starting with a digit"
        )
    if name.startswith("pg_") or name == ANALYST_GROUP:
        raise InvalidInput(f"analyst name {name!r} is reserved")


def validate_password(password: str) -> None:
    if len(password) < MIN_PASSWORD_LENGTH:
        raise InvalidInput(f"the password must be at least {MIN_PASSWORD_LENGTH} characters")
    if "\x00" in password or "\n" in password or "\r" in password:
        raise InvalidInput("the password must not contain NUL or line breaks")


def generate_password() -> str:
    return secrets.token_urlsafe(24)


def _saslprep(password: str) -> bytes:
    """RFC 4013 as PostgreSQL applies it (src/common/saslprep.c): ASCII passes unchanged; a
    password the profile prohibits is used as it is, so a client and the server agree."""
    if password.isascii():
        return password.encode()
    # Space mapping comes first: U+200B is in both tables, and PostgreSQL maps it to a space.
    mapped = "".join(
        " " if stringprep.in_table_c12(ch) else ch
        for ch in password
        if stringprep.in_table_c12(ch) or not stringprep.in_table_b1(ch)
    )
    prepared = unicodedata.normalize("NFKC", mapped)
    prohibited = (
        stringprep.in_table_a1,
        stringprep.in_table_c12,
        stringprep.in_table_c21,
        stringprep.in_table_c22,
        stringprep.in_table_c3,
        stringprep.in_table_c4,
        stringprep.in_table_c5,
        stringprep.in_table_c6,
        stringprep.in_table_c7,
        stringprep.in_table_c8,
        stringprep.in_table_c9,
    )
    if not prepared or any(check(ch) for ch in prepared for check in prohibited):
        return password.encode()
    if any(stringprep.in_table_d1(ch) for ch in prepared) and (
        any(stringprep.in_table_d2(ch) for ch in prepared)
        or not (stringprep.in_table_d1(prepared[0]) and stringprep.in_table_d1(prepared[-1]))
    ):
        return password.encode()
    return prepared.encode()


def scram_sha256_verifier(
    password: str, *, salt: bytes | None = None, iterations: int = _SCRAM_ITERATIONS
) -> str:
    """The verifier PostgreSQL stores for `password` (RFC 5802/7677, as `\\password` sends it)."""
    salt = secrets.token_bytes(16) if salt is None else salt
    salted = hashlib.pbkdf2_hmac("sha256", _saslprep(password), salt, iterations)
    client_key = hmac.new(salted, b"Client Key", "sha256").digest()
    stored_key = hashlib.sha256(client_key).digest()
    server_key = hmac.new(salted, b"Server Key", "sha256").digest()

    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode("ascii")

    return f"SCRAM-SHA-256${iterations}:{b64(salt)}${b64(stored_key)}:{b64(server_key)}"


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


async def create_analyst(url: str, name: str, password: str, limits: AnalystLimits) -> AnalystOutcome:
    """Creates the analyst `name`, or re-applies password and limits to an existing analyst.

    The connecting role needs CREATEROLE and should own the database (it revokes PUBLIC's TEMP
    there). InvalidInput for a bad name, password or limit; AlreadyExists when `name` is a role
    that is not an analyst; IllegalState when the database has no reporting schema;
    OperationNotAllowed when the connecting role lacks a privilege or the result would let the
    analyst do more than read the views (nothing is committed then).
    """
    validate_analyst_name(name)
    validate_password(password)
    limits.validate()
    verifier = scram_sha256_verifier(password)
    # A raw asyncpg session, not app/store/db.py's: a missing privilege must be told apart from
    # every other server error (OperationNotAllowed, not StoreUnavailable) before translation.
    with translated():
        conn = await open_connection(url)
        try:
            async with conn.transaction():
                outcome = await _create_in_transaction(conn, name, verifier, limits)
                leaks = await forbidden_privileges(conn, name)
                if leaks:
                    raise OperationNotAllowed(
                        f"analyst {name} would be able to do more than read the reporting views "
                        f"({'; '.join(leaks[:10])}); nothing was changed. Run this as the database "
                        "owner, or revoke these from PUBLIC first"
                    )
                return outcome
        except asyncpg.InsufficientPrivilegeError as exc:
            raise OperationNotAllowed(
                f"the connecting role may not set up analysts: {exc}; use a role with CREATEROLE "
                "that owns the database"
            ) from exc
        finally:
            await conn.close()


async def _create_in_transaction(
    conn: asyncpg.Connection, name: str, verifier: str, limits: AnalystLimits
) -> AnalystOutcome:
    if await conn.fetchval(_SQL["reporting_schema_missing"], REPORTING_SCHEMA):
        raise IllegalState("the database has no reporting schema; run `pgcontroller db upgrade` first")
    if name == await conn.fetchval(_SQL["connecting_role"]):
        raise AlreadyExists(f"{name} is the connecting role, not an analyst")
    await _ensure_group(conn)
    await _harden_database(conn)
    existing = await conn.fetchrow(_SQL["existing_role"], name)
    attributes = (
        f"LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS INHERIT "
        f"CONNECTION LIMIT {limits.connection_limit} PASSWORD {_literal(verifier)}"
    )
    if existing is None:
        await conn.execute(f"CREATE ROLE {_ident(name)} {attributes} IN ROLE {ANALYST_GROUP}")
        outcome = AnalystOutcome.CREATED
    elif existing["privileged"] or list(existing["groups"]) != [ANALYST_GROUP]:
        raise AlreadyExists(f"role {name} exists and is not an analyst; choose another name")
    else:
        await conn.execute(f"ALTER ROLE {_ident(name)} {attributes}")
        outcome = AnalystOutcome.UPDATED
    timeout = _literal(f"{limits.statement_timeout_ms}ms")
    for setting in (
        f"statement_timeout = {timeout}",
        # An idle open transaction pins old row versions for every table; the same bound applies.
        f"idle_in_transaction_session_timeout = {timeout}",
        # Defaults only (a session may change them): privileges are what refuses writes.
        "default_transaction_read_only = on",
        f"search_path = {REPORTING_SCHEMA}",
    ):
        await conn.execute(f"ALTER ROLE {_ident(name)} SET {setting}")
    return outcome


async def _ensure_group(conn: asyncpg.Connection) -> None:
    if not await conn.fetchval(_SQL["group_exists"], ANALYST_GROUP):
        await conn.execute(
            f"CREATE ROLE {ANALYST_GROUP} "
            "NOLOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS"
        )
    for statement in reporting_access_statements():
        await conn.execute(statement)


async def _harden_database(conn: asyncpg.Connection) -> None:
    """Takes from PUBLIC, in this database, what every role would otherwise hold: temporary
    tables, creating in schema public (PostgreSQL < 15 grants it), pgcontroller's functions, and
    the guarded catalog functions, which go back to the role owning the controller's tables."""
    database = await conn.fetchval(_SQL["quoted_database"])
    await conn.execute(f"REVOKE TEMPORARY ON DATABASE {database} FROM PUBLIC")
    await conn.execute("REVOKE CREATE ON SCHEMA public FROM PUBLIC")
    await conn.execute(REVOKE_PUBLIC_FUNCTIONS)
    guarded = [r["fn"] for r in await conn.fetch(_SQL["guarded_functions"], _GUARDED_CATALOG_FUNCTIONS)]
    owner = await conn.fetchval(_SQL["tables_owner"])
    for function in guarded:
        await conn.execute(f"REVOKE EXECUTE ON FUNCTION {function} FROM PUBLIC")
        if owner is not None:
            await conn.execute(f"GRANT EXECUTE ON FUNCTION {function} TO {owner}")


async def forbidden_privileges(conn: asyncpg.Connection, name: str) -> list[str]:
    """What `name` could do beyond reading the reporting views and marts (empty = a proper
    analyst); also lists a reporting view it could not read."""
    rows = await conn.fetch(
        _SQL["forbidden_privileges"],
        name,
        REPORTING_SCHEMA,
        _GUARDED_CATALOG_FUNCTIONS,
        ANALYST_GROUP,
        MARTS_SCHEMA,
    )
    return [r["leak"] for r in rows]
