"""The `pgcontroller` command: `serve`, `segment-store`, `db start|stop|url|upgrade|create-analyst`,
`dev seed`, `pipeline run`, `request parked list|retry|drop`, `kvt get|put|remove|list` and
`auth user add|update|remove|list|import`,
and the operator commands `scope`, `stream`, `readergroup` (app/cli/admin).

Scripts rely on these shapes: `db start` returns once the database accepts connections and
leaves it running; `db url` prints the connection URL on its last line.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from app.cli.admin import NOUNS as ADMIN_NOUNS
from app.cli.admin import add_admin_parsers
from app.cli.analyst import add_create_analyst_parser
from app.cli.auth import add_auth_parser
from app.cli.dev import add_dev_parser
from app.cli.globals import EitherSideParser, add_either_side
from app.cli.kvt import add_kvt_parser
from app.cli.request import add_request_parser
from app.domain.errors import InvalidInput
from app.embedded_pg import EmbeddedPostgres, EmbeddedPostgresError, PostgresBinariesNotFound
from app.observability.logs import configure as configure_logging
from app.security.tls import check_tls
from app.settings import SettingError, Settings, add_serve_settings, add_setting, resolve

# Argument definitions only: PySpark itself is imported when `pipeline run` runs.
from spark.cli import add_run_arguments

EXIT_USAGE = 2
# What `segment-store` reads; the container count is the cluster's own (in the database).
SEGMENT_STORE_SETTINGS = (
    "db_url",
    "data_dir",
    "segment_store_host",
    "segment_store_port",
    "segment_store_metrics_port",
    "no_metrics",
    "advertise_host",
    "segment_store_hosts",
    "segment_store_tail_wait_s",
    "segment_store_tail_linger_s",
    "segment_store_heartbeat_s",
    "segment_store_expiry_s",
    "segment_store_db_wait_s",
    "pool_max_size",
    "shutdown_timeout_s",
    "ready_file",
    "auth_enabled",
    "auth_token_signing_key_file",
    "tls_enabled",
    "tls_cert_file",
    "tls_key_file",
    "tls_protocol_version",
    # Every store of a cluster needs the long-term tier: bytes any of them moved there are read
    # by whichever store owns the segment's container next.
    "tier",
    "tier_directory",
    "tier_s3_bucket",
    "tier_s3_prefix",
    "tier_s3_endpoint",
    "tier_s3_region",
    "tier_s3_access_key_id",
    "tier_s3_secret_access_key",
    "tier_chunk_bytes",
    "tier_flush_interval_s",
    "tier_flush_age_s",
    "tier_gc_grace_s",
    "tier_throttle_bytes",
    "tier_throttle_max_delay_s",
)
log = logging.getLogger("pgcontroller")


def _with_key(settings: Settings, *, generate: bool) -> Settings:
    """The delegation-token signing key, read (or made) once at start: never from argv."""
    from app.security.signing_key import with_signing_key

    return with_signing_key(settings, os.environ, generate=generate)


def build_parser() -> argparse.ArgumentParser:
    parser = EitherSideParser(
        prog="pgcontroller", description="A Pravega-compatible stream controller on PostgreSQL."
    )
    commands = parser.add_subparsers(dest="command", required=True, parser_class=argparse.ArgumentParser)
    add_serve_settings(commands.add_parser("serve", help="run the controller (gRPC + REST)"))
    store = commands.add_parser(
        "segment-store", help="run a segment store of its own (any number share one database)"
    )
    for name in SEGMENT_STORE_SETTINGS:
        add_setting(store, name)

    db = commands.add_parser("db", help="the embedded PostgreSQL and migrations")
    db_commands = db.add_subparsers(dest="db_command", required=True)
    for name, text in (
        ("start", "start the embedded PostgreSQL and leave it running"),
        ("stop", "stop the embedded PostgreSQL"),
        ("url", "print the embedded PostgreSQL's URL (last line)"),
    ):
        add_setting(db_commands.add_parser(name, help=text), "data_dir")
    upgrade = db_commands.add_parser("upgrade", help="apply migrations to head")
    add_setting(upgrade, "data_dir")
    add_setting(upgrade, "db_url")
    add_create_analyst_parser(db_commands)
    add_dev_parser(commands)
    pipeline = commands.add_parser("pipeline", help="the PySpark reporting pipeline (spark/README.md)")
    pipeline_commands = pipeline.add_subparsers(dest="pipeline_command", required=True)
    add_run_arguments(pipeline_commands.add_parser("run", help="new reporting-view rows into lake and marts"))
    add_request_parser(commands)
    add_kvt_parser(commands)
    add_auth_parser(commands)
    add_admin_parsers(commands)
    add_either_side(parser)
    return parser


def _db(args: argparse.Namespace) -> int:
    embedded = EmbeddedPostgres(args.data_dir)
    if args.db_command == "start":
        started = embedded.start()
        print("started" if started else "already running", file=sys.stderr)
        print(embedded.url())
    elif args.db_command == "stop":
        embedded.stop()
    elif args.db_command == "url":
        if not embedded.is_running():
            print(f"pgcontroller: no embedded PostgreSQL is running for {args.data_dir}", file=sys.stderr)
            return 1
        print(embedded.url())
    elif args.db_command == "upgrade":
        from app.store.migrate import upgrade_to_head

        if args.db_url:
            upgrade_to_head(args.db_url)
        else:
            with embedded.running_for_command():
                upgrade_to_head(embedded.url())
        print("database is at the latest schema", file=sys.stderr)
    elif args.db_command == "create-analyst":
        from app.cli.analyst import run_create_analyst

        return run_create_analyst(args, embedded)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        resolved = resolve(args, os.environ)
        settings = resolved.settings()
        if args.command in ("serve", "segment-store"):
            # Every TLS file is read now: a bad one stops start-up in one line, before anything runs.
            check_tls(settings)
        if args.command == "serve":
            # Every auth handler plugin is imported now, for the same reason.
            from app.security.plugins import check_handlers

            check_handlers(settings)
    except (ValueError, InvalidInput) as exc:
        print(f"pgcontroller: {exc}", file=sys.stderr)
        return EXIT_USAGE
    # The db and dev commands read their shared settings (--data-dir, --db-url) from `args`.
    for name in resolved.names:
        setattr(args, name, getattr(settings, name))
    configure_logging(settings.log_level, settings.log_format)
    for line in resolved.deprecations:
        log.warning(line)
    if settings.db_url is not None:
        # A URL no client could use stops every command here, in one line, before anything starts.
        from app.store.dsn import connect_args

        try:
            connect_args(settings.db_url)
        except InvalidInput as exc:
            print(f"pgcontroller: {exc}", file=sys.stderr)
            return EXIT_USAGE
    try:
        if args.command == "db":
            return _db(args)
        if args.command == "dev":
            from app.cli.dev import run_dev

            return run_dev(args)
        if args.command == "request":
            from app.cli.request import run_request

            return run_request(args)
        if args.command == "kvt":
            from app.cli.kvt import run_kvt

            return run_kvt(args)
        if args.command in ADMIN_NOUNS:
            from app.cli.admin import run_admin

            return run_admin(args)
        if args.command == "auth":
            from app.cli.auth import run_auth

            return run_auth(args, EmbeddedPostgres(args.data_dir))
        if args.command == "pipeline":
            from spark.cli import run_command

            return run_command(args)
        if args.command == "segment-store":
            from app.segment_store_main import serve_segment_store

            return asyncio.run(serve_segment_store(_with_key(settings, generate=False)))
        from app.main import serve, supervise

        settings = _with_key(settings, generate=True)
        if settings.processes > 1:
            # The children re-run this command line, with the flags that make each one of the run.
            return asyncio.run(supervise(settings, sys.argv[1:] if argv is None else list(argv)))
        return asyncio.run(serve(settings))
    except SettingError as exc:
        print(f"pgcontroller: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except PostgresBinariesNotFound as exc:
        print(f"pgcontroller: {exc}", file=sys.stderr)
        return 1
    except EmbeddedPostgresError as exc:
        print(f"pgcontroller: embedded PostgreSQL failed: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"pgcontroller: {exc}", file=sys.stderr)
        return 1


# Native runtimes whose threads must not meet a finalizing interpreter: obstore's (the S3 tier)
# calls back into Python from threads of its own, and one caught by finalization ends the process
# with SIGABRT and no message, turning an orderly exit (0, or 1 after a start-up refusal was
# printed) into a crash (seen once in about 40 refusals under load).
_NATIVE_RUNTIMES = ("obstore",)


def run() -> NoReturn:
    """The `pgcontroller` command and `python -m app.cli`: main(), then the exit. With a native
    runtime loaded, the process ends without the interpreter's finalization, once the logs and
    the standard streams are flushed (nothing here registers exit handlers)."""
    code = main()
    if any(name in sys.modules for name in _NATIVE_RUNTIMES):
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)
