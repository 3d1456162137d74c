"""The input partitions of a read: one part per segment range between the cuts, split further
into parts of about `split_size_bytes`, and reading one part as Arrow record batches."""

from __future__ import annotations

import itertools
import math
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import InputPartition
from pyspark.sql.types import StructType

from app.streamclient import (
    Span,
    StreamError,
    StreamNotFound,
    StreamSegments,
    StreamTruncated,
    qualified_name,
    read_part,
)
from spark.datasource.connect import open_stream
from spark.datasource.loop import LoopThread
from spark.datasource.options import SourceOptions
from spark.datasource.rows import BatchBuilder


@dataclass
class Part(InputPartition):
    """The events that begin in [lo, hi) of segment range [start, end); the next part of the
    range, if any, begins at hi."""

    segment_id: int
    start: int
    end: int
    lo: int
    hi: int

    def __post_init__(self) -> None:
        InputPartition.__init__(self, (self.segment_id, self.lo, self.hi))


def split(spans: Sequence[Span], split_bytes: int) -> list[Part]:
    parts: list[Part] = []
    for span in spans:
        count = 1 if split_bytes <= 0 else max(1, math.ceil(span.size / split_bytes))
        points = [span.start + k * span.size // count for k in range(count)] + [span.end]
        parts.extend(
            Part(span.segment_id, span.start, span.end, lo, hi) for lo, hi in itertools.pairwise(points)
        )
    return parts


def read_rows(options: SourceOptions, schema: StructType, part: Part) -> Iterator[pa.RecordBatch]:
    """The part's events as record batches (runs in an executor): read on the loop's thread,
    made into Arrow on this one, while the loop reads on."""
    loop = LoopThread()
    try:
        name = qualified_name(options.scope, options.stream, part.segment_id)
        builder = BatchBuilder(schema, options.encoding, options.scope, options.stream, name)
        for events in loop.iterate(_part_events(options, part)):
            yield builder.build(part.segment_id, events)
    finally:
        loop.close()


async def _part_events(options: SourceOptions, part: Part) -> AsyncIterator[list[tuple[int, bytes]]]:
    async with open_stream(options, running=True) as segments:
        async for events in _events(options, segments, part):
            yield events


async def _events(
    options: SourceOptions, segments: StreamSegments, part: Part
) -> AsyncIterator[list[tuple[int, bytes]]]:
    try:
        async for events in read_part(segments, part.segment_id, part.start, part.end, part.lo, part.hi):
            yield events
    except (StreamTruncated, StreamNotFound) as exc:
        await check_skippable(options, segments, exc)
        if isinstance(exc, StreamNotFound) or not 0 <= exc.start < part.hi:
            return  # truncated past the whole part: nothing of it is left
        # Truncated into this part: what is left begins at the truncation point, a stream cut's
        # offset and so an event's start; nothing before it was handed out.
        resumed = Part(part.segment_id, exc.start, part.end, exc.start, part.hi)
        async for events in _events(options, segments, resumed):
            yield events


async def check_skippable(options: SourceOptions, segments: StreamSegments, exc: StreamError) -> None:
    """Returns if the data `exc` found missing was truncated away and the options skip such
    data; raises the reason otherwise (the stream deleted, or truncated and not to be skipped)."""
    named = f"{options.scope}/{options.stream}"
    if not await segments.controller.stream_exists(options.scope, options.stream):
        raise StreamNotFound(f"stream {named} was deleted while the query ran ({exc})") from exc
    if options.on_truncation != "skip":
        raise StreamError(
            f"{named} was truncated past the data this query reads ({exc}); read from a later "
            "cut, or set on_truncation=skip to skip what was deleted"
        ) from exc
