"""One pipeline run: read what is new in the `reporting` views, recompute the affected days'
facts, write them to the lake and the marts, record the run, draw the charts and the summary.

Incremental rule: a run reads every event with time >= the start of the UTC day holding
(previous high-water mark - late margin), recomputes all facts of those days and replaces
them (lake partitions, mart rows). A run with nothing newer than the high-water mark reads no
events and only records itself. Replacing whole days is what makes a rerun after a crash, a
late event or an overlapping window count nothing twice. Every event source (scale events,
sealed segments, completed transactions, completed truncations) follows this one rule.

A lake whose last run computed its facts by other definitions (spark.facts.FACTS_VERSION), or
marts of an older shape, get a full run, which replaces the outdated tables as it commits.

With a controller (--controller), the run also reads the chart streams' events through the
`pravega` data source, after its commit: what it counts there is drawn, never stored, and a
stream it cannot read loses its throughput chart, not the run.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

from py4j.protocol import Py4JJavaError  # type: ignore[import-untyped]
from pyspark import SparkContext, StorageLevel
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from spark import datasource, facts, lake, marts, report, sources
from spark.config import PipelineConfig
from spark.jdbc import (
    IdRange,
    JdbcError,
    JdbcTarget,
    driver_errors,
    jdbc_target,
    partition_count,
    query_rows,
    read_window,
    spark_error_line,
)
from spark.progress import Progress
from spark.session import build_session
from spark.state import Control

DAY_MS = 86_400_000


@dataclass(frozen=True)
class RunResult:
    run_id: int
    full_run: bool
    read_since_ms: int
    high_water_ms: int
    recomputed_from: date | None
    rows_read: int
    # rows read per event source (spark.sources names); their sum is rows_read
    rows_by_source: dict[str, int]
    facts_written: int
    seconds: float
    lake: str
    charts: tuple[str, ...]
    summary: str
    # The chart streams' events by epoch, or why a stream's could not be read (--controller).
    throughput: tuple[report.Throughput, ...] = ()


def day_start_ms(ms: int) -> int:
    return (ms // DAY_MS) * DAY_MS


def utc_date(ms: int) -> date:
    return date(1970, 1, 1) + timedelta(days=ms // DAY_MS)


def read_since(last_high_water_ms: int | None, late_margin_ms: int) -> int:
    """Where a run's window starts: the UTC day of (high-water mark - margin); 0 = everything."""
    if last_high_water_ms is None:
        return 0
    return max(0, day_start_ms(last_high_water_ms - late_margin_ms))


def _read_source(
    spark: SparkSession,
    target: JdbcTarget,
    config: PipelineConfig,
    source: sources.Source,
    since_ms: int,
    ids: IdRange,
    progress: Progress,
) -> DataFrame:
    assert source.time_column is not None
    parts = partition_count(ids, config.partitions or spark.sparkContext.defaultParallelism)
    progress.step(f"reading {source.view} since {since_ms} in {parts} range(s) of stream ids")
    return read_window(
        spark,
        target,
        view=source.view,
        columns=source.select_list(),
        partition_column=source.partition_column,
        time_column=source.time_column,
        since_ms=since_ms,
        ids=ids,
        partitions=parts,
        fetch_size=config.fetch_size,
    )


@dataclass(frozen=True)
class Probe:
    ids: IdRange
    new_events: bool


def _probe(spark: SparkSession, target: JdbcTarget, high_water_ms: int | None) -> Probe:
    """The stream-id range, and whether any event is newer than the high-water mark: indexed
    look-ups, no pass over the views (sources.PROBED_SOURCES)."""
    hw = -1 if high_water_ms is None else int(high_water_ms)
    newer = " OR ".join(
        f"EXISTS (SELECT 1 FROM {s.view} WHERE {s.time_column} > {hw})" for s in sources.PROBED_SOURCES
    )
    ((low, high, new),) = query_rows(
        spark,
        target,
        f"""SELECT (SELECT min(stream_id) FROM {sources.STREAMS.view})::bigint AS low,
                   (SELECT max(stream_id) FROM {sources.STREAMS.view})::bigint AS high,
                   ({newer}) AS new_events""",
    )
    return Probe(IdRange(low, high), bool(new))


def _read_streams(spark: SparkSession, target: JdbcTarget) -> DataFrame:
    s = sources.STREAMS
    return spark.read.jdbc(
        url=target.url,
        table=f"(SELECT {', '.join(s.select_list())} FROM {s.view}) AS s",
        properties=target.properties(),
    )


def run(config: PipelineConfig, spark: SparkSession | None = None) -> RunResult:
    started = time.monotonic()
    started_at = datetime.now(UTC)
    with Progress(config.progress) as progress, Control(config.db_url) as control:
        control.ensure_schema(marts.TABLE_DDL)
        control.acquire_run_lock()
        control.grant_to_readers(config.grant_to)
        staging = marts.prepare(control)
        try:
            # A session this run did not start (the caller's, or one already active) stays up.
            own_session = spark is None and SparkContext._active_spark_context is None
            session = spark or build_session(config)
            progress.watch(session.sparkContext)
            try:
                source, marts_target = jdbc_target(config.source_url), jdbc_target(config.db_url)
                # Spark 4's own error for a JDBC failure on the driver (a view's schema looked
                # up, the probe) names no cause: the one line the CLI prints must say PostgreSQL's.
                with driver_errors(source, marts_target):
                    result = _run(
                        config, session, source, marts_target, control, staging, progress, started, started_at
                    )
            finally:
                if own_session:
                    session.stop()
        except BaseException:
            # Best effort: the next run drops stale staging tables anyway, and the error that
            # brought us here (perhaps a lost database) is the one worth reporting.
            with contextlib.suppress(Exception):
                marts.drop_staging(control, staging)
            raise
    return result


def _run(
    config: PipelineConfig,
    spark: SparkSession,
    source: JdbcTarget,
    marts_target: JdbcTarget,
    control: Control,
    staging: marts.Staging,
    progress: Progress,
    started: float,
    started_at: datetime,
) -> RunResult:
    lake_uri = config.lake
    last = control.last_run(lake_uri)
    chain = control.latest_run_id()
    outdated = marts.outdated(control)
    full = (
        config.full
        or bool(outdated)
        or last is None
        or last.facts_version != facts.FACTS_VERSION
        or not lake.has_table(spark, lake_uri, lake.STREAM_DAILY)
    )
    since = 0 if full else read_since(last.high_water_ms if last else None, config.late_margin_ms)
    progress.step(
        f"{'full' if full else 'incremental'} run into {lake_uri} (master {config.master}"
        + ("; views read through --read-url" if config.read_url else "")
        + "); "
        f"previous run of this lake: {last.run_id if last else 'none'}"
        + (f"; replacing outdated {', '.join(outdated)}" if outdated else "")
    )
    previous_hw = last.high_water_ms if last else None
    probe = _probe(spark, source, previous_hw)

    rows_read = facts_written = 0
    rows_by_source = dict.fromkeys(facts.ROW_SOURCES.values(), 0)
    high_water = previous_hw or 0
    first_day: date | None = None
    if full or probe.new_events:
        first_day = date.min if full else utc_date(since)
        frames = {
            s.name: _read_source(spark, source, config, s, since, probe.ids, progress)
            for s in sources.EVENT_SOURCES
        }
        txns = frames["transactions"].persist(StorageLevel.MEMORY_AND_DISK)
        events = facts.event_facts(
            frames["scale_events"], frames["segments"], txns, frames["truncation_history"]
        ).persist(StorageLevel.MEMORY_AND_DISK)
        row_columns = [f"_rows_{suffix}" for suffix in facts.ROW_SOURCES]
        stats = events.agg(*(F.sum(c) for c in row_columns), F.max("_last_ms")).collect()[0]
        rows_by_source = {name: int(stats[i] or 0) for i, name in enumerate(facts.ROW_SOURCES.values())}
        rows_read = sum(rows_by_source.values())
        high_water = max(high_water, int(stats[len(row_columns)] or 0))
        per_stream = facts.stream_daily(events, _read_streams(spark, source)).persist(
            StorageLevel.MEMORY_AND_DISK
        )
        facts_written = per_stream.count()
        per_day = facts.daily(txns, per_stream).persist(StorageLevel.MEMORY_AND_DISK)
        progress.step(
            f"read {rows_read:,} rows into {facts_written:,} stream-day facts ("
            + ", ".join(f"{n} {r:,}" for n, r in rows_by_source.items())
            + ")"
        )
        lake.write(spark, per_stream, lake_uri, lake.STREAM_DAILY, first_day, full)
        lake.write(spark, per_day, lake_uri, lake.DAILY, first_day, full)
        progress.step(f"wrote the lake's days from {'the first' if full else first_day}")
        marts.write_stage(per_stream, marts_target, staging.stream_daily)
        marts.write_stage(per_day, marts_target, staging.daily)
        for frame in (events, per_stream, per_day, txns):
            frame.unpersist()
    else:
        progress.step(f"nothing new since the high-water mark {previous_hw}: no events read")

    record = marts.RunRecord(
        lake=lake_uri,
        started_at=started_at,
        master=config.master,
        full_run=full,
        read_since_ms=since,
        high_water_ms=high_water,
        recomputed_from=first_day,
        rows_read=rows_read,
        facts_written=facts_written,
        facts_version=facts.FACTS_VERSION,
    )
    run_id = marts.commit(control, staging, record, chain, replace_tables=bool(outdated))
    progress.step(
        f"committed run {run_id} to {marts.STREAM_DAILY_TABLE} and friends (high-water mark {high_water})"
    )

    throughput = _event_throughput(spark, source, config, control, progress) if config.controller else ()
    drawn, page = report.render(control, config, run_id, record, time.monotonic() - started, throughput)
    seconds = time.monotonic() - started
    progress.step(
        f"done in {seconds:.1f}s: {rows_read:,} rows, {facts_written:,} facts, {len(drawn)} chart(s)"
    )
    return RunResult(
        run_id=run_id,
        full_run=full,
        read_since_ms=since,
        high_water_ms=high_water,
        recomputed_from=first_day,
        rows_read=rows_read,
        rows_by_source=rows_by_source,
        facts_written=facts_written,
        seconds=seconds,
        lake=lake_uri,
        charts=tuple(str(p) for p in drawn),
        summary=str(page),
        throughput=throughput,
    )


# What a failed read of events or of the segments' lives raises: the run goes on without it.
_READ_FAILURES = (Py4JJavaError, PySparkException, JdbcError)


def _event_throughput(
    spark: SparkSession, source: JdbcTarget, config: PipelineConfig, control: Control, progress: Progress
) -> tuple[report.Throughput, ...]:
    """Each chart stream's events per segment, read from the controller, placed in the epochs
    reporting.segments dates (report.epoch_rates)."""
    assert config.controller is not None
    streams = report.chart_streams(control, config)
    progress.step(f"reading the events of {len(streams)} chart stream(s) from {config.controller}")
    datasource.register(spark)
    try:
        # Read before the events: every epoch it dates began before the reads' `now`; a segment
        # created in between (a scale during the run, a lagging --read-url) is not listed, and
        # its events are counted as not placed rather than guessed into an epoch.
        lives = _segment_lives(spark, source, [s.stream_id for s in streams])
    except _READ_FAILURES as exc:
        why = f"reading {sources.SEGMENT_LIVES.view} failed: {_failure_line(exc)}"
        return tuple(_skipped(s, why, progress) for s in streams)
    return tuple(
        _stream_throughput(spark, config.controller, s, lives.get(s.stream_id, []), progress) for s in streams
    )


def _segment_lives(
    spark: SparkSession, target: JdbcTarget, stream_ids: list[int]
) -> dict[int, list[report.SegmentLife]]:
    if not stream_ids:
        return {}
    s = sources.SEGMENT_LIVES
    ids = ", ".join(str(int(i)) for i in stream_ids)
    rows = query_rows(
        spark, target, f"SELECT {', '.join(s.select_list())} FROM {s.view} WHERE stream_id IN ({ids})"
    )
    lives: dict[int, list[report.SegmentLife]] = {}
    for stream_id, *life in rows:
        lives.setdefault(stream_id, []).append(report.SegmentLife(*life))
    return lives


def _stream_throughput(
    spark: SparkSession,
    controller: str,
    stream: report.ChartStream,
    lives: list[report.SegmentLife],
    progress: Progress,
) -> report.Throughput:
    if not lives:
        return _skipped(stream, f"{sources.SEGMENT_LIVES.view} lists no segment of it (deleted?)", progress)
    # The current epoch ends when the read takes the stream's tail, a moment after this.
    now_ms = int(time.time() * 1000)
    try:
        counts = _segment_events(spark, controller, stream)
    except _READ_FAILURES as exc:
        return _skipped(stream, _failure_line(exc), progress)
    epochs, unplaced = report.epoch_rates(lives, counts, now_ms)
    progress.step(
        f"read {sum(c.events for c in counts):,} events ({sum(c.bytes for c in counts) / 1e6:,.1f} MB) "
        f"of {stream.name} over {len(epochs)} epoch(s)"
        + (f"; {unplaced:,} in segments newer than the views left out" if unplaced else "")
    )
    return report.Throughput(stream, epochs, unplaced)


def _segment_events(
    spark: SparkSession, controller: str, stream: report.ChartStream
) -> list[report.SegmentEvents]:
    """Events and bytes per segment: every event the stream still holds, counted where it lies."""
    frame = (
        spark.read.format(datasource.NAME)
        .options(controller=controller, scope=stream.scope, stream=stream.stream)
        .load()
    )
    per_segment = frame.groupBy("segment_id").agg(F.count(F.lit(1)), F.sum(F.length("event")))
    return [report.SegmentEvents(int(r[0]), int(r[1]), int(r[2] or 0)) for r in per_segment.collect()]


def _skipped(stream: report.ChartStream, why: str, progress: Progress) -> report.Throughput:
    progress.step(f"no throughput chart for {stream.name}: {why}")
    return report.Throughput(stream, skipped=why)


_TRACEBACK = "Traceback (most recent call last):"


def _failure_line(exc: Py4JJavaError | PySparkException | JdbcError) -> str:
    """The one line that says why: the data source's own exception (`StreamNotFound: stream a/b
    does not exist`, `StreamUnavailable: ... cannot be reached`), which Spark wraps in its error
    after the Python traceback; else the error's first line."""
    if isinstance(exc, JdbcError):
        return str(exc)
    found, in_traceback = None, False
    for line in str(exc).splitlines():
        if _TRACEBACK in line:
            in_traceback = True
        elif in_traceback and line and not line[0].isspace():
            found, in_traceback = line, False
    if found is None:
        return spark_error_line(exc)
    name, sep, message = found.partition(": ")
    return f"{name.rsplit('.', 1)[-1]}: {message}" if sep else found
