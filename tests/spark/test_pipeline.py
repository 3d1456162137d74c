"""The pipeline on seeded histories: every fact equals PostgreSQL's own figure over the
`reporting` views, a rerun after new activity recomputes only the new days (and exactly
them), and the charts and the summary page are there and show something."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from datetime import date
from decimal import Decimal
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from matplotlib import image as mpimg
from pyspark.sql import SparkSession

from app.domain.history_gen import SeedSpec
from app.domain.records import ScalingPolicy, StreamConfig
from app.domain.txns import TxnStatus
from app.store.seed import seed_history
from spark.facts import DAILY, STREAM_DAILY
from spark.pipeline import DAY_MS, day_start_ms, read_since, utc_date
from tests.spark import expected
from tests.spark.conftest import pipeline_config, run_pipeline
from tests.support.services import Services, running_controller

NOW_DAY = day_start_ms(int(time.time() * 1000))
# The seeded history ends days before today, so activity made now lands on later days.
FIRST = SeedSpec(
    streams=4,
    epochs_per_stream=120,
    txns_per_stream=40,
    scope_prefix="early",
    seed=11,
    start_ms=NOW_DAY - 20 * DAY_MS,
    span_ms=8 * DAY_MS + 3_600_000,
    retention_fraction=0.5,
    mark_streams=False,
)
LATER = SeedSpec(
    streams=2,
    epochs_per_stream=60,
    txns_per_stream=20,
    scope_prefix="later",
    seed=12,
    start_ms=NOW_DAY - 10 * DAY_MS,
    span_ms=4 * DAY_MS,
    retention_fraction=1.0,
    mark_streams=False,
)
FLOAT_COLUMNS = {name for name, kind, _ in STREAM_DAILY if kind.typeName() == "double"}


@pytest.fixture
async def conn(db_url: str) -> AsyncIterator[asyncpg.Connection]:
    c = await asyncpg.connect(db_url)
    try:
        yield c
    finally:
        await c.close()


async def seed(db_url: str, conn: asyncpg.Connection, spec: SeedSpec) -> None:
    await seed_history(db_url, spec, analyze=False)
    assert await expected.fill_txn_details(conn) > 0


def normalized(row: dict[str, Any]) -> dict[str, Any]:
    return {k: int(v) if isinstance(v, Decimal) else v for k, v in row.items()}


def assert_same(actual: dict[str, Any], wanted: dict[str, Any], where: object) -> None:
    for name, value in wanted.items():
        got = actual[name]
        if name in FLOAT_COLUMNS and value is not None and got is not None:
            assert got == pytest.approx(value, rel=1e-9, abs=1e-9), (where, name)
        else:
            assert got == value, (where, name, got, value)


def lake_rows(spark: SparkSession, lake: str, table: str) -> list[dict[str, Any]]:
    return [r.asDict() for r in spark.read.parquet(f"{lake}/{table}").collect()]


async def mart_rows(conn: asyncpg.Connection, table: str) -> list[dict[str, Any]]:
    return [normalized(dict(r)) for r in await conn.fetch(f"SELECT * FROM reporting_marts.{table}")]


def by_stream_day(rows: list[dict[str, Any]]) -> dict[expected.Key, dict[str, Any]]:
    return {(r["date"], r["stream_id"]): r for r in rows}


async def check_all_facts(
    spark: SparkSession, conn: asyncpg.Connection, lake: str, hw_days: set[date]
) -> None:
    """Lake and marts hold exactly the facts SQL computes over the views.

    Truncated bytes are observed, not derived: per stream they add up to the view's figure,
    and they are dated on the high-water day of the run that saw them (`hw_days`).
    """
    want = {k: normalized(v) for k, v in (await expected.stream_day_facts(conn)).items()}
    truncated = await expected.truncated_bytes(conn)
    lake_facts = by_stream_day(lake_rows(spark, lake, "stream_daily"))
    mart_facts = by_stream_day(await mart_rows(conn, "stream_daily_facts"))
    truncation_only = {k for k, v in lake_facts.items() if k not in want}
    assert all(lake_facts[k]["bytes_truncated"] > 0 and k[0] in hw_days for k in truncation_only)
    assert set(lake_facts) == set(want) | truncation_only
    assert mart_facts == lake_facts
    for key, row in want.items():
        assert_same(lake_facts[key], row, key)
    per_stream: dict[int, int] = {}
    for (day, stream_id), row in lake_facts.items():
        if row["bytes_truncated"]:
            assert day in hw_days
            per_stream[stream_id] = per_stream.get(stream_id, 0) + row["bytes_truncated"]
    assert per_stream == truncated and truncated

    # Totals per day: sums of the stream facts, latency over every commit of the day.
    latency = await expected.daily_latency(conn)
    lake_daily = {r["date"]: r for r in lake_rows(spark, lake, "daily")}
    assert {r["date"]: r for r in await mart_rows(conn, "daily_facts")} == lake_daily
    assert set(lake_daily) == {day for day, _ in lake_facts}
    counted = [name for name, kind, _ in DAILY if kind.typeName() == "long" and not name.startswith("commit")]
    for day, row in lake_daily.items():
        streams = [r for (d, _), r in lake_facts.items() if d == day]
        assert row["streams_active"] == len(streams)
        for name in counted[1:]:
            assert row[name] == sum(r[name] for r in streams), (day, name)
        for name, value in latency.get(day, {}).items():
            if name != "date":
                assert_same(row, {name: value}, day)

    totals = {r["stream_id"]: r for r in await mart_rows(conn, "stream_totals")}
    assert set(totals) == {s for _, s in lake_facts}
    for stream_id, total in totals.items():
        mine = [r for (_, s), r in lake_facts.items() if s == stream_id]
        assert total["active_days"] == len(mine)
        for name in ("epochs_created", "bytes_sealed", "bytes_truncated", "txn_committed", "txn_aborted"):
            assert total[name] == sum(r[name] for r in mine), (stream_id, name)


async def test_every_fact_equals_sql_over_the_views(
    db_url: str, conn: asyncpg.Connection, spark_session: SparkSession, tmp_path: Path
) -> None:
    await seed(db_url, conn, FIRST)
    result = await run_pipeline(spark_session, pipeline_config(db_url, tmp_path))

    newest = await expected.newest_event_ms(conn)
    assert result.full_run and result.recomputed_from == date.min
    assert result.high_water_ms == newest
    assert result.facts_written == len(lake_rows(spark_session, result.lake, "stream_daily")) > 0
    await check_all_facts(spark_session, conn, result.lake, {utc_date(newest)})
    # Every kind of activity is in the history, so no comparison above was vacuous.
    facts = lake_rows(spark_session, result.lake, "stream_daily")
    for name in ("splits", "merges", "rolling_epochs", "bytes_sealed", "txn_committed", "txn_aborted"):
        assert sum(r[name] for r in facts) > 0, name
    assert any(r["commit_latency_p99_ms"] for r in facts)


async def live_activity(db_url: str, scope: str = "live") -> int:
    """A real stream scaled twice and four transactions (three commits, one abort) through the
    controller's own services and workers; returns the time the activity started."""
    began = int(time.time() * 1000)
    async with running_controller(db_url) as s:
        await s.scopes.create_scope(scope)
        await s.streams.create_stream(scope, "s", StreamConfig(ScalingPolicy.fixed(2)))
        await scale(s, scope, 0, [0], [(0.0, 0.25), (0.25, 0.5)])
        await scale(s, scope, 1, [(1 << 32) | 2], [(0.0, 0.125), (0.125, 0.25)])
        txns = [(await s.transactions.create(scope, "s", 10_000)).txn for _ in range(4)]
        for txn in txns[:3]:
            await s.transactions.commit(scope, "s", txn)
        await s.transactions.abort(scope, "s", txns[3])
        deadline = time.monotonic() + 20
        for txn in txns:
            while (await s.transactions.state(scope, "s", txn)) not in (
                TxnStatus.COMMITTED,
                TxnStatus.ABORTED,
            ):
                assert time.monotonic() < deadline, "transaction did not complete"
                await asyncio.sleep(0.05)
    return began


async def scale(
    s: Services, scope: str, epoch: int, seal: list[int], ranges: list[tuple[float, float]]
) -> None:
    await s.lifecycle.scaling.scale(scope, "s", seal, ranges, int(time.time() * 1000))
    deadline = time.monotonic() + 20
    while (await s.stream_store.get_active_epoch(scope, "s"))[1].epoch != epoch + 1:
        assert time.monotonic() < deadline, "scale did not complete"
        await asyncio.sleep(0.05)


def files_of_days(lake: str, before: date) -> dict[Path, int]:
    """Every file of the lake's date partitions before `before`, with its modification time."""
    found: dict[Path, int] = {}
    for table in ("stream_daily", "daily"):
        for part in Path(lake, table).glob("date=*"):
            if date.fromisoformat(part.name.removeprefix("date=")) < before:
                found.update({f: f.stat().st_mtime_ns for f in part.iterdir()})
    return found


async def test_a_rerun_recomputes_exactly_the_new_days(
    db_url: str, conn: asyncpg.Connection, spark_session: SparkSession, tmp_path: Path
) -> None:
    config = pipeline_config(db_url, tmp_path)
    await seed(db_url, conn, FIRST)
    first = await run_pipeline(spark_session, config)
    before = by_stream_day(lake_rows(spark_session, first.lake, "stream_daily"))

    await seed(db_url, conn, LATER)
    await live_activity(db_url)
    since = read_since(first.high_water_ms, config.late_margin_ms)
    untouched = files_of_days(first.lake, utc_date(since))
    assert untouched
    window_rows = await conn.fetchval(
        """SELECT (SELECT count(*) FROM reporting.scale_events WHERE event_time >= $1)
                + (SELECT count(*) FROM reporting.segments WHERE sealed_time >= $1)
                + (SELECT count(*) FROM reporting.transactions WHERE completion_time >= $1)""",
        since,
    )

    second = await run_pipeline(spark_session, config)
    newest = await expected.newest_event_ms(conn)
    assert not second.full_run
    assert (second.read_since_ms, second.recomputed_from) == (since, utc_date(since))
    assert second.rows_read == window_rows < first.rows_read + window_rows
    assert second.high_water_ms == newest
    await check_all_facts(spark_session, conn, second.lake, {utc_date(first.high_water_ms), utc_date(newest)})

    after = by_stream_day(lake_rows(spark_session, second.lake, "stream_daily"))
    old_days = {k: v for k, v in before.items() if k[0] < second.recomputed_from}
    assert old_days and {k: v for k, v in after.items() if k[0] < second.recomputed_from} == old_days
    assert files_of_days(second.lake, utc_date(since)) == untouched  # not even rewritten
    new_keys = set(after) - set(before)
    assert new_keys and all(day >= second.recomputed_from for day, _ in new_keys)
    live_id = await conn.fetchval("SELECT stream_id FROM reporting.streams WHERE scope = 'live'")
    live = [r for (_, s), r in after.items() if s == live_id]
    assert sum(r["scales"] for r in live) == 2
    assert (sum(r["txn_committed"] for r in live), sum(r["txn_aborted"] for r in live)) == (3, 1)
    assert any(r["commit_latency_max_ms"] is not None for r in live)

    # Nothing new: nothing read, nothing rewritten, the run is still recorded.
    third = await run_pipeline(spark_session, config)
    assert (third.rows_read, third.facts_written, third.recomputed_from) == (0, 0, None)
    assert third.high_water_ms == second.high_water_ms
    assert by_stream_day(lake_rows(spark_session, third.lake, "stream_daily")) == after
    runs = await conn.fetch(
        "SELECT run_id, full_run, rows_read FROM reporting_marts.pipeline_runs ORDER BY run_id"
    )
    assert [(r["full_run"], r["rows_read"]) for r in runs] == [
        (True, first.rows_read),
        (False, second.rows_read),
        (False, 0),
    ]


def check_pictures(charts: tuple[str, ...], summary: str) -> str:
    for chart in map(Path, charts):
        assert chart.read_bytes().startswith(b"\x89PNG\r\n\x1a\n") and chart.stat().st_size > 10_000
        pixels = mpimg.imread(chart)
        assert pixels.shape[0] > 100 and pixels.std() > 0.01  # drawn, not blank
    page = Path(summary).read_text()
    assert page.count("data:image/png;base64,") == len(charts)
    return page


async def test_charts_and_summary_exist_and_show_the_streams(
    db_url: str, conn: asyncpg.Connection, spark_session: SparkSession, tmp_path: Path
) -> None:
    await seed(db_url, conn, FIRST)
    result = await run_pipeline(spark_session, pipeline_config(db_url, tmp_path))

    names = {Path(p).name for p in result.charts}
    assert "txn_outcomes.png" in names
    assert (
        sum(n.startswith("scaling_") for n in names) == 2
        and sum(n.startswith("storage_") for n in names) == 2
    )
    page = check_pictures(result.charts, result.summary)
    streams = await conn.fetch("SELECT scope, stream FROM reporting.streams")
    assert all(f"{r['scope']}/{r['stream']}" in page for r in streams)
    assert f"{result.rows_read:,}" in page
