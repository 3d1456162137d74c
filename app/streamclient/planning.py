"""What lies between two cuts of a stream: its tail as a cut, and the byte ranges of every segment
between a start cut and an end cut, across scales (what Pravega's batch client reads).

Invariant: the spans of `spans_between(a, b)` and `spans_between(b, c)` together hold every event
of `spans_between(a, c)` exactly once: a segment's span starts at its offset in the start cut
(0 for a segment created after it) and ends at its offset in the end cut (its whole length for a
segment sealed before it).
"""

from __future__ import annotations

import asyncio

from app.streamclient.cuts import StreamCut
from app.streamclient.errors import InvalidStreamCut, StreamNotFound, StreamTruncated
from app.streamclient.segments import Span, StreamSegments


async def tail_cut(segments: StreamSegments) -> StreamCut:
    """The current segments at their lengths now."""
    ranges, _ = await segments.controller.current_segments(segments.scope, segments.stream)
    infos = await asyncio.gather(*(segments.info(r.segment_id) for r in ranges))
    return StreamCut(segments.scope, segments.stream, {i.segment_id: i.length for i in infos})


async def head_cut(segments: StreamSegments) -> StreamCut:
    cut, _ = await segments.controller.head(segments.scope, segments.stream)
    return cut


async def check_cut(segments: StreamSegments, cut: StreamCut, what: str) -> None:
    """InvalidStreamCut unless the controller says `cut` is a cut of the stream."""
    if not await segments.controller.cut_is_valid(cut):
        raise InvalidStreamCut(
            f"{what} {cut.to_json()} is not a cut of {cut.scope}/{cut.stream}: its segments do not "
            "cover the key space once, or the stream has no such segments"
        )


async def spans_between(
    segments: StreamSegments, start: StreamCut, end: StreamCut, *, skip_truncated: bool = False
) -> list[Span]:
    """The non-empty spans of every segment between the cuts, in segment-id order. A segment
    that is gone though the stream is not was truncated away: StreamTruncated, or left out with
    `skip_truncated`."""
    ids = await segments.controller.segments_between(start, end)
    missing = [s for s in ids if s not in end.positions]
    found = await asyncio.gather(*(_length(segments, s) for s in missing))
    lengths = dict(zip(missing, found, strict=True))
    spans: list[Span] = []
    for segment_id in sorted(ids):
        begin = start.positions.get(segment_id, 0)
        if segment_id in end.positions:
            finish = end.positions[segment_id]
        elif (length := lengths[segment_id]) is not None:
            finish = length
        elif not await segments.controller.stream_exists(segments.scope, segments.stream):
            raise StreamNotFound(f"{segments.scope}/{segments.stream} was deleted")
        elif skip_truncated:
            continue
        else:
            raise StreamTruncated(segments.name(segment_id), begin, -1)
        if finish < begin:
            raise InvalidStreamCut(
                f"segment {segments.name(segment_id)} is at {begin} in the start cut but at {finish} "
                "in the end cut: the end cut is before the start cut"
            )
        if finish > begin:
            spans.append(Span(segment_id, begin, finish))
    return spans


async def _length(segments: StreamSegments, segment_id: int) -> int | None:
    """The segment's length; None if it no longer exists."""
    try:
        return (await segments.info(segment_id)).length
    except StreamNotFound:
        return None
