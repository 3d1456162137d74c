"""`pgcontroller db create-analyst`: the command line over app/store/analysts.py.

The password is never a flag value (flags show in `ps` and shell history) and never printed
unless generated on request: it comes from a file or stdin, the environment, or a prompt.
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import os
import re
import sys
from pathlib import Path

import pgurl
from app.domain.errors import DomainError, InvalidInput
from app.embedded_pg import EmbeddedPostgres
from app.settings import add_setting

PASSWORD_ENV = "PGCONTROLLER_ANALYST_PASSWORD"
DEFAULT_STATEMENT_TIMEOUT = "5min"
DEFAULT_CONNECTION_LIMIT = 10

_DURATION = re.compile(r"\s*(\d+)\s*(ms|s|min|h)?\s*")
_UNIT_MS = {None: 1, "ms": 1, "s": 1_000, "min": 60_000, "h": 3_600_000}


def parse_duration_ms(text: str) -> int:
    """PostgreSQL's duration forms for timeouts: a bare number is milliseconds."""
    match = _DURATION.fullmatch(text)
    if not match:
        raise InvalidInput(f"{text!r} is not a duration; use e.g. 90s, 5min, 1h or 1500ms")
    return int(match.group(1)) * _UNIT_MS[match.group(2)]


class _RefusePassword(argparse.Action):
    """Refuses a password given as a flag without echoing it, as argparse's own error would."""

    def __call__(self, parser: argparse.ArgumentParser, *_: object, **__: object) -> None:
        parser.error(
            f"--password is not accepted (flags show in `ps` and shell history); use --password-file, "
            f"{PASSWORD_ENV} or the prompt"
        )


def add_create_analyst_parser(
    db_commands: argparse._SubParsersAction,  # type: ignore[type-arg]
) -> None:
    parser = db_commands.add_parser(
        "create-analyst",
        # `--password X` must not pass for an abbreviation of --password-file.
        allow_abbrev=False,
        help="create (or update) a login role that can only read the reporting views",
        description="Creates a LOGIN role, member of pgc_analysts, that can SELECT the views of schema "
        "`reporting` and nothing else. Re-running it for an existing analyst sets its password and "
        "limits again. The password is read from --password-file, else "
        f"{PASSWORD_ENV}, else a prompt; --generate-password makes one and prints it on stdout.",
    )
    add_setting(parser, "data_dir")
    add_setting(parser, "db_url")
    parser.add_argument("name", help="the analyst's role name: a-z, 0-9 and _, at most 63 characters")
    parser.add_argument(
        "--statement-timeout",
        default=DEFAULT_STATEMENT_TIMEOUT,
        help="the analyst's default statement timeout, also its idle-in-transaction timeout "
        f"(e.g. 90s, 5min, 1h; a bare number is ms; default {DEFAULT_STATEMENT_TIMEOUT})",
    )
    parser.add_argument(
        "--connection-limit",
        type=int,
        default=DEFAULT_CONNECTION_LIMIT,
        help=f"connections the analyst may hold at once (default {DEFAULT_CONNECTION_LIMIT}; a "
        "partitioned Spark read holds one per partition)",
    )
    parser.add_argument("--password", nargs="?", action=_RefusePassword, help=argparse.SUPPRESS)
    source = parser.add_mutually_exclusive_group()
    source.add_argument(
        "--password-file", type=Path, help="read the password from the first line of this file ('-': stdin)"
    )
    source.add_argument(
        "--generate-password", action="store_true", help="generate a password and print it on stdout"
    )


def _read_password(args: argparse.Namespace) -> tuple[str, bool]:
    """(password, generated)."""
    from app.store.analysts import generate_password

    if args.generate_password:
        return generate_password(), True
    if args.password_file is not None:
        text = sys.stdin.readline() if str(args.password_file) == "-" else args.password_file.read_text()
        return text.splitlines()[0] if text.strip("\r\n") else "", False
    from_env = os.environ.get(PASSWORD_ENV)
    if from_env is not None:
        return from_env, False
    if not sys.stdin.isatty():
        raise InvalidInput(f"no password: use --password-file, {PASSWORD_ENV} or --generate-password")
    first = getpass.getpass(f"password for analyst {args.name}: ")
    if getpass.getpass("again: ") != first:
        raise InvalidInput("the passwords differ")
    return first, False


# The administrator's own credentials in the URL, which the analyst's URL must not carry.
_ADMIN_ONLY = ("passfile", "sslcert", "sslkey", "sslpassword")


def _analyst_url(url: str, name: str) -> str:
    """The database URL with the analyst as user and no password: safe to print."""
    try:
        parsed = pgurl.parse(url)
    except pgurl.PgUrlError as exc:
        raise InvalidInput(f"database URL {pgurl.masked(url)}: {exc}") from None
    params = {k: v for k, v in parsed.params.items() if k not in _ADMIN_ONLY}
    return parsed.replace(user=name, password=None, params=params).to_url()


def _create(url: str, args: argparse.Namespace) -> int:
    from app.store.analysts import AnalystLimits, create_analyst

    try:
        limits = AnalystLimits(parse_duration_ms(args.statement_timeout), args.connection_limit)
        password, generated = _read_password(args)
        outcome = asyncio.run(create_analyst(url, args.name, password, limits))
    except DomainError as exc:
        print(f"pgcontroller: {exc}", file=sys.stderr)
        return 1
    print(
        f"analyst {args.name} {outcome.value}; connect with {_analyst_url(url, args.name)}", file=sys.stderr
    )
    if generated:
        print(password)
    return 0


def run_create_analyst(args: argparse.Namespace, embedded: EmbeddedPostgres) -> int:
    """Against --db-url, else the embedded database (started for the command if it was not running).

    Making a role needs CREATEROLE, and hardening the database needs its owner; the embedded
    service role has neither right beyond ownership, so the embedded case runs as the cluster's
    superuser (its password from the owner-only D/pgpass-admin)."""
    if args.db_url:
        return _create(args.db_url, args)
    with embedded.running_for_command():
        return _create(embedded.admin_url(), args)
