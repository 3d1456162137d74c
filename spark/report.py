"""Charts and the summary page, drawn from the marts (all days every run has committed, not
only what this run recomputed): small indexed SQL reads, no Spark job. With a controller, also
the chart streams' event throughput by epoch, from what the run counted in their events (the
counting is spark.pipeline's; how counts per segment become rates per epoch is here)."""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import asyncpg

from spark import charts, summary
from spark.config import PipelineConfig
from spark.marts import DAILY_TABLE, STREAM_DAILY_TABLE, TOTALS_TABLE, RunRecord
from spark.state import Control

TOP_COLUMNS = (
    ("epochs_created", "epochs created"),
    ("splits", "splits"),
    ("merges", "merges"),
    ("segment_count_last", "segments now"),
    ("bytes_sealed", "bytes sealed"),
    ("bytes_truncated", "bytes truncated"),
    ("txn_committed", "committed"),
    ("txn_aborted", "aborted"),
)
_TOTALS = (
    "epochs_created",
    "scales",
    "splits",
    "merges",
    "rolling_epochs",
    "bytes_sealed",
    "bytes_truncated",
    "truncations",
    "segments_deleted",
    "txn_committed",
    "txn_aborted",
)


# The most active streams first; the first --chart-streams of them get charts.
_RANKED = f"""SELECT stream_id, scope, stream, {", ".join(name for name, _ in TOP_COLUMNS)}
              FROM {TOTALS_TABLE}
              ORDER BY epochs_created + txn_committed + txn_aborted DESC, scope, stream LIMIT $1"""


@dataclass(frozen=True)
class ChartStream:
    stream_id: int
    scope: str
    stream: str

    @property
    def name(self) -> str:
        return f"{self.scope}/{self.stream}"


@dataclass(frozen=True)
class SegmentLife:
    """A segment's row of reporting.segments: the epochs that created and sealed it, and when."""

    segment_id: int
    creation_epoch: int
    creation_ms: int
    sealed_epoch: int | None
    sealed_ms: int | None


@dataclass(frozen=True)
class SegmentEvents:
    """What a read of a stream found in one segment."""

    segment_id: int
    events: int
    bytes: int


@dataclass(frozen=True)
class Throughput:
    """A chart stream's events by epoch, or why there are none (`skipped`)."""

    stream: ChartStream
    epochs: tuple[charts.EpochRate, ...] = ()
    # Events of segments the views did not list yet (created after they were read): left out.
    unplaced_events: int = 0
    skipped: str | None = None


def chart_streams(control: Control, config: PipelineConfig) -> list[ChartStream]:
    """The streams that get charts, as render() picks them."""
    ranked = control.call(lambda c: c.fetch(_RANKED, config.chart_streams))
    return [ChartStream(r["stream_id"], r["scope"], r["stream"]) for r in ranked]


def epoch_rates(
    lives: Sequence[SegmentLife], counts: Sequence[SegmentEvents], now_ms: int
) -> tuple[tuple[charts.EpochRate, ...], int]:
    """Each epoch's events and bytes, and the events of segments `lives` does not know.

    Events carry no time; a segment's are known to have been appended while it was open, from
    its creation epoch to the one that sealed it (to `now_ms`, when they were read, if open).
    A segment that lived through one epoch gives that epoch its exact count; one that lived
    through several (a scale seals only the segments it splits or merges) is taken to have been
    written evenly over its life, and shares its events out by time."""
    starts = _epoch_starts(lives)
    if not starts:
        return (), sum(c.events for c in counts)
    epochs = sorted(starts)
    bounds = [starts[e] for e in epochs] + [max(now_ms, starts[epochs[-1]])]
    events, sizes = [0.0] * len(epochs), [0.0] * len(epochs)
    by_id = {life.segment_id: life for life in lives}
    unplaced = 0
    for count in counts:
        life = by_id.get(count.segment_id)
        if life is None:
            unplaced += count.events
            continue
        first = bisect.bisect_left(epochs, life.creation_epoch)
        end = len(epochs) if life.sealed_epoch is None else bisect.bisect_left(epochs, life.sealed_epoch)
        for i, share in _shares(bounds, first, max(end, first + 1)):
            events[i] += count.events * share
            sizes[i] += count.bytes * share
    rates = tuple(
        charts.EpochRate(epoch, bounds[i], bounds[i + 1], events[i], sizes[i])
        for i, epoch in enumerate(epochs)
    )
    return rates, unplaced


def _epoch_starts(lives: Sequence[SegmentLife]) -> dict[int, int]:
    """Every epoch creates a segment, so the segments' creations date every epoch (their seals
    only repeat those dates)."""
    starts: dict[int, int] = {}
    for life in lives:
        starts[life.creation_epoch] = life.creation_ms
        if life.sealed_epoch is not None and life.sealed_ms is not None:
            starts[life.sealed_epoch] = life.sealed_ms
    return starts


def _shares(bounds: Sequence[int], first: int, end: int) -> list[tuple[int, float]]:
    """Epochs first..end-1 with the part of their joint time each lasted (all to the first when
    they lasted no time together)."""
    lived = bounds[end] - bounds[first]
    if end - first == 1 or lived <= 0:
        return [(first, 1.0)]
    return [(i, (bounds[i + 1] - bounds[i]) / lived) for i in range(first, end)]


async def _read(c: asyncpg.Connection, top: int, charted: int) -> dict[str, Any]:
    ranked = await c.fetch(_RANKED, top)
    totals = await c.fetchrow(
        f"""SELECT (SELECT count(*) FROM {TOTALS_TABLE}) AS streams, count(*) AS days,
                   {", ".join(f"COALESCE(sum({n}), 0)::bigint AS {n}" for n in _TOTALS)}
            FROM {DAILY_TABLE}"""
    )
    chosen = [r["stream_id"] for r in ranked[:charted]]
    days = await c.fetch(
        f"""SELECT stream_id, date, scales, rolling_epochs, segment_count_end, bytes_sealed, bytes_truncated
            FROM {STREAM_DAILY_TABLE} WHERE stream_id = ANY($1::bigint[]) ORDER BY stream_id, date""",
        chosen,
    )
    txn_days = await c.fetch(
        f"""SELECT date, txn_committed, txn_aborted, commit_latency_p50_ms, commit_latency_p99_ms
            FROM {DAILY_TABLE} ORDER BY date"""
    )
    return {"ranked": ranked, "totals": totals, "days": days, "txn_days": txn_days}


def render(
    control: Control,
    config: PipelineConfig,
    run_id: int,
    run: RunRecord,
    seconds: float,
    throughput: Sequence[Throughput] = (),
) -> tuple[list[Path], Path]:
    data = control.call(lambda c: _read(c, max(config.chart_streams, 10), config.chart_streams))
    ranked = data["ranked"]
    by_stream: dict[int, list[charts.StreamDay]] = {}
    for d in data["days"]:
        by_stream.setdefault(d["stream_id"], []).append(charts.StreamDay(*list(d.values())[1:]))
    measured = {t.stream.stream_id: t for t in throughput if t.epochs}
    drawn: list[Path] = []
    for r in ranked[: config.chart_streams]:
        stem = charts.file_stem(r["scope"], r["stream"])
        title = f"{r['scope']}/{r['stream']}"
        days = by_stream.get(r["stream_id"], [])
        drawn.append(charts.scaling_chart(config.charts_dir / f"scaling_{stem}.png", title, days))
        drawn.append(charts.storage_chart(config.charts_dir / f"storage_{stem}.png", title, days))
        if r["stream_id"] in measured:
            epochs = measured[r["stream_id"]].epochs
            drawn.append(charts.throughput_chart(config.charts_dir / f"throughput_{stem}.png", title, epochs))
    txn_days = [charts.TxnDay(*d.values()) for d in data["txn_days"]]
    if txn_days:
        drawn.append(charts.txn_chart(config.charts_dir / "txn_outcomes.png", txn_days))

    recomputed = run.recomputed_from
    info = summary.RunInfo(
        run_id=run_id,
        finished_at=datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
        master=run.master,
        full_run=run.full_run,
        recomputed_from=None
        if recomputed is None
        else "the first day"
        if recomputed == date.min
        else str(recomputed),
        rows_read=run.rows_read,
        facts_written=run.facts_written,
        seconds=seconds,
    )
    top_rows = [[f"{r['scope']}/{r['stream']}", *(r[name] for name, _ in TOP_COLUMNS)] for r in ranked]
    headers = ["stream", *(label for _, label in TOP_COLUMNS)]
    page = summary.render(
        config.summary_html,
        info,
        dict(data["totals"]),
        top_rows,
        headers,
        drawn,
        [_throughput_row(t) for t in throughput],
    )
    return drawn, page


def _throughput_row(t: Throughput) -> summary.EventsRow:
    if t.skipped is not None:
        return summary.EventsRow(t.stream.name, skipped=t.skipped)
    return summary.EventsRow(
        t.stream.name,
        events=round(sum(e.events for e in t.epochs)),
        megabytes=sum(e.bytes for e in t.epochs) / 1e6,
        epochs=len(t.epochs),
        peak_events_per_s=max((e.events_per_s for e in t.epochs), default=0.0),
        unplaced_events=t.unplaced_events,
    )
