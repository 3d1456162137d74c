"""The one-page HTML summary: the run, all-time totals, the most active streams and the charts
(inlined as base64, so the page is one self-contained file that can be mailed or archived)."""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from html import escape
from pathlib import Path


@dataclass(frozen=True)
class RunInfo:
    run_id: int
    finished_at: str
    master: str
    full_run: bool
    recomputed_from: str | None
    rows_read: int
    facts_written: int
    seconds: float


@dataclass(frozen=True)
class EventsRow:
    """A chart stream's events as the run read them (--controller), or why it could not."""

    stream: str
    # Placed in the stream's epochs; events of segments the views did not list are not.
    events: int = 0
    megabytes: float = 0.0
    epochs: int = 0
    peak_events_per_s: float = 0.0
    unplaced_events: int = 0
    skipped: str | None = None


_EVENTS_HEADERS = [
    "stream",
    "events in epochs",
    "MB in epochs",
    "epochs",
    "peak events/s",
    "events not placed",
    "note",
]


def _events_section(rows: Sequence[EventsRow]) -> str:
    if not rows:
        return ""  # no --controller: the page is as it always was
    cells = [
        [r.stream, "", "", "", "", "", f"no chart: {r.skipped}"]
        if r.skipped is not None
        else [r.stream, r.events, r.megabytes, r.epochs, r.peak_events_per_s, r.unplaced_events, ""]
        for r in rows
    ]
    return (
        "<h2>Event throughput</h2>"
        '<p class="muted">The events the chart streams still hold, read from the controller; an '
        "epoch runs from its creation to the next one's. Events of segments the views did not "
        "list yet are not placed in any epoch.</p>" + _table(_EVENTS_HEADERS, cells)
    )


def _fmt(value: object) -> str:
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.1f}"
    return escape("" if value is None else str(value))


def _table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{_fmt(v)}</td>" for v in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _image(path: Path) -> str:
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return (
        f'<figure><img alt="{escape(path.stem)}" src="data:image/png;base64,{data}">'
        f"<figcaption>{escape(path.name)}</figcaption></figure>"
    )


_STYLE = """
body { font-family: sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; margin: 1em 0; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: right; }
th { background: #f0f0f0; } td:first-child, th:first-child { text-align: left; }
figure { display: inline-block; margin: 0.5em; } img { max-width: 900px; width: 100%; }
.muted { color: #777; }
"""


def render(
    path: Path,
    run: RunInfo,
    totals: Mapping[str, object],
    top_streams: Sequence[Sequence[object]],
    top_headers: Sequence[str],
    charts: Sequence[Path],
    events: Sequence[EventsRow] = (),
) -> Path:
    rows_per_s = run.rows_read / run.seconds if run.seconds > 0 else 0.0
    info = _table(
        [
            "run",
            "finished",
            "master",
            "kind",
            "recomputed from",
            "rows read",
            "facts written",
            "seconds",
            "rows/s",
        ],
        [
            [
                run.run_id,
                run.finished_at,
                run.master,
                "full" if run.full_run else "incremental",
                run.recomputed_from or "nothing new",
                run.rows_read,
                run.facts_written,
                run.seconds,
                rows_per_s,
            ]
        ],
    )
    streams = _table(top_headers, top_streams) if top_streams else "<p>No activity yet.</p>"
    streams += _events_section(events)
    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>pgcontroller streams summary</title>
<style>{_STYLE}</style></head><body>
<h1>Streams summary</h1>
<p class="muted">Facts per stream and UTC day from the reporting views;
figures are all-time totals of the lake.</p>
<h2>Last run</h2>{info}
<h2>Totals</h2>{_table(["figure", "all days"], [[k.replace("_", " "), v] for k, v in totals.items()])}
<h2>Most active streams</h2>{streams}
<h2>Charts</h2>{"".join(_image(c) for c in charts) or "<p>No charts: no activity yet.</p>"}
</body></html>
"""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(page, encoding="utf-8")
    return path
