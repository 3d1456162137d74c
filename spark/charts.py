"""PNG charts from the lake's facts: scaling history and storage of the most active streams,
and transaction outcomes over all streams; with a controller to read events from, the event
throughput of those streams by epoch. Takes plain Python rows (already collected), so nothing
here touches Spark; the Agg backend needs no display.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.dates as mdates
import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.figure import Figure

_DPI = 100
_SIZE = (9.0, 5.0)


@dataclass(frozen=True)
class StreamDay:
    date: date
    scales: int
    rolling_epochs: int
    segment_count_end: int | None
    bytes_sealed: int
    bytes_truncated: int


@dataclass(frozen=True)
class TxnDay:
    date: date
    committed: int
    aborted: int
    p50_ms: float | None
    p99_ms: float | None


@dataclass(frozen=True)
class EpochRate:
    """One epoch of a stream: from its creation to the next epoch's (the current one: to when its
    events were read), with the events and bytes its segments received then."""

    epoch: int
    start_ms: int
    end_ms: int
    # Floats: a segment that lived through several epochs has its events shared out among them
    # (spark.report.epoch_rates); a segment sealed by the next scale gives its own count whole.
    events: float
    bytes: float

    @property
    def seconds(self) -> float:
        # A rolling transaction's first duplicate epoch can last under a millisecond; a floor
        # keeps its rate finite.
        return max(self.end_ms - self.start_ms, 1) / 1000

    @property
    def events_per_s(self) -> float:
        return self.events / self.seconds

    @property
    def mb_per_s(self) -> float:
        return self.bytes / 1e6 / self.seconds


def file_stem(scope: str, stream: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", f"{scope}__{stream}")


def _save(fig: Figure, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.autofmt_xdate()
    fig.tight_layout()
    fig.savefig(path, dpi=_DPI)
    plt.close(fig)
    return path


def _x(day: date) -> float:
    """Matplotlib's date number of a day (its epoch is configurable, so ask it)."""
    return float(mdates.date2num(day))  # type: ignore[no-untyped-call]


def _x_ms(ms: int) -> float:
    return float(mdates.date2num(datetime.fromtimestamp(ms / 1000, UTC)))  # type: ignore[no-untyped-call]


def _dates(ax: Axes) -> None:
    ax.xaxis.set_major_formatter(mdates.DateFormatter("%Y-%m-%d"))  # type: ignore[no-untyped-call]
    ax.grid(True, alpha=0.3)


def scaling_chart(path: Path, title: str, days: Sequence[StreamDay]) -> Path:
    """Segment count at the end of each day (carried over quiet days) above the day's scales."""
    fig, (top, bottom) = plt.subplots(2, 1, figsize=_SIZE, sharex=True, height_ratios=(2, 1))
    xs = [_x(d.date) for d in days]
    counts: list[float] = []
    last: float = float("nan")
    for d in days:
        last = float(d.segment_count_end) if d.segment_count_end is not None else last
        counts.append(last)
    top.step(xs, counts, where="post", color="tab:blue")
    top.set_ylabel("segments at end of day")
    top.set_title(f"Scaling history: {title}")
    scales = [d.scales for d in days]
    bottom.bar(xs, scales, label="scales", color="tab:green")
    bottom.bar(xs, [d.rolling_epochs for d in days], bottom=scales, label="rolling-txn epochs", color="grey")
    bottom.set_ylabel("epochs created")
    bottom.legend(loc="upper left", fontsize="small")
    for ax in (top, bottom):
        _dates(ax)
    return _save(fig, path)


def storage_chart(path: Path, title: str, days: Sequence[StreamDay]) -> Path:
    """Cumulative bytes sealed and truncated; their difference is what sealed data remains."""
    fig, ax = plt.subplots(figsize=_SIZE)
    xs = [_x(d.date) for d in days]
    sealed: list[int] = []
    truncated: list[int] = []
    s = t = 0
    for d in days:
        s += d.bytes_sealed
        t += d.bytes_truncated
        sealed.append(s)
        truncated.append(t)
    mib = 1024 * 1024
    ax.plot(xs, [v / mib for v in sealed], label="sealed (cumulative)", color="tab:blue")
    ax.plot(xs, [v / mib for v in truncated], label="truncated (cumulative)", color="tab:red")
    ax.fill_between(xs, [v / mib for v in truncated], [v / mib for v in sealed], alpha=0.2, label="retained")
    ax.set_ylabel("MiB")
    ax.set_title(f"Storage: {title}")
    ax.legend(loc="upper left", fontsize="small")
    _dates(ax)
    return _save(fig, path)


def txn_chart(path: Path, days: Sequence[TxnDay]) -> Path:
    fig, ax = plt.subplots(figsize=_SIZE)
    xs = [_x(d.date) for d in days]
    committed = [d.committed for d in days]
    ax.bar(xs, committed, label="committed", color="tab:green")
    ax.bar(xs, [d.aborted for d in days], bottom=committed, label="aborted", color="tab:red")
    ax.set_ylabel("transactions per day")
    ax.set_title("Transaction outcomes (all streams)")
    ax.legend(loc="upper left", fontsize="small")
    _dates(ax)
    if any(d.p50_ms is not None for d in days):
        lat = ax.twinx()
        nan = float("nan")
        lat.plot(xs, [d.p50_ms if d.p50_ms is not None else nan for d in days], "k-", label="commit p50")
        lat.plot(xs, [d.p99_ms if d.p99_ms is not None else nan for d in days], "k--", label="commit p99")
        lat.set_ylabel("commit latency, ms")
        lat.legend(loc="upper right", fontsize="small")
    return _save(fig, path)


def throughput_chart(path: Path, title: str, epochs: Sequence[EpochRate]) -> Path:
    """Events/s above MB/s, each epoch a stair as wide as the epoch lasted: epochs can last
    milliseconds or months, so the time axis labels itself at whatever scale the stream has."""
    fig, (top, bottom) = plt.subplots(2, 1, figsize=_SIZE, sharex=True)
    edges = [_x_ms(e.start_ms) for e in epochs] + [_x_ms(epochs[-1].end_ms)]
    top.stairs([e.events_per_s for e in epochs], edges, fill=True, color="tab:blue", alpha=0.7)
    top.set_ylabel("events/s")
    top.set_title(f"Event throughput by epoch: {title}")
    bottom.stairs([e.mb_per_s for e in epochs], edges, fill=True, color="tab:purple", alpha=0.7)
    bottom.set_ylabel("MB/s")
    bottom.set_xlabel(f"epochs {epochs[0].epoch}-{epochs[-1].epoch}, from their creation times (UTC)")
    for ax in (top, bottom):
        locator = mdates.AutoDateLocator()  # type: ignore[no-untyped-call]
        ax.xaxis.set_major_locator(locator)
        ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator))  # type: ignore[no-untyped-call]
        ax.grid(True, alpha=0.3)
    return _save(fig, path)
