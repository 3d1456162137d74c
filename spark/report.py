"""Charts and the summary page, drawn from the marts (all days every run has committed, not
only what this run recomputed): small indexed SQL reads, no Spark job."""

from __future__ import annotations

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


async def _read(c: asyncpg.Connection, top: int, charted: int) -> dict[str, Any]:
    ranked = await c.fetch(
        f"""SELECT stream_id, scope, stream, {", ".join(name for name, _ in TOP_COLUMNS)}
            FROM {TOTALS_TABLE}
            ORDER BY epochs_created + txn_committed + txn_aborted DESC, scope, stream LIMIT $1""",
        top,
    )
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
    control: Control, config: PipelineConfig, run_id: int, run: RunRecord, seconds: float
) -> tuple[list[Path], Path]:
    data = control.call(lambda c: _read(c, max(config.chart_streams, 10), config.chart_streams))
    ranked = data["ranked"]
    by_stream: dict[int, list[charts.StreamDay]] = {}
    for d in data["days"]:
        by_stream.setdefault(d["stream_id"], []).append(charts.StreamDay(*list(d.values())[1:]))
    drawn: list[Path] = []
    for r in ranked[: config.chart_streams]:
        stem = charts.file_stem(r["scope"], r["stream"])
        title = f"{r['scope']}/{r['stream']}"
        days = by_stream.get(r["stream_id"], [])
        drawn.append(charts.scaling_chart(config.charts_dir / f"scaling_{stem}.png", title, days))
        drawn.append(charts.storage_chart(config.charts_dir / f"storage_{stem}.png", title, days))
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
    page = summary.render(config.summary_html, info, dict(data["totals"]), top_rows, headers, drawn)
    return drawn, page
