"""Where a segment's bytes are: PostgreSQL (the open tail, or all of it without a long-term tier)
and the long-term tier's chunk objects (the REST storage view and the analysts' view say it)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SegmentBytes:
    segment: str  # the qualified name, as app/domain/segment_names.py spells it
    kind: str  # stream, transaction or transient
    start_offset: int
    length: int
    sealed: bool
    postgres_bytes: int
    postgres_chunks: int
    tiered_bytes: int
    tiered_chunks: int
