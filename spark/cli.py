"""`pgcontroller pipeline run` arguments and entry; argparse only at import, so the controller's
CLI can build its parser without loading PySpark (the run itself imports it)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from spark.config import PipelineConfig, default_jdbc_jar


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--db-url",
        default=os.environ.get("PGCONTROLLER_DB_URL"),
        help="postgresql:// URL of a role that reads schema reporting and owns (or may create) "
        "schema reporting_marts (env PGCONTROLLER_DB_URL)",
    )
    parser.add_argument(
        "--read-url",
        default=os.environ.get("PGCONTROLLER_READ_URL"),
        help="postgresql:// URL the reporting views are read through, a hot standby for example "
        "(libpq's target_session_attrs=prefer-standby picks one of several hosts); the marts are "
        "still written through --db-url (env PGCONTROLLER_READ_URL; default: --db-url)",
    )
    parser.add_argument(
        "--out", type=Path, required=True, help="directory for the lake, charts and summary.html"
    )
    parser.add_argument(
        "--master",
        default="local[*]",
        help="Spark master URL: local[*] (default), local[N], spark://HOST:PORT, ...",
    )
    parser.add_argument(
        "--lake",
        default=None,
        help="Parquet lake URI (default OUT/lake; on a cluster use storage every executor reaches)",
    )
    parser.add_argument(
        "--jdbc-jar",
        default=default_jdbc_jar(),
        help="PostgreSQL JDBC driver jar (env PGCONTROLLER_JDBC_JAR; default /usr/share/java/postgresql.jar)",
    )
    parser.add_argument("--driver-memory", default="4g", help="Spark driver memory (default 4g)")
    parser.add_argument(
        "--partitions",
        type=int,
        default=None,
        help="JDBC range queries per view (default: Spark's default parallelism, the cores in local mode)",
    )
    parser.add_argument(
        "--late-margin-ms",
        type=int,
        default=600_000,
        help="events up to this much older than the last high-water mark are still counted "
        "(default 600000: 10 minutes)",
    )
    parser.add_argument("--chart-streams", type=int, default=5, help="streams that get their own charts")
    parser.add_argument(
        "--controller",
        default=os.environ.get("PGCONTROLLER_CONTROLLER_URI"),
        metavar="HOST:PORT",
        help="a Pravega controller whose chart streams' events are read (the pravega data source) "
        "for an event-throughput chart per stream (env PGCONTROLLER_CONTROLLER_URI; default: none, no "
        "event is read)",
    )
    parser.add_argument(
        "--grant-to",
        action="append",
        default=[],
        metavar="ROLE",
        help="give ROLE read access to schema reporting_marts too (repeatable; the analysts' group "
        "pgc_analysts always has it)",
    )
    parser.add_argument("--full", action="store_true", help="recompute every day instead of only what is new")
    parser.add_argument("--quiet", action="store_true", help="no progress lines")


def config_from_args(args: argparse.Namespace) -> PipelineConfig:
    if not args.db_url:
        raise ValueError("--db-url (or PGCONTROLLER_DB_URL) is required")
    return PipelineConfig(
        db_url=args.db_url,
        read_url=args.read_url or None,
        out=args.out,
        master=args.master,
        jdbc_jar=args.jdbc_jar,
        driver_memory=args.driver_memory,
        partitions=args.partitions,
        late_margin_ms=args.late_margin_ms,
        chart_streams=args.chart_streams,
        full=args.full,
        progress=not args.quiet,
        lake_uri=args.lake,
        grant_to=tuple(args.grant_to),
        controller=args.controller or None,
    )


def run_command(args: argparse.Namespace) -> int:
    """Runs the pipeline; returns the process exit code (1 with a one-line reason on failure)."""
    try:
        config = config_from_args(args)
    except ValueError as exc:
        print(f"pgcontroller pipeline: {exc}", file=sys.stderr)
        return 2
    import asyncpg
    from py4j.protocol import Py4JJavaError  # type: ignore[import-untyped]
    from pyspark.errors import PySparkException

    from spark.jdbc import JdbcError, spark_error_line
    from spark.pipeline import run
    from spark.session import JdbcDriverMissing
    from spark.state import MartsForbidden, PipelineBusy

    try:
        result = run(config)
    except (JdbcDriverMissing, MartsForbidden, PipelineBusy, ValueError) as exc:
        return _fail(str(exc))
    except (OSError, asyncpg.PostgresError) as exc:
        return _fail(f"database or file error: {exc}")
    except JdbcError as exc:
        # The driver's exception (e.g. a PSQLException) that Spark's own error left unnamed.
        return _fail(f"Spark failed: {exc}")
    except (Py4JJavaError, PySparkException) as exc:
        return _fail(f"Spark failed: {spark_error_line(exc)}")
    print(result.summary)
    return 0


def _fail(message: str) -> int:
    print(f"pgcontroller pipeline: {message}", file=sys.stderr)
    return 1
