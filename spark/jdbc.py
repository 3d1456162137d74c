"""Reading the `reporting` views over JDBC: URL translation and bounded, partitioned reads.

A view is read as several queries, one per range of its partition column (the stream id), so
PostgreSQL computes the view and Spark reads it on every core at once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

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


def query_rows(spark: SparkSession, target: JdbcTarget, sql: str) -> list[tuple[Any, ...]]:
    """A small query (a few rows) run through the same driver as the bulk reads."""
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
