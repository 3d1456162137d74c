"""The watermark ports: writers' marks and the watermarks computed from them per stream, each
write fenced by the stream's watermark bucket; a committed transaction that names its writer
and a time advances that writer's mark too."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from app.domain.cluster import Fence
from app.domain.records import Versioned
from app.domain.txns import TxnId
from app.domain.watermarks import MarkEntry, SegmentRange, TrackedMark, Watermark, WriterMark


@dataclass(frozen=True, slots=True)
class StoredWatermark:
    """An emitted watermark with its per-stream sequence number (1, 2, ...)."""

    seq: int
    watermark: Watermark
    created_at: int
    # The `_MARK` segment's length after this watermark's Event; None for rows from before
    # watermarks went to the segment (or written without one).
    mark_offset: int | None = None


@dataclass(frozen=True, slots=True)
class WatermarkMember:
    """A stream of a watermark bucket with everything one round reads about it."""

    stream_id: int
    scope: str
    stream: str
    bucket: int
    timeout_ms: int  # the stream's timestampAggregationTimeout
    marks: tuple[TrackedMark, ...]
    latest: StoredWatermark | None
    # The segment id of the stream's `_MARK<stream>` (None: it has no mark stream).
    mark_segment: int | None = None


@dataclass(frozen=True, slots=True)
class WatermarkAppend:
    """Appends `watermark` as number after_seq + 1, only if after_seq is still the latest
    (0: none yet) and the fence still owns the stream's bucket."""

    stream_id: int
    fence: Fence
    after_seq: int
    watermark: Watermark
    created_at: int
    mark_offset: int | None = None  # where its Event ends in the `_MARK` segment


@dataclass(frozen=True, slots=True)
class MarkChange:
    """A fenced write of one writer mark, conditional on the version the round read."""

    stream_id: int
    fence: Fence
    writer: str
    expected_version: int
    inactive_since: int | None = None  # the new value, for set_inactive_since


class WatermarkStore(Protocol):
    """Writer marks and emitted watermarks. A stream with at least one mark is a member of its
    watermark bucket. Batched calls serve one round over many streams in few round trips."""

    async def get_writer_mark(self, scope: str, name: str, writer: str) -> Versioned[WriterMark] | None:
        """None when the writer has no mark; NotFound when the stream is missing."""
        ...

    async def create_writer_mark(self, scope: str, name: str, writer: str, mark: WriterMark) -> int:
        """NotFound for a missing stream, WriteConflict when the mark exists already."""
        ...

    async def update_writer_mark(
        self, scope: str, name: str, writer: str, mark: WriterMark, expected_version: int
    ) -> int:
        """Conditional on the version; NotFound when the mark (or stream) is gone."""
        ...

    async def members(
        self, buckets: Sequence[int], bucket_count: int, after_stream_id: int, limit: int
    ) -> list[WatermarkMember]:
        """Member streams of `buckets` (the `_system` scope left out) with id > after_stream_id,
        in id order, at most `limit`."""
        ...

    async def member(self, scope: str, name: str, bucket_count: int) -> WatermarkMember | None:
        """The stream as a round reads it, None when it has no marks; NotFound when missing."""
        ...

    async def segment_ranges(self, wanted: Sequence[tuple[int, int]]) -> dict[tuple[int, int], SegmentRange]:
        """Key ranges of (stream id, segment id) pairs; unknown pairs are left out."""
        ...

    async def epoch_segments(
        self, wanted: Sequence[tuple[int, int]]
    ) -> dict[tuple[int, int], tuple[SegmentRange, ...]]:
        """The segments of (stream id, epoch) records; unknown pairs are left out."""
        ...

    async def append_watermarks(self, appends: Sequence[WatermarkAppend], keep: int) -> set[int]:
        """The stream ids whose append landed; each landed append trims its stream to the
        `keep` most recent watermarks."""
        ...

    async def remove_marks(self, removals: Sequence[MarkChange]) -> int:
        """Deletes the marks still at their version and fence; returns how many."""
        ...

    async def set_inactive_since(self, changes: Sequence[MarkChange]) -> int:
        """Sets each mark's `inactive_since` where version and fence still hold; how many."""
        ...

    async def list_watermarks(self, scope: str, name: str, limit: int) -> list[StoredWatermark]:
        """Newest first; NotFound when the stream is missing."""
        ...

    async def txn_commit_times(self, scope: str, name: str, txns: Sequence[TxnId]) -> list[tuple[str, int]]:
        """(writer id, commit time) of those of `txns` committed with both: only such a commit
        moves its writer's mark."""
        ...


@dataclass(frozen=True, slots=True)
class MarkTail:
    """What a `_MARK` segment holds from some offset on, and its length when read."""

    entries: tuple[MarkEntry, ...]
    end: int


class MarkStream(Protocol):
    """The revisioned `_MARK<stream>` segments watermarks are appended to, in Pravega's format,
    where readers read them. `segment` is the qualified segment name."""

    async def append(self, segment: str, watermark: Watermark, expected_offset: int) -> int | None:
        """Appends the watermark only if the segment's length is `expected_offset`; returns the
        new length, or None when the length differs (something was appended first)."""
        ...

    async def read_from(self, segment: str, offset: int) -> MarkTail:
        """Every watermark from `offset` (an entry's start) to the segment's current end, and
        that end. An offset past the end (the segment lost what was known of it) reads from
        the segment's start."""
        ...


class TxnWriterMarks(Protocol):
    """What the commit worker asks of watermarking when a batch commits: each writer named by a
    committed transaction gets a mark at its latest commit time, at the position the batch
    merged into (workers/handlers/commit_txns.py)."""

    async def commit_times(self, scope: str, name: str, txns: Sequence[TxnId]) -> dict[str, int]:
        """Each writer's latest commit time in the batch; read before the batch completes."""
        ...

    async def note_txn_marks(
        self, scope: str, name: str, times: Mapping[str, int], position: Mapping[int, int]
    ) -> None:
        """Notes each writer's mark at `position`; never raises (errors are logged)."""
        ...
