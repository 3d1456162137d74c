"""The pipeline on seeded histories: every fact equals PostgreSQL's own figure over the
`reporting` views (truncations included, from their history), a rerun after new activity
(new truncations too) recomputes only the new days (and exactly them), marts of an older
pipeline are replaced by a full run, and the charts and the summary page are there and show
something."""

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

from app.dev.history_gen import SeedSpec
from app.dev.seed import seed_history
from app.domain.ids import qualified_segment_name
from app.domain.records import ScalingPolicy, StreamConfig
from app.domain.txns import TxnStatus
from app.services.stream_updates import UpdateOutcome
from app.store.migrate import upgrade_to_head
from app.testing.controller import Services, running_controller
from spark.facts import DAILY, STREAM_DAILY
from spark.pipeline import DAY_MS, day_start_ms, read_since, utc_date
from tests.spark import expected
from tests.spark.conftest import pipeline_config, run_pipeline
from tests.support.plain_pg import cluster_root, copied_cluster, new_cluster

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
    # Three of the four streams have retention (truncated on eight or nine days each), one not.
    retention_fraction=0.75,
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


async def seed(db_url: str, spec: SeedSpec) -> None:
    await seed_history(db_url, spec, analyze=False)


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
    spark: SparkSession, conn: asyncpg.Connection, lake: str, marts: asyncpg.Connection | None = None
) -> None:
    """Lake and marts (read through `marts`, `conn` by default) hold exactly the facts SQL
    computes over the views of `conn`."""
    marts = marts or conn
    want = {k: normalized(v) for k, v in (await expected.stream_day_facts(conn)).items()}
    lake_facts = by_stream_day(lake_rows(spark, lake, "stream_daily"))
    mart_facts = by_stream_day(await mart_rows(marts, "stream_daily_facts"))
    assert set(lake_facts) == set(want)
    assert mart_facts == lake_facts
    for key, row in want.items():
        assert set(lake_facts[key]) == set(row), key
        assert_same(lake_facts[key], row, key)
    # Per stream, the days' truncated bytes add up to the stream's running total.
    per_stream: dict[int, int] = {}
    for (_, stream_id), row in lake_facts.items():
        per_stream[stream_id] = per_stream.get(stream_id, 0) + row["bytes_truncated"]
    totals = await conn.fetch(
        """SELECT DISTINCT ON (stream_id) stream_id, total_truncated_bytes FROM reporting.truncation_history
           ORDER BY stream_id, truncation_id DESC"""
    )
    assert {s: b for s, b in per_stream.items() if b} == {
        r["stream_id"]: r["total_truncated_bytes"] for r in totals if r["total_truncated_bytes"]
    }

    # Totals per day: sums of the stream facts, latency over every commit of the day.
    latency = await expected.daily_latency(conn)
    lake_daily = {r["date"]: r for r in lake_rows(spark, lake, "daily")}
    assert {r["date"]: r for r in await mart_rows(marts, "daily_facts")} == lake_daily
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

    totals = {r["stream_id"]: r for r in await mart_rows(marts, "stream_totals")}
    assert set(totals) == {s for _, s in lake_facts}
    for stream_id, total in totals.items():
        mine = [r for (_, s), r in lake_facts.items() if s == stream_id]
        assert total["active_days"] == len(mine)
        for name in (
            "epochs_created",
            "bytes_sealed",
            "bytes_truncated",
            "truncations",
            "segments_deleted",
            "txn_committed",
            "txn_aborted",
        ):
            assert total[name] == sum(r[name] for r in mine), (stream_id, name)


async def test_every_fact_equals_sql_over_the_views(
    db_url: str, conn: asyncpg.Connection, spark_session: SparkSession, tmp_path: Path
) -> None:
    await seed(db_url, FIRST)
    result = await run_pipeline(spark_session, pipeline_config(db_url, tmp_path))

    newest = await expected.newest_event_ms(conn)
    assert result.full_run and result.recomputed_from == date.min
    assert result.high_water_ms == newest
    assert result.facts_written == len(lake_rows(spark_session, result.lake, "stream_daily")) > 0
    await check_all_facts(spark_session, conn, result.lake)
    # Every kind of activity is in the history, so no comparison above was vacuous.
    facts = lake_rows(spark_session, result.lake, "stream_daily")
    for name in (
        "splits",
        "merges",
        "rolling_epochs",
        "bytes_sealed",
        "bytes_truncated",
        "truncations",
        "segments_deleted",
        "txn_committed",
        "txn_aborted",
    ):
        assert sum(r[name] for r in facts) > 0, name
    assert any(r["commit_latency_p99_ms"] for r in facts)
    # Truncations spread over days: most truncated streams were truncated on several of them,
    # so dating by completion (not by the run) is what the equality above checked.
    days = await expected.truncation_days(conn)
    assert len(days) == 3 and all(n >= 8 for n in days.values()), days
    assert len({r["date"] for r in facts if r["truncations"]}) >= 4
    assert result.rows_by_source["truncation_history"] == await conn.fetchval(
        "SELECT count(*) FROM reporting.truncation_history"
    )


# What live_activity's truncation deletes: the segments its two scales sealed.
LIVE_TRUNCATED = (0, (1 << 32) | 2)


async def live_activity(db_url: str, scope: str = "live") -> int:
    """A real stream scaled twice, truncated once past what the scales sealed, and four
    transactions (three commits, one abort), through the controller's own services and
    workers; returns the time the activity started."""
    began = int(time.time() * 1000)
    async with running_controller(db_url) as s:
        await s.scopes.create_scope(scope)
        await s.streams.create_stream(scope, "s", StreamConfig(ScalingPolicy.fixed(2)))
        await write(s, scope, 0, 1)
        await scale(s, scope, 0, [0], [(0.0, 0.25), (0.25, 0.5)])
        await write(s, scope, (1 << 32) | 2, (1 << 32) | 3)
        await scale(s, scope, 1, [(1 << 32) | 2], [(0.0, 0.125), (0.125, 0.25)])
        await write(s, scope, (2 << 32) | 4, (2 << 32) | 5)
        # The active segments of epoch 2, 100 bytes into each: [0, .125) [.125, .25) [.25, .5) [.5, 1).
        cut = {(2 << 32) | 4: 100, (2 << 32) | 5: 100, (1 << 32) | 3: 100, 1: 100}
        assert await s.lifecycle.truncation.truncate_stream(scope, "s", cut) == UpdateOutcome.SUCCESS
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


async def write(s: Services, scope: str, *segments: int) -> None:
    for segment in segments:
        await s.segment_store.append(qualified_segment_name(scope, "s", segment), 1_000)


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
    await seed(db_url, FIRST)
    first = await run_pipeline(spark_session, config)
    before = by_stream_day(lake_rows(spark_session, first.lake, "stream_daily"))

    await seed(db_url, LATER)
    await live_activity(db_url)
    since = read_since(first.high_water_ms, config.late_margin_ms)
    untouched = files_of_days(first.lake, utc_date(since))
    assert untouched
    window = await conn.fetchrow(
        """SELECT (SELECT count(*) FROM reporting.scale_events WHERE event_time >= $1) AS scale_events,
                  (SELECT count(*) FROM reporting.segments WHERE sealed_time >= $1) AS segments,
                  (SELECT count(*) FROM reporting.transactions WHERE completion_time >= $1) AS transactions,
                  (SELECT count(*) FROM reporting.truncation_history WHERE completion_time >= $1)
                      AS truncation_history""",
        since,
    )
    new_truncations = await conn.fetchval(
        "SELECT count(*) FROM reporting.truncation_history WHERE completion_time > $1", first.high_water_ms
    )
    assert new_truncations > 1  # the seeded streams' and the live one

    second = await run_pipeline(spark_session, config)
    newest = await expected.newest_event_ms(conn)
    assert not second.full_run
    assert (second.read_since_ms, second.recomputed_from) == (since, utc_date(since))
    assert second.rows_by_source == dict(window)
    assert second.rows_read == sum(window.values()) < first.rows_read + sum(window.values())
    assert second.high_water_ms == newest
    await check_all_facts(spark_session, conn, second.lake)

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
    assert (sum(r["truncations"] for r in live), sum(r["segments_deleted"] for r in live)) == (
        1,
        len(LIVE_TRUNCATED),
    )
    # The two sealed segments whole (1,000 bytes each) and 100 bytes of each of the four in the cut.
    assert (
        sum(r["bytes_truncated"] for r in live)
        == 2_400
        == await conn.fetchval(
            "SELECT truncated_bytes FROM reporting.truncations WHERE stream_id = $1", live_id
        )
    )
    # The days before the window kept the truncations the first run counted; the new ones
    # were added on their own days, and nothing was counted twice.
    assert sum(r["truncations"] for r in after.values()) == await conn.fetchval(
        "SELECT count(*) FROM reporting.truncation_history"
    )

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
    await seed(db_url, FIRST)
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


async def test_marts_and_a_lake_of_an_older_pipeline_are_replaced_by_a_full_run(
    db_url: str, conn: asyncpg.Connection, spark_session: SparkSession, tmp_path: Path
) -> None:
    config = pipeline_config(db_url, tmp_path)
    await seed(db_url, FIRST)
    first = await run_pipeline(spark_session, config)
    # What the pipeline before truncation_history left: fact tables without the truncation
    # counts, its observations table, and runs that recorded no facts version.
    for table in ("stream_daily_facts", "daily_facts", "stream_totals"):
        await conn.execute(
            f"ALTER TABLE reporting_marts.{table} DROP COLUMN truncations, DROP COLUMN segments_deleted"
        )
    await conn.execute(
        """UPDATE reporting_marts.stream_daily_facts SET bytes_truncated = bytes_truncated + 1;
           CREATE TABLE reporting_marts.truncation_observations (
               run_id bigint NOT NULL REFERENCES reporting_marts.pipeline_runs (run_id),
               stream_id bigint NOT NULL, date date NOT NULL, truncated_bytes bigint NOT NULL,
               bytes_delta bigint NOT NULL, PRIMARY KEY (stream_id, run_id));
           UPDATE reporting_marts.pipeline_runs SET facts_version = NULL"""
    )

    again = await run_pipeline(spark_session, config)
    assert again.full_run and again.recomputed_from == date.min
    assert again.rows_read == first.rows_read
    assert not await conn.fetchval(
        "SELECT to_regclass('reporting_marts.truncation_observations') IS NOT NULL"
    )
    await check_all_facts(spark_session, conn, again.lake)
    # The replaced tables are the analysts' to read again at once.
    for table in ("stream_daily_facts", "daily_facts", "stream_totals"):
        assert await conn.fetchval(
            "SELECT has_table_privilege('pgc_analysts', $1, 'SELECT')", f"reporting_marts.{table}"
        )

    # A lake whose last run used other definitions is recomputed whole, even with current marts.
    await conn.execute("UPDATE reporting_marts.pipeline_runs SET facts_version = 'old'")
    third = await run_pipeline(spark_session, config)
    assert third.full_run and third.rows_read == first.rows_read
    fourth = await run_pipeline(spark_session, config)
    assert not fourth.full_run and fourth.rows_read == 0


async def test_the_views_are_read_from_a_hot_standby_and_the_marts_written_to_the_primary(
    spark_session: SparkSession, tmp_path: Path
) -> None:
    """Issue 35's analysts on a replica: a primary and a streaming hot standby of the test's own;
    the standby's replay is paused while the primary gets more history, so facts equal to the
    standby's views (not the primary's) show where the run read, and marts on the primary show
    where it wrote; replay resumed, an incremental run catches up."""
    with cluster_root("pgcontroller-standby-") as root:
        primary = await asyncio.to_thread(new_cluster, root, "primary")
        await asyncio.to_thread(upgrade_to_head, primary.url)
        await seed(primary.url, FIRST)
        await asyncio.to_thread(primary.basebackup, root / "base", "-R", "-X", "stream")
        standby = copied_cluster(root, "standby", root / "base", ["hot_standby = on"])
        await asyncio.to_thread(standby.start)
        on_primary, on_standby = await asyncpg.connect(primary.url), await asyncpg.connect(standby.url)
        try:
            assert await on_standby.fetchval("SELECT pg_is_in_recovery()")
            await _until_replayed(on_primary, on_standby)
            await on_standby.execute("SELECT pg_wal_replay_pause()")
            await seed(primary.url, LATER)
            newest_on_standby = await expected.newest_event_ms(on_standby)
            assert await expected.newest_event_ms(on_primary) > newest_on_standby

            config = pipeline_config(primary.url, tmp_path, read_url=standby.url)
            first = await run_pipeline(spark_session, config)
            assert first.full_run and first.high_water_ms == newest_on_standby
            await check_all_facts(spark_session, on_standby, first.lake, marts=on_primary)
            assert await on_primary.fetchval("SELECT count(*) FROM reporting_marts.pipeline_runs") == 1

            await on_standby.execute("SELECT pg_wal_replay_resume()")
            await _until_replayed(on_primary, on_standby)
            second = await run_pipeline(spark_session, config)
            assert not second.full_run and second.rows_read > 0
            assert second.high_water_ms == await expected.newest_event_ms(on_primary)
            await check_all_facts(spark_session, on_primary, second.lake)
        finally:
            await on_primary.close()
            await on_standby.close()


async def _until_replayed(primary: asyncpg.Connection, standby: asyncpg.Connection) -> None:
    """Until the standby has replayed everything the primary had written when this was called."""
    written = await primary.fetchval("SELECT pg_current_wal_lsn()::text")
    deadline = time.monotonic() + 60
    while await standby.fetchval("SELECT pg_last_wal_replay_lsn() < $1::text::pg_lsn", written):
        assert time.monotonic() < deadline, "the standby did not catch up within 60 s"
        await asyncio.sleep(0.05)
