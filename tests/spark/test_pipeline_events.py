"""The pipeline's event-throughput charts (--controller): on a real `serve` with its segment
store, events written by the real client before and after a scale come out per epoch exactly as
written, dated by reporting.segments; a stream deleted since the marts counted it, or a
controller that cannot be reached, costs that chart and a progress line, never the run."""

from __future__ import annotations

import argparse
import dataclasses
import html
from pathlib import Path

import asyncpg
import pytest
from matplotlib import image as mpimg
from pyspark.sql import SparkSession

from app.dev.history_gen import SeedSpec
from app.dev.seed import seed_history
from spark.charts import file_stem
from spark.cli import add_run_arguments, config_from_args
from spark.report import SegmentEvents, SegmentLife, Throughput, epoch_rates
from tests.spark.conftest import pipeline_config, run_pipeline
from tests.support.spark_streams import Admin, Cluster, write_events

pytestmark = pytest.mark.timeout(600)

SCOPE = "sparkevents"
EVENT_SIZE = 64  # the writer pads every event to this many bytes


@pytest.fixture
def cluster(served_cluster: Cluster) -> Cluster:
    return served_cluster


def by_name(throughput: tuple[Throughput, ...]) -> dict[str, Throughput]:
    return {t.stream.name: t for t in throughput}


def check_picture(path: Path) -> None:
    assert path.read_bytes().startswith(b"\x89PNG\r\n\x1a\n") and path.stat().st_size > 10_000
    pixels = mpimg.imread(path)
    assert pixels.shape[0] > 100 and pixels.std() > 0.01  # drawn, not blank


def page_text(summary: str) -> str:
    return Path(summary).read_text()


async def epoch_times(db_url: str, stream: str) -> dict[int, int]:
    """Each epoch's creation time as the views give it: epoch 0 by its segments, the rest by
    their scale events."""
    conn = await asyncpg.connect(db_url)
    try:
        rows = await conn.fetch(
            """SELECT 0 AS epoch, min(creation_time) AS at FROM reporting.segments
               WHERE scope = $1 AND stream = $2 AND creation_epoch = 0
               UNION ALL
               SELECT epoch, event_time FROM reporting.scale_events WHERE scope = $1 AND stream = $2""",
            SCOPE,
            stream,
        )
        return {r["epoch"]: r["at"] for r in rows}
    finally:
        await conn.close()


async def test_events_per_epoch_equal_what_was_written_in_each_epoch(
    db_url: str,
    cluster: Cluster,
    spark_session: SparkSession,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    admin = Admin(cluster)
    try:
        scaled = await admin.create_stream(SCOPE, "scaled", 2)
        gone = await admin.create_stream(SCOPE, "gone", 1)
        await write_events(cluster, tmp_path, SCOPE, "scaled", count=600, keys=8, prefix="a", size=EVENT_SIZE)
        await write_events(cluster, tmp_path, SCOPE, "gone", count=100, keys=2, prefix="g", size=EVENT_SIZE)
        # Every segment of epoch 0 is sealed, so each event's epoch is the one it was written in.
        await admin.scale(scaled, [0, 1], [(0.0, 0.3), (0.3, 0.7), (0.7, 1.0)])
        await admin.scale(gone, [0], [(0.0, 0.5), (0.5, 1.0)])
        await write_events(cluster, tmp_path, SCOPE, "scaled", count=900, keys=8, prefix="b", size=EVENT_SIZE)

        config = pipeline_config(db_url, tmp_path / "out", chart_streams=5, controller=cluster.controller)
        first = await run_pipeline(spark_session, config)
        measured = by_name(first.throughput)
        assert set(measured) == {f"{SCOPE}/scaled", f"{SCOPE}/gone"}, first.throughput
        scaled_epochs = measured[f"{SCOPE}/scaled"].epochs
        assert [(e.epoch, e.events, e.bytes) for e in scaled_epochs] == [
            (0, 600, 600 * EVENT_SIZE),
            (1, 900, 900 * EVENT_SIZE),
        ]
        assert [(e.epoch, e.events) for e in measured[f"{SCOPE}/gone"].epochs] == [(0, 100), (1, 0)]
        assert all(t.skipped is None and t.unplaced_events == 0 for t in first.throughput), first.throughput
        times = await epoch_times(db_url, "scaled")
        assert [(e.start_ms, e.end_ms) for e in scaled_epochs[:1]] == [(times[0], times[1])]
        assert scaled_epochs[1].start_ms == times[1] < scaled_epochs[1].end_ms
        for e in scaled_epochs:
            assert e.events_per_s == pytest.approx(e.events * 1000 / (e.end_ms - e.start_ms))
            assert e.mb_per_s == pytest.approx(e.bytes / 1e6 * 1000 / (e.end_ms - e.start_ms))

        chart = tmp_path / "out" / "charts" / f"throughput_{file_stem(SCOPE, 'scaled')}.png"
        assert str(chart) in first.charts
        check_picture(chart)
        page = page_text(first.summary)
        assert page.count("data:image/png;base64,") == len(first.charts)
        assert "Event throughput" in page and f"{SCOPE}/scaled" in page

        # Deleted: its history leaves the views, the marts keep it among the chart streams.
        await admin.delete(SCOPE, "gone")
    finally:
        admin.close()
    capsys.readouterr()
    second = await run_pipeline(spark_session, dataclasses.replace(config, progress=True))
    err = capsys.readouterr().err
    measured = by_name(second.throughput)
    # Gone from the views (or, had the deletion not finished, from the controller): no chart.
    why = measured[f"{SCOPE}/gone"].skipped
    assert why is not None and ("lists no segment" in why or "does not exist" in why), second.throughput
    assert not measured[f"{SCOPE}/gone"].epochs
    assert f"no throughput chart for {SCOPE}/gone: {why}\n" in err
    assert not any("throughput_" in c and "gone" in c for c in second.charts)
    again = measured[f"{SCOPE}/scaled"].epochs
    assert [(e.epoch, e.events) for e in again] == [(0, 600), (1, 900)]
    assert again[1].end_ms > scaled_epochs[1].end_ms  # the current epoch runs on until the read
    assert str(chart) in second.charts
    assert html.escape(f"no chart: {why}") in page_text(second.summary)


async def test_an_unreachable_controller_costs_the_event_charts_not_the_run(
    db_url: str, spark_session: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    await seed_history(
        db_url,
        SeedSpec(streams=2, epochs_per_stream=20, txns_per_stream=5, seed=5, start_ms=1_700_000_000_000),
        analyze=False,
    )
    # Nothing listens on port 9 (discard), so every connection is refused.
    config = pipeline_config(db_url, tmp_path, controller="127.0.0.1:9", progress=True)
    result = await run_pipeline(spark_session, config)
    err = capsys.readouterr().err

    assert result.facts_written > 0
    assert len(result.throughput) == 2
    for t in result.throughput:
        assert not t.epochs and t.skipped is not None
        assert t.skipped.startswith("StreamUnavailable: ") and "cannot be reached" in t.skipped, t.skipped
        assert f"no throughput chart for {t.stream.name}: {t.skipped}\n" in err
    names = [Path(c).name for c in result.charts]
    assert not any(n.startswith("throughput_") for n in names)
    assert sum(n.startswith("scaling_") for n in names) == 2 and "txn_outcomes.png" in names
    assert "no chart: StreamUnavailable" in page_text(result.summary)


def test_a_segment_alive_over_several_epochs_shares_its_events_by_time() -> None:
    lives = [
        SegmentLife(0, 0, 1_000, 2, 4_000),  # epochs 0 and 1: 3 s, 2 of them in epoch 0
        SegmentLife(1, 0, 1_000, 1, 3_000),  # epoch 0 only
        SegmentLife(1 << 32 | 2, 1, 3_000, None, None),  # epochs 1 and 2, open until the read
        SegmentLife(2 << 32 | 3, 2, 4_000, None, None),
    ]
    counts = [
        SegmentEvents(0, 300, 3_000),
        SegmentEvents(1, 50, 500),
        SegmentEvents(1 << 32 | 2, 80, 800),
        SegmentEvents(3 << 32 | 4, 7, 70),  # a segment newer than the views
    ]
    epochs, unplaced = epoch_rates(lives, counts, now_ms=8_000)
    assert unplaced == 7
    assert [(e.epoch, e.start_ms, e.end_ms) for e in epochs] == [
        (0, 1_000, 3_000),
        (1, 3_000, 4_000),
        (2, 4_000, 8_000),
    ]
    assert [e.events for e in epochs] == pytest.approx([250, 116, 64])
    assert [e.bytes for e in epochs] == pytest.approx([2_500, 1_160, 640])
    assert [e.events_per_s for e in epochs] == pytest.approx([125, 116, 16])
    # A controller clock ahead of the reader's: the current epoch lasts no time, its rate stays finite.
    (last, *_), _ = epoch_rates([SegmentLife(0, 0, 9_000, None, None)], [SegmentEvents(0, 5, 50)], 8_000)
    assert (last.start_ms, last.end_ms, last.events_per_s) == (9_000, 9_000, 5_000.0)


def test_the_controller_flag_and_its_environment_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    def parsed(*flags: str) -> argparse.Namespace:
        parser = argparse.ArgumentParser()
        add_run_arguments(parser)
        return parser.parse_args(["--out", "o", "--db-url", "postgresql://u@h/d", *flags])

    assert config_from_args(parsed()).controller is None
    assert config_from_args(parsed("--controller", "tls://ctl:9090")).controller == "tls://ctl:9090"
    monkeypatch.setenv("PGCONTROLLER_CONTROLLER_URI", "ctl:9090")
    assert config_from_args(parsed()).controller == "ctl:9090"
    with pytest.raises(ValueError, match="--controller is HOST:PORT"):
        config_from_args(parsed("--controller", "ctl"))
