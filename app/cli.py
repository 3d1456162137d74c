"""The `pgcontroller` command: `serve`, `db start|stop|url|upgrade|create-analyst`, `dev seed`
and `pipeline run`.

Scripts rely on these shapes: `db start` returns once the database accepts connections and
leaves it running; `db url` prints the connection URL on its last line.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from app.analyst_cli import add_create_analyst_parser
from app.config import Settings, default_instance_id, env, parse_hosts
from app.dev_cli import add_dev_parser
from app.domain.errors import InvalidInput
from app.embedded_pg import EmbeddedPostgres, EmbeddedPostgresError, PostgresBinariesNotFound

# Argument definitions only: PySpark itself is imported when `pipeline run` runs.
from spark.cli import add_run_arguments

EXIT_USAGE = 2


def _int_env(name: str, default: int) -> int:
    value = env(name)
    if value is None:
        return default
    try:
        return int(value)
    except ValueError:
        raise SystemExit(f"pgcontroller: {name} must be a whole number, got {value!r}") from None


def _data_dir_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=Path(env("DATA_DIR", ".pgcontroller") or ".pgcontroller"),
        help="embedded database and state (env PGCONTROLLER_DATA_DIR; default ./.pgcontroller)",
    )


def _db_url_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--db-url",
        default=env("DB_URL"),
        help="PostgreSQL URL; without it an embedded PostgreSQL is used (env PGCONTROLLER_DB_URL)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pgcontroller", description="A Pravega-compatible stream controller on PostgreSQL."
    )
    parser.add_argument("--log-level", default=env("LOG_LEVEL", "INFO"), help="env PGCONTROLLER_LOG_LEVEL")
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="run the controller (gRPC + REST)")
    _db_url_arg(serve)
    _data_dir_arg(serve)
    serve.add_argument(
        "--grpc-host", default=env("GRPC_HOST", "127.0.0.1"), help="env PGCONTROLLER_GRPC_HOST"
    )
    serve.add_argument(
        "--grpc-port", type=int, default=_int_env("GRPC_PORT", 9090), help="env PGCONTROLLER_GRPC_PORT"
    )
    serve.add_argument(
        "--rest-host", default=env("REST_HOST", "127.0.0.1"), help="env PGCONTROLLER_REST_HOST"
    )
    serve.add_argument(
        "--rest-port", type=int, default=_int_env("REST_PORT", 9091), help="env PGCONTROLLER_REST_PORT"
    )
    serve.add_argument(
        "--instance-id",
        default=env("INSTANCE_ID") or default_instance_id(),
        help="this process's member id in the cluster; must be unique among running controllers "
        "(env PGCONTROLLER_INSTANCE_ID; default: host name and a random suffix)",
    )
    serve.add_argument(
        "--container-count",
        type=int,
        default=_int_env("CONTAINER_COUNT", 4),
        help="segment containers, fixed for the cluster's life (env PGCONTROLLER_CONTAINER_COUNT)",
    )
    serve.add_argument(
        "--segment-store-hosts",
        default=env("SEGMENT_STORE_HOSTS", "127.0.0.1:12345"),
        help="comma-separated HOST:PORT list getURI answers with (env PGCONTROLLER_SEGMENT_STORE_HOSTS)",
    )
    serve.add_argument(
        "--request-concurrency",
        type=int,
        default=_int_env("REQUEST_CONCURRENCY", 64),
        help="streams whose requests run at once (env PGCONTROLLER_REQUEST_CONCURRENCY; default 64)",
    )
    serve.add_argument(
        "--completion-timeout",
        type=int,
        default=_int_env("COMPLETION_TIMEOUT", 120),
        help="seconds an API waits for its workflow before DEADLINE_EXCEEDED (env "
        "PGCONTROLLER_COMPLETION_TIMEOUT; default 120, Pravega's bound)",
    )
    serve.add_argument(
        "--txn-min-lease",
        type=int,
        default=_int_env("TXN_MIN_LEASE_MS", 10_000),
        help="smallest transaction lease in ms (env PGCONTROLLER_TXN_MIN_LEASE_MS; default 10000)",
    )
    serve.add_argument(
        "--txn-max-lease",
        type=int,
        default=_int_env("TXN_MAX_LEASE_MS", 600_000),
        help="largest transaction lease in ms (env PGCONTROLLER_TXN_MAX_LEASE_MS; default 600000)",
    )
    serve.add_argument(
        "--txn-ttl-hours",
        type=int,
        default=_int_env("TXN_TTL_HOURS", 24),
        help="completed-transaction records are kept 1-2 times this (env PGCONTROLLER_TXN_TTL_HOURS; "
        "default 24)",
    )
    for service, default in (("request", 16), ("retention", 1), ("watermark", 100)):
        serve.add_argument(
            f"--{service}-buckets",
            type=int,
            default=_int_env(f"{service.upper()}_BUCKETS", default),
            help=f"{service} bucket count (env PGCONTROLLER_{service.upper()}_BUCKETS; default {default}); "
            "fixed once the cluster holds a stream",
        )
    serve.add_argument(
        "--member-ttl",
        type=float,
        default=float(env("MEMBER_TTL_S", "5") or 5),
        help="seconds without a heartbeat after which a controller counts as gone "
        "(env PGCONTROLLER_MEMBER_TTL_S; default 5)",
    )
    serve.add_argument(
        "--rebalance-delay",
        type=float,
        default=float(env("REBALANCE_DELAY_S", "2") or 2),
        help="seconds membership must be stable before buckets move between live controllers "
        "(env PGCONTROLLER_REBALANCE_DELAY_S; default 2)",
    )
    serve.add_argument(
        "--container-rebalance-delay",
        type=float,
        default=float(env("CONTAINER_REBALANCE_DELAY_S", "10") or 10),
        help="seconds the segment-store host set must be stable before the leader moves containers "
        "(env PGCONTROLLER_CONTAINER_REBALANCE_DELAY_S; default 10, "
        "Pravega's rebalance.interval.seconds.min)",
    )
    serve.add_argument(
        "--retention-frequency-ms",
        type=int,
        default=_int_env("RETENTION_FREQUENCY_MS", 1_800_000),
        help="how often each stream with a retention policy records a stream cut and is considered for "
        "truncation (env PGCONTROLLER_RETENTION_FREQUENCY_MS; default 1800000, Pravega's 30 minutes)",
    )
    serve.add_argument(
        "--watermark-period-ms",
        type=int,
        default=_int_env("WATERMARK_PERIOD_MS", 10_000),
        help="how often watermarks are computed for the streams of owned watermark buckets "
        "(env PGCONTROLLER_WATERMARK_PERIOD_MS; default 10000)",
    )
    serve.add_argument(
        "--simulate-traffic",
        action="store_true",
        default=(env("SIMULATE_TRAFFIC", "") or "").lower() in ("1", "true", "yes"),
        help="count appends to the embedded segment store as traffic and send auto-scale reports "
        "from it as a segment store would (env PGCONTROLLER_SIMULATE_TRAFFIC; default off)",
    )
    serve.add_argument(
        "--traffic-report-period",
        type=float,
        default=float(env("TRAFFIC_REPORT_PERIOD_S", "5") or 5),
        help="seconds between the simulator's evaluations "
        "(env PGCONTROLLER_TRAFFIC_REPORT_PERIOD_S; default 5)",
    )
    serve.add_argument(
        "--advertise-host",
        default=env("ADVERTISE_HOST"),
        help="host other controllers and clients reach this one at (env PGCONTROLLER_ADVERTISE_HOST; "
        "default: the gRPC bind host, or this machine's name when binding all interfaces)",
    )
    serve.add_argument(
        "--ready-file", default=env("READY_FILE"), help="write the bound ports as JSON here once serving"
    )

    db = commands.add_parser("db", help="the embedded PostgreSQL and migrations")
    db_commands = db.add_subparsers(dest="db_command", required=True)
    for name, text in (
        ("start", "start the embedded PostgreSQL and leave it running"),
        ("stop", "stop the embedded PostgreSQL"),
        ("url", "print the embedded PostgreSQL's URL (last line)"),
    ):
        _data_dir_arg(db_commands.add_parser(name, help=text))
    upgrade = db_commands.add_parser("upgrade", help="apply migrations to head")
    _data_dir_arg(upgrade)
    _db_url_arg(upgrade)
    add_create_analyst_parser(db_commands, _data_dir_arg, _db_url_arg)
    add_dev_parser(commands, _data_dir_arg, _db_url_arg)
    pipeline = commands.add_parser("pipeline", help="the PySpark reporting pipeline (spark/README.md)")
    pipeline_commands = pipeline.add_subparsers(dest="pipeline_command", required=True)
    add_run_arguments(pipeline_commands.add_parser("run", help="new reporting-view rows into lake and marts"))
    return parser


def _settings(args: argparse.Namespace) -> Settings:
    try:
        return Settings(
            db_url=args.db_url,
            data_dir=args.data_dir,
            grpc_host=args.grpc_host,
            grpc_port=args.grpc_port,
            rest_host=args.rest_host,
            rest_port=args.rest_port,
            instance_id=args.instance_id,
            container_count=args.container_count,
            segment_store_hosts=parse_hosts(args.segment_store_hosts),
            request_concurrency=args.request_concurrency,
            completion_timeout_s=float(args.completion_timeout),
            request_buckets=args.request_buckets,
            retention_buckets=args.retention_buckets,
            watermark_buckets=args.watermark_buckets,
            member_ttl_s=args.member_ttl,
            rebalance_delay_s=args.rebalance_delay,
            container_rebalance_delay_s=args.container_rebalance_delay,
            advertise_host=args.advertise_host,
            simulate_traffic=args.simulate_traffic,
            retention_frequency_ms=args.retention_frequency_ms,
            watermark_period_ms=args.watermark_period_ms,
            traffic_report_period_s=args.traffic_report_period,
            txn_min_lease_ms=args.txn_min_lease,
            txn_max_lease_ms=args.txn_max_lease,
            txn_ttl_hours=args.txn_ttl_hours,
            ready_file=Path(args.ready_file) if args.ready_file else None,
            log_level=args.log_level,
        )
    except (ValueError, InvalidInput) as exc:
        raise SystemExit(f"pgcontroller: {exc}") from None


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
            started = embedded.start()
            try:
                upgrade_to_head(embedded.url())
            finally:
                if started:
                    embedded.stop()
        print("database is at the latest schema", file=sys.stderr)
    elif args.db_command == "create-analyst":
        from app.analyst_cli import run_create_analyst

        return run_create_analyst(args, embedded)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=getattr(logging, str(args.log_level).upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        if args.command == "db":
            return _db(args)
        if args.command == "dev":
            from app.dev_cli import run_dev

            return run_dev(args)
        if args.command == "pipeline":
            from spark.cli import run_command

            return run_command(args)
        from app.main import serve

        return asyncio.run(serve(_settings(args)))
    except PostgresBinariesNotFound as exc:
        print(f"pgcontroller: {exc}", file=sys.stderr)
        return 1
    except EmbeddedPostgresError as exc:
        print(f"pgcontroller: embedded PostgreSQL failed: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"pgcontroller: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
