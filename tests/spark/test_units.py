"""The pipeline's pure parts: URL translation, the incremental window, read partitioning,
master parsing, the day boundary and percentiles of the fact transforms, truncations dated
by their completion, and the rule that `spark` never imports the controller (and the one
name it shares with it)."""

from __future__ import annotations

import ast
from datetime import date, timedelta
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from app.store.analysts import ANALYST_GROUP
from spark import facts, sources
from spark.config import ANALYST_GROUP as PIPELINE_ANALYST_GROUP
from spark.config import local_cores
from spark.jdbc import IdRange, jdbc_target, partition_count
from spark.pipeline import DAY_MS, read_since
from spark.session import shuffle_partitions

SPARK_DIR = Path(__file__).resolve().parents[2] / "spark"


def test_libpq_urls_become_jdbc_urls() -> None:
    t = jdbc_target(
        "postgresql://me:p%40ss%2Fword@db.example:6543/pgc?sslmode=require&application_name=x&keepalives=1"
    )
    assert t.url == "jdbc:postgresql://db.example:6543/pgc?sslmode=require&ApplicationName=x"
    assert (t.user, t.password) == ("me", "p@ss/word")
    assert t.properties()["password"] == "p@ss/word" and t.properties()["driver"] == "org.postgresql.Driver"
    bare = jdbc_target("postgres://me@[::1]/")
    assert (bare.url, bare.password) == ("jdbc:postgresql://[::1]:5432/me", None)
    assert "password" not in bare.properties()
    with pytest.raises(ValueError, match="Unix socket"):
        jdbc_target("postgresql:///pgc?host=/var/run/postgresql")
    # An unknown parameter is refused by name rather than dropped (a typo in sslmode's name would
    # otherwise silently connect in plain text).
    with pytest.raises(ValueError, match="unknown parameter 'foo'"):
        jdbc_target("postgresql://me@db.example/pgc?foo=1")


def test_the_window_starts_at_the_day_of_the_high_water_mark_less_the_margin() -> None:
    assert read_since(None, 600_000) == 0
    noon = 20_000 * DAY_MS + DAY_MS // 2
    assert read_since(noon, 600_000) == 20_000 * DAY_MS
    just_after_midnight = 20_000 * DAY_MS + 60_000
    assert read_since(just_after_midnight, 600_000) == 19_999 * DAY_MS
    assert read_since(60_000, 600_000) == 0


def test_reads_are_split_by_stream_id_but_never_finer_than_one_id() -> None:
    assert partition_count(IdRange(None, None), 4) == 1
    assert partition_count(IdRange(1, 1_000), 4) == 4
    assert partition_count(IdRange(7, 9), 4) == 3
    assert partition_count(IdRange(7, 7), 4) == 1


def test_masters() -> None:
    assert local_cores("local") == 1 and local_cores("local[3]") == 3 and local_cores("local[4,2]") == 4
    assert local_cores("local[*]") >= 1  # type: ignore[operator]
    assert local_cores("spark://host:7077") is None and local_cores("yarn") is None
    assert shuffle_partitions("local[2]") == 4 and shuffle_partitions("spark://h:7077") == 200
    with pytest.raises(ValueError, match="local"):
        local_cores("local[two]")


def test_spark_never_imports_the_controller() -> None:
    for path in SPARK_DIR.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            assert not [n for n in names if n.split(".")[0] in ("app", "workers", "tests")], path


def test_the_analysts_group_is_the_controllers() -> None:
    # spark cannot import it (above), so it repeats the name; this keeps the two equal.
    assert PIPELINE_ANALYST_GROUP == ANALYST_GROUP


def test_every_event_source_is_read_and_counted() -> None:
    assert set(facts.ROW_SOURCES.values()) == {s.name for s in sources.EVENT_SOURCES}
    assert all(s.time_column for s in sources.EVENT_SOURCES)
    assert [s.name for s in sources.PROBED_SOURCES] == [
        s.name for s in sources.EVENT_SOURCES if s is not sources.SEGMENTS
    ]


def test_truncations_are_dated_by_their_completion(spark_session: SparkSession) -> None:
    day = 20_000 * DAY_MS
    history = spark_session.createDataFrame(
        [(1, day - 1, 500, 2), (1, day, 70, 0), (1, day + DAY_MS - 1, 30, 3), (2, day + 5, 9, 1)],
        "stream_id long, time_ms long, truncated_bytes long, deleted_count long",
    )
    empty = spark_session.createDataFrame([], "stream_id long, time_ms long")
    scale = empty.selectExpr(
        "stream_id",
        "time_ms",
        *(f"CAST(NULL AS {t}) AS {c}" for c, t in (("epoch", "long"), ("kind", "string"))),
        *(
            f"CAST(NULL AS long) AS {c}"
            for c in ("splits", "merges", "sealed_count", "created_count", "segment_count")
        ),
    )
    segments = spark_session.createDataFrame([], "stream_id long, sealed_ms long, sealed_size long")
    txns = spark_session.createDataFrame([], "stream_id long, time_ms long, outcome string, latency_ms long")
    rows = {
        (r["stream_id"], r["date"]): r for r in facts.event_facts(scale, segments, txns, history).collect()
    }
    today = date(1970, 1, 1) + timedelta(days=20_000)
    before = today - timedelta(days=1)
    assert set(rows) == {(1, before), (1, today), (2, today)}
    figures = (
        "bytes_truncated",
        "truncations",
        "segments_deleted",
        "_rows_trunc",
        "epochs_created",
        "_rows_scale",
    )
    assert tuple(rows[1, before][f] for f in figures) == (500, 1, 2, 1, 0, 0)
    assert tuple(rows[1, today][f] for f in figures) == (100, 2, 3, 2, 0, 0)
    assert rows[1, today]["_last_ms"] == day + DAY_MS - 1 and rows[2, today]["epoch_end"] is None


def test_days_are_utc_calendar_days_and_percentiles_interpolate(spark_session: SparkSession) -> None:
    day = 20_000 * DAY_MS
    scale = spark_session.createDataFrame(
        [
            (1, day - 1, 5, "split", 1, 0, 1, 2, 3),  # the last millisecond of the day before
            (1, day, 6, "rolling", 0, 0, 3, 3, 3),
            (1, day + 1, 7, "rolling", 0, 0, 3, 3, 3),
            (1, day + DAY_MS - 1, 8, "merge", 0, 1, 2, 1, 2),
        ],
        "stream_id long, time_ms long, epoch long, kind string, splits long, merges long, "
        "sealed_count long, created_count long, segment_count long",
    )
    rows = {r["date"]: r for r in facts.scale_facts(scale).collect()}
    today = date(1970, 1, 1) + timedelta(days=20_000)
    before = today - timedelta(days=1)
    assert set(rows) == {before, today}
    assert (rows[before]["epochs_created"], rows[before]["splits"], rows[before]["epoch_end"]) == (1, 1, 5)
    t = rows[today]
    assert (t["epochs_created"], t["scales"], t["rolling_epochs"], t["merges"]) == (3, 1, 2, 1)
    assert (t["segments_created"], t["segments_sealed"], t["epoch_end"], t["segment_count_end"]) == (
        7,
        8,
        8,
        2,
    )

    txns = spark_session.createDataFrame(
        [(1, day + i, "COMMITTED", latency) for i, latency in enumerate((10, 20, 30, 40))]
        + [(1, day + 9, "ABORTED", 1_000_000), (1, day + 10, "COMMITTED", None)],
        "stream_id long, time_ms long, outcome string, latency_ms long",
    )
    (row,) = facts.txn_facts(txns).collect()
    assert (row["txn_committed"], row["txn_aborted"]) == (5, 1)
    # percentile_cont over 10, 20, 30, 40 (the commit without details has no latency)
    assert row["commit_latency_p50_ms"] == pytest.approx(25.0)
    assert row["commit_latency_p90_ms"] == pytest.approx(37.0)
    assert row["commit_latency_max_ms"] == 40


def test_the_readme_explains_every_fact_column() -> None:
    readme = (SPARK_DIR / "README.md").read_text()
    for name, _, _ in (*facts.STREAM_DAILY, *facts.DAILY):
        assert f"`{name}`" in readme, name
