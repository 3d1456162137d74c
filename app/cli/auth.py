"""`pgcontroller auth user add|update|remove|list|import`: the accounts `--auth-enabled` checks.

A password is never a flag value (flags show in `ps` and shell history) and never printed: it
comes from --password-file (or '-': stdin), the environment variable --password-env names, or a
prompt. `import` reads Pravega's password file (`user:digest:acl` lines) and keeps each digest,
so imported accounts log in with their existing passwords (re-hashed to Argon2id on first login).
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import json
import os
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from app.clock import SystemClock
from app.domain.errors import DomainError, InvalidInput
from app.embedded_pg import EmbeddedPostgres
from app.security.accounts import check_account_name
from app.security.acl import InvalidAcl, validate_acl
from app.security.passwords import BadPasswordHash, hash_password, parse_pravega_digest
from app.settings import add_setting

if TYPE_CHECKING:
    from app.store.accounts import PgAccountStore

T = TypeVar("T")


class _RefusePassword(argparse.Action):
    """Refuses a password given as a flag without echoing it, as argparse's own error would."""

    def __call__(self, parser: argparse.ArgumentParser, *_: object, **__: object) -> None:
        parser.error(
            "--password is not accepted (flags show in `ps` and shell history); use --password-file, "
            "--password-env or the prompt"
        )


def _password_sources(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--password", nargs="?", action=_RefusePassword, help=argparse.SUPPRESS)
    source = parser.add_mutually_exclusive_group()
    source.add_argument(
        "--password-file", type=Path, help="read the password from the first line of this file ('-': stdin)"
    )
    source.add_argument(
        "--password-env", metavar="VAR", help="read the password from this environment variable"
    )


def add_auth_parser(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    auth = commands.add_parser("auth", help="accounts for --auth-enabled (docs/security.md)")
    auth_commands = auth.add_subparsers(dest="auth_command", required=True)
    user = auth_commands.add_parser("user", help="add, update, remove, list or import accounts")
    user_commands = user.add_subparsers(dest="user_command", required=True)

    add = user_commands.add_parser("add", allow_abbrev=False, help="add an account")
    add.add_argument("name")
    add.add_argument(
        "--acl", default="", help="Pravega's ACL text, e.g. 'prn::/scope:s1,READ_UPDATE;prn::/,READ'"
    )
    _password_sources(add)

    update = user_commands.add_parser(
        "update", allow_abbrev=False, help="change an account's password or ACL"
    )
    update.add_argument("name")
    update.add_argument("--acl", help="the new ACL text (unchanged if absent)")
    update.add_argument(
        "--new-password",
        action="store_true",
        help="set a new password (from the prompt unless a source is given)",
    )
    _password_sources(update)

    remove = user_commands.add_parser("remove", help="remove an account")
    remove.add_argument("name")

    listing = user_commands.add_parser("list", help="list accounts (names, ACLs, versions; never hashes)")
    listing.add_argument("--json", action="store_true", help="one JSON object per line")

    imported = user_commands.add_parser(
        "import", help="import Pravega's password file (user:digest:acl lines, as PasswordCreatorTool writes)"
    )
    imported.add_argument("file", type=Path)
    imported.add_argument("--replace", action="store_true", help="overwrite accounts that already exist")

    for sub in (add, update, remove, listing, imported):
        add_setting(sub, "data_dir")
        add_setting(sub, "db_url")


def _read_password(args: argparse.Namespace, purpose: str) -> str:
    if args.password_file is not None:
        text = sys.stdin.readline() if str(args.password_file) == "-" else args.password_file.read_text()
        password = text.splitlines()[0] if text.strip("\r\n") else ""
    elif args.password_env is not None:
        value = os.environ.get(args.password_env)
        if value is None:
            raise InvalidInput(f"environment variable {args.password_env} is not set")
        password = value
    elif sys.stdin.isatty():
        password = getpass.getpass(f"{purpose}: ")
        if getpass.getpass("again: ") != password:
            raise InvalidInput("the passwords differ")
    else:
        # Piped: the first line of stdin, so `printf '%s\n' "$PW" | pgcontroller auth user add u` works.
        line = sys.stdin.readline()
        password = line.rstrip("\r\n")
    if not password:
        raise InvalidInput("the password must not be empty")
    return password


def _checked_acl(text: str) -> str:
    try:
        validate_acl(text)
    except InvalidAcl as exc:
        raise InvalidInput(str(exc)) from exc
    return text.strip()


def _checked_name(name: str) -> str:
    try:
        check_account_name(name)
    except ValueError as exc:
        raise InvalidInput(str(exc)) from exc
    return name


@dataclass(frozen=True)
class ImportLine:
    name: str
    digest: str
    acl: str


def parse_password_file(text: str) -> tuple[list[ImportLine], list[str]]:
    """(accounts, problems), read as Pravega's PasswordAuthHandler reads the file: lines starting
    with '#' are skipped, the first empty line ends the file, `name:digest[:acl]` split at the first
    two ':' only (the ACL holds more). Lines Pravega would load but we cannot are problems."""
    accounts: list[ImportLine] = []
    problems: list[str] = []
    lines = text.splitlines()
    for number, line in enumerate(lines, start=1):
        if not line:
            rest = sum(1 for later in lines[number:] if later.strip())
            if rest:
                problems.append(
                    f"line {number}: empty; Pravega stops reading here, so {rest} later lines are ignored"
                )
            break
        if line.startswith("#"):
            continue
        fields = line.split(":", 2)
        if len(fields) < 2:
            continue  # Pravega skips it too
        name, digest, acl = fields[0], fields[1], fields[2] if len(fields) == 3 else ""
        try:
            check_account_name(name)
            parse_pravega_digest(digest)
            validate_acl(acl)
        except (ValueError, BadPasswordHash, InvalidAcl) as exc:
            problems.append(f"line {number} ({name!r}): {exc}")
            continue
        accounts.append(ImportLine(name, digest, acl.strip()))
    return accounts, problems


async def _with_store(url: str, work: Callable[[PgAccountStore], Awaitable[T]]) -> T:
    from app.store.accounts import PgAccountStore
    from app.store.migrate import ensure_schema
    from app.store.pool import create_pool

    await ensure_schema(url)
    pool = await create_pool(url, min_size=1, max_size=2)
    try:
        return await work(PgAccountStore(pool))
    finally:
        await pool.close()


async def _run(url: str, args: argparse.Namespace) -> int:
    now_ms = SystemClock().now_ms()
    command = args.user_command
    if command == "add":
        name, acl = _checked_name(args.name), _checked_acl(args.acl)
        hashed = hash_password(_read_password(args, f"password for {name}"))

        async def add(store: PgAccountStore) -> int:
            return await store.add(name, hashed, acl, now_ms)

        await _with_store(url, add)
        print(f"account {name} added", file=sys.stderr)
    elif command == "update":
        acl_text = None if args.acl is None else _checked_acl(args.acl)
        wants_password = args.new_password or args.password_file is not None or args.password_env is not None
        if acl_text is None and not wants_password:
            raise InvalidInput("nothing to update: give --acl and/or --new-password")
        new_hash = (
            hash_password(_read_password(args, f"new password for {args.name}")) if wants_password else None
        )

        async def update(store: PgAccountStore) -> int:
            current = await store.get(args.name)
            if current is None:
                raise InvalidInput(f"account {args.name!r} not found")
            return await store.update(
                args.name, current.version, now_ms, password_hash=new_hash, acl=acl_text
            )

        version = await _with_store(url, update)
        print(f"account {args.name} updated (version {version})", file=sys.stderr)
    elif command == "remove":

        async def remove(store: PgAccountStore) -> None:
            current = await store.get(args.name)
            if current is None:
                raise InvalidInput(f"account {args.name!r} not found")
            await store.remove(args.name, current.version)

        await _with_store(url, remove)
        print(f"account {args.name} removed", file=sys.stderr)
    elif command == "list":

        async def listing(store: PgAccountStore) -> None:
            for account in await store.list():
                if args.json:
                    row = {
                        "name": account.name,
                        "acl": account.acl,
                        "version": account.version,
                        "createdAt": account.created_at_ms,
                        "updatedAt": account.updated_at_ms,
                    }
                    print(json.dumps(row))
                else:
                    print(f"{account.name}\t{account.acl}\tversion {account.version}")

        await _with_store(url, listing)
    elif command == "import":
        return await _import(url, args, now_ms)
    return 0


async def _import(url: str, args: argparse.Namespace, now_ms: int) -> int:
    try:
        text = args.file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidInput(f"cannot read {args.file}: {exc}") from exc
    accounts, problems = parse_password_file(text)
    for problem in problems:
        print(f"pgcontroller: {args.file}: {problem}", file=sys.stderr)

    async def load(store: PgAccountStore) -> tuple[int, int, int]:
        added = replaced = skipped = 0
        for line in accounts:
            current = await store.get(line.name)
            if current is None:
                await store.add(line.name, line.digest, line.acl, now_ms)
                added += 1
            elif args.replace:
                await store.update(
                    line.name, current.version, now_ms, password_hash=line.digest, acl=line.acl
                )
                replaced += 1
            else:
                print(f"pgcontroller: account {line.name} exists; kept (use --replace)", file=sys.stderr)
                skipped += 1
        return added, replaced, skipped

    added, replaced, skipped = await _with_store(url, load)
    print(f"imported {added} accounts, replaced {replaced}, kept {skipped}", file=sys.stderr)
    return 1 if problems else 0


def run_auth(args: argparse.Namespace, embedded: EmbeddedPostgres) -> int:
    """Against --db-url, else the embedded database (started for the command if it was not running)."""
    try:
        if args.db_url:
            return asyncio.run(_run(args.db_url, args))
        with embedded.running_for_command():
            return asyncio.run(_run(embedded.url(), args))
    except DomainError as exc:
        print(f"pgcontroller: {exc}", file=sys.stderr)
        return 1
