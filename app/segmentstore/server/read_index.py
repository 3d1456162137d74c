"""The store's read index: the most recent committed bytes of each segment, in memory, so reads at
and near a segment's tail are answered without a PostgreSQL read.

Each segment's entry is one contiguous range [start, end) whose end is the segment's committed
length as this store last learned it from an append it made, so at least the end of every append
it has acknowledged. An entry is filled only by this store's own committed appends, and only while
they follow on from it (an append starting past its end restarts it there, one reported late that
ends at its start goes before it); any other change of the segment, anything heard from a sibling
store, and any append whose outcome is unknown drops it (Tails decides, see tails.py). So an entry
that exists means: the segment is unsealed, not truncated past the entry's start, and holds
exactly these bytes at these offsets. What it can miss is a sibling store's change in the moment
before this store hears of it (a datagram, sent after the commit): a read then answers as a
database read made just before that change would (after an append: fewer bytes and at_tail, and
the reader's next read, at the entry's end, goes to the database).

Bounded by a budget per segment (the oldest bytes go first) and one for all segments together
(the least recently used entries go first); both count the payload and a fixed overhead per
append kept. Transient segments are never kept: they are deleted by their connection's close and
by the orphan sweep, neither of which passes through here.
"""

from __future__ import annotations

import bisect
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Final

from app.domain.segment_names import has_transient_delimiter

# The budgets of a store started without its settings (the settings' defaults are the same).
DEFAULT_SEGMENT_BYTES: Final = 1024 * 1024
DEFAULT_TOTAL_BYTES: Final = 64 * 1024 * 1024
# What keeping one append's bytes costs beyond its payload (the bytes object, its list slots and
# its start offset), so that many tiny appends cannot exceed the budgets unseen.
CHUNK_OVERHEAD_BYTES: Final = 96


@dataclass(frozen=True, slots=True)
class Cached:
    """A read answered from memory: the bytes from the read's offset as `pieces` (slices of the
    appends kept, not joined), and the segment's committed length (the entry's end) for the
    reply's at_tail flag."""

    pieces: tuple[bytes, ...]
    length: int

    @property
    def data(self) -> bytes:
        return b"".join(self.pieces)


@dataclass(slots=True)
class _Entry:
    # chunks[i] holds the bytes at [starts[i], starts[i] + len(chunks[i])); contiguous, ascending.
    starts: list[int] = field(default_factory=list)
    chunks: list[bytes] = field(default_factory=list)
    end: int = 0
    cost: int = 0

    @property
    def start(self) -> int:
        return self.starts[0] if self.starts else self.end


class ReadIndex:
    def __init__(self, segment_bytes: int, total_bytes: int) -> None:
        """`segment_bytes` per segment, `total_bytes` for all; 0 for either keeps nothing."""
        self._segment_bytes = min(segment_bytes, total_bytes)
        self._total_bytes = total_bytes
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._cost = 0

    @property
    def cost(self) -> int:
        """What the kept bytes count against the total budget now."""
        return self._cost

    def __len__(self) -> int:
        return len(self._entries)

    def segments(self) -> list[str]:
        return list(self._entries)

    def span(self, segment: str) -> tuple[int, int] | None:
        """The entry's [start, end), or None."""
        entry = self._entries.get(segment)
        return None if entry is None else (entry.start, entry.end)

    def appended(self, segment: str, start: int, data: bytes) -> None:
        """This store's append of `data` at `start` has committed (the segment's length was then
        start + len(data); no data: a duplicate, which only tells the length). Appends of one
        segment committed close together may be reported in any order: one reported late that
        ends where the entry starts goes before it, one older still adds nothing (the entry
        describes a later length), and one overlapping the entry contradicts it, which drops it."""
        if self._segment_bytes <= CHUNK_OVERHEAD_BYTES or has_transient_delimiter(segment):
            return
        entry = self._entries.get(segment)
        if entry is None or start > entry.end:
            # No entry, or bytes between its end and this append that someone else wrote: what
            # this store knows contiguously starts here.
            self.invalidate(segment)
            if data:
                self._restart(segment, start, data)
        elif start == entry.end:
            if data:
                self._extend(segment, entry, data)
        elif data:
            end = start + len(data)
            if end == entry.start:
                self._prepend(segment, entry, data)
            elif end > entry.start:
                self.invalidate(segment)

    def _restart(self, segment: str, start: int, data: bytes) -> None:
        self._extend(segment, self._entries.setdefault(segment, _Entry(end=start)), data)

    def _extend(self, segment: str, entry: _Entry, data: bytes) -> None:
        keep = self._segment_bytes - CHUNK_OVERHEAD_BYTES
        if len(data) > keep:
            # Larger than a segment's budget: only its last bytes, in an entry of their own.
            end = entry.end + len(data)
            self.invalidate(segment)
            entry = self._entries[segment] = _Entry(end=end - keep)
            data = data[len(data) - keep :]
        self._entries.move_to_end(segment)
        entry.starts.append(entry.end)
        entry.chunks.append(data)
        entry.end += len(data)
        self._charge(entry, len(data) + CHUNK_OVERHEAD_BYTES)
        self._trim(segment, entry)

    def _prepend(self, segment: str, entry: _Entry, data: bytes) -> None:
        cost = len(data) + CHUNK_OVERHEAD_BYTES
        if entry.cost + cost > self._segment_bytes:
            return  # it would be the first to go
        entry.starts.insert(0, entry.start - len(data))
        entry.chunks.insert(0, data)
        self._charge(entry, cost)
        self._entries.move_to_end(segment)
        self._trim(segment, entry)

    def invalidate(self, segment: str) -> None:
        entry = self._entries.pop(segment, None)
        if entry is not None:
            self._cost -= entry.cost

    def clear(self) -> None:
        self._entries.clear()
        self._cost = 0

    def read(self, segment: str, offset: int, size: int) -> Cached | None:
        """At most `size` bytes from `offset` when the entry holds `offset`, else None."""
        entry = self._entries.get(segment)
        if entry is None or size <= 0 or not entry.start <= offset < entry.end:
            return None
        self._entries.move_to_end(segment)
        starts, chunks = entry.starts, entry.chunks
        i = bisect.bisect_right(starts, offset) - 1
        skip = offset - starts[i]
        parts: list[bytes] = []
        wanted = size
        while wanted > 0 and i < len(chunks):
            # A slice of a whole chunk is the chunk itself: a read of whole appends copies nothing.
            piece = chunks[i][skip : skip + wanted]
            parts.append(piece)
            wanted -= len(piece)
            skip = 0
            i += 1
        return Cached(tuple(parts), entry.end)

    def _charge(self, entry: _Entry, cost: int) -> None:
        entry.cost += cost
        self._cost += cost

    def _trim(self, segment: str, entry: _Entry) -> None:
        # The newest chunk alone always fits (appended() cut it to size), so both loops end
        # with every budget kept.
        while entry.cost > self._segment_bytes:
            self._drop_oldest(entry)
        while self._cost > self._total_bytes:
            oldest = next(iter(self._entries))
            if oldest == segment:
                self._drop_oldest(entry)
            else:
                self.invalidate(oldest)

    def _drop_oldest(self, entry: _Entry) -> None:
        chunk = entry.chunks.pop(0)
        entry.starts.pop(0)
        self._charge(entry, -(len(chunk) + CHUNK_OVERHEAD_BYTES))
