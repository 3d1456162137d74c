"""Reading the `reporting` views over JDBC: URL translation and bounded, partitioned reads.

A view is read as several queries, one per range of its partition column (the stream id), so
PostgreSQL computes the view and Spark reads it on every core at once.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from py4j.java_gateway import is_instance_of  # type: ignore[import-untyped]
from py4j.protocol import Py4JJavaError  # type: ignore[import-untyped]
from pyspark import SparkContext
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession

from pgurl import PgUrlError, jdbc_parts


@dataclass(frozen=True)
class JdbcTarget:
    url: str
    user: str
    password: str | None = field(repr=False)
    # Connection properties kept out of the URL because they are secret (sslpassword).
    secrets: tuple[tuple[str, str], ...] = field(default=(), repr=False)

    def properties(self, **extra: str) -> dict[str, str]:
        props = {"driver": "org.postgresql.Driver", "user": self.user, **dict(self.secrets), **extra}
        if self.password is not None:
            props["password"] = self.password
        return props

    def redact(self, text: str) -> str:
        """`text` without this target's secrets: a message may be printed or logged."""
        for secret in (self.password, *(value for _, value in self.secrets)):
            if secret:
                text = text.replace(secret, "*****")
        return text


class JdbcError(RuntimeError):
    """A JDBC connection or statement failed; the message is the driver's own exception (its
    class and first line, e.g. PostgreSQL's `FATAL: database "x" does not exist`)."""


def jdbc_target(db_url: str) -> JdbcTarget:
    """A libpq URL (pgurl: every form `psql` takes, sslmode and certificates included) as pgjdbc
    wants it; the password (from the URL or its passfile) travels as a property, not in the URL."""
    try:
        parts = jdbc_parts(db_url)
    except PgUrlError as exc:
        raise ValueError(str(exc)) from None
    return JdbcTarget(
        url=parts.url, user=parts.user, password=parts.password, secrets=tuple(parts.secrets.items())
    )


@dataclass(frozen=True)
class IdRange:
    """The partition column's range over the streams (None: no stream yet)."""

    low: int | None
    high: int | None


def spark_error_line(exc: Py4JJavaError | PySparkException) -> str:
    """The first line of a Spark error: the Java exception's (class and message) for a py4j
    error, whose own first line only names the Java method called; the rest is stack."""
    text = str(exc.java_exception) if isinstance(exc, Py4JJavaError) else str(exc)
    return (text.splitlines() or [""])[0]


# Causes followed down a Java exception chain before giving up (a chain is a few links long).
_MAX_CAUSES = 16


def driver_exception(exc: BaseException) -> str | None:
    """The first line of the JDBC driver's exception in the Java cause chain under `exc` (a
    py4j error or PySpark's conversion of one), or None: the first `java.sql.SQLException` that
    is not Spark's own (Spark's SparkSQLException is one too, and wraps rather than causes)."""
    gateway = SparkContext._gateway
    # PySpark keeps the Java exception it converted only in a private attribute.
    throwable = exc.java_exception if isinstance(exc, Py4JJavaError) else getattr(exc, "_origin", None)
    for _ in range(_MAX_CAUSES):
        if gateway is None or throwable is None:
            return None
        if is_instance_of(gateway, throwable, "java.sql.SQLException") and not is_instance_of(
            gateway, throwable, "org.apache.spark.SparkThrowable"
        ):
            return (str(throwable.toString()).splitlines() or [""])[0]
        throwable = throwable.getCause()
    return None


@contextmanager
def driver_errors(*targets: JdbcTarget) -> Iterator[None]:
    """Turns a Spark error whose first line hides the JDBC driver's exception under it into a
    JdbcError saying that exception (without the targets' secrets); other errors pass as they are.

    Spark 4 reports a JDBC failure on Spark's driver (a connection refused, a database missing,
    a certificate rejected as a read looks up its schema) as its own error,
    `[FAILED_JDBC.CONNECTION] ... Couldn't connect to the database`, naming no cause. A task's
    failure still names it on its first line (`Job aborted ...: org.postgresql.util.PSQLException:
    ...`), as Spark 3 did: that one is left alone."""
    try:
        yield
    except (Py4JJavaError, PySparkException) as exc:
        cause = driver_exception(exc)
        if cause is None or cause in spark_error_line(exc):
            raise
        for target in targets:
            cause = target.redact(cause)
        raise JdbcError(cause) from exc


def query_rows(spark: SparkSession, target: JdbcTarget, sql: str) -> list[tuple[Any, ...]]:
    """A small query (a few rows) run through the same driver as the bulk reads."""
    with driver_errors(target):
        frame = spark.read.jdbc(url=target.url, table=f"({sql}) AS q", properties=target.properties())
        return [tuple(row) for row in frame.collect()]


def partition_count(ids: IdRange, wanted: int) -> int:
    if ids.low is None or ids.high is None:
        return 1
    # Ranges narrower than one id would only produce empty queries.
    return max(1, min(wanted, ids.high - ids.low + 1))


def read_window(
    spark: SparkSession,
    target: JdbcTarget,
    *,
    view: str,
    columns: tuple[str, ...],
    partition_column: str,
    time_column: str,
    since_ms: int,
    ids: IdRange,
    partitions: int,
    fetch_size: int,
) -> DataFrame:
    """Rows of `view` with `time_column >= since_ms`, read as `partitions` id-range queries.

    Spark leaves the first and the last range open, so ids outside `ids` (a stream created
    since it was measured) are still read."""
    sql = f"SELECT {', '.join(columns)} FROM {view} WHERE {time_column} >= {int(since_ms)}"
    props = target.properties(fetchsize=str(fetch_size))
    if ids.low is None or ids.high is None or partitions <= 1:
        return spark.read.jdbc(url=target.url, table=f"({sql}) AS w", properties=props)
    return spark.read.jdbc(
        url=target.url,
        table=f"({sql}) AS w",
        column=partition_column,
        lowerBound=ids.low,
        # Spark's stride splits [lower, upper); the top id must fall inside the last range.
        upperBound=ids.high + 1,
        numPartitions=partitions,
        properties=props,
    )
