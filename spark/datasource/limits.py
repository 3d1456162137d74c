"""`max_bytes_per_trigger`: a cut that advances the stream's reading by about so many bytes.

A cut's offsets must begin events, and only reading finds where events end, so the driver reads
the bytes a capped segment advances by (they are read twice: once here, once by the batch).
Segments sealed by a scale and read to their end are replaced by their successors (at offset 0)
once every predecessor of each successor is read to its end, so every cut stays a cut of the
stream: its segments cover the key space once.
"""

from __future__ import annotations

from app.streamclient import Span, StreamCut, StreamSegments, StreamTruncated, read_part, spans_between
from spark.datasource.options import SourceOptions
from spark.datasource.parts import check_skippable


async def limited_cut(
    options: SourceOptions, segments: StreamSegments, start: StreamCut, tail: StreamCut, max_bytes: int
) -> StreamCut:
    skip = options.on_truncation == "skip"
    spans = {s.segment_id: s for s in await spans_between(segments, start, tail, skip_truncated=skip)}
    reading = [s for s in start.positions if s in spans]
    share = max(1, max_bytes // max(1, len(reading)))
    positions = dict(start.positions)
    for segment_id in reading:
        span = spans[segment_id]
        try:
            positions[segment_id] = await _advanced(segments, span, share)
        except StreamTruncated as exc:
            await check_skippable(options, segments, exc)
            # What is left of the segment begins at the truncation point (an event's start).
            span = spans[segment_id] = Span(segment_id, min(max(exc.start, span.start), span.end), span.end)
            positions[segment_id] = await _advanced(segments, span, share)
    done = {
        s for s, at in positions.items() if s not in tail.positions and (s not in spans or at == spans[s].end)
    }
    if done:
        await _replace_by_successors(segments, positions, done)
    return StreamCut(start.scope, start.stream, positions)


async def _advanced(segments: StreamSegments, span: Span, share: int) -> int:
    return span.end if span.size <= share else await _boundary(segments, span, share)


async def _boundary(segments: StreamSegments, span: Span, share: int) -> int:
    """The end of the last event of `span` that ends within `share` bytes (of the first event if
    even that one is longer)."""
    cap = span.start + share
    reached = span.start
    async for events in read_part(
        segments, span.segment_id, span.start, span.end, span.start, cap, check_successor=False
    ):
        for offset, payload in events:
            finish = offset + 8 + len(payload)
            if finish > cap and reached > span.start:
                return reached
            reached = finish
    return reached


async def _replace_by_successors(segments: StreamSegments, positions: dict[int, int], done: set[int]) -> None:
    successors: dict[int, list[int]] = {}
    for segment_id in done:
        found = await segments.controller.successors(segments.scope, segments.stream, segment_id)
        successors.update(found)
    replaced = set(done)
    while True:
        ready = {s for s, before in successors.items() if set(before) <= replaced}
        # A segment leaves the cut only with all of its successors, or the key space has a hole.
        kept = {p for p in replaced if any(p in successors[s] for s in set(successors) - ready)}
        if not kept:
            break
        replaced -= kept
    for segment_id in replaced:
        del positions[segment_id]
    for segment_id in ready:
        positions.setdefault(segment_id, 0)
