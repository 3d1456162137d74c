"""Which table segment holds a key: Pravega's KeyValueTableSegments, bit for bit.

Invariant: a primary key is hashed exactly as Java's client hashes it (Guava murmur3_128 seeded
with "KeyValueTableRouter".hashCode(), over the primary key's bytes only, its first 64 bits made a
fraction in [0, 1)), and goes to the segment whose key range's upper end is the least one at or
above that fraction; so this client and Pravega's Java client put every key in the same segment.
"""

from __future__ import annotations

import bisect
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from app.domain.containers import java_string_hash, murmur3_128_bytes_as_long

ROUTER_SEED: Final = java_string_hash("KeyValueTableRouter")

_LEADING_BITS: Final = 0x3FF0000000000000
_FRACTION_MASK: Final = 0x000FFFFFFFFFFFFF
_MASK64: Final = (1 << 64) - 1


def long_to_double_fraction(value: int) -> float:
    """HashHelper.longToDoubleFraction: bits 12..63 of `value` as the mantissa of a double in [1, 2),
    less one."""
    shifted = ((value & _MASK64) >> 12) & _FRACTION_MASK
    (as_double,) = struct.unpack(">d", struct.pack(">Q", _LEADING_BITS + shifted))
    return float(as_double) - 1.0


def hash_to_range(primary_key: bytes) -> float:
    """Where in [0, 1) a primary key falls (HashHelper.hashToRange(ByteBuffer))."""
    return long_to_double_fraction(murmur3_128_bytes_as_long(primary_key, ROUTER_SEED))


@dataclass(frozen=True, slots=True)
class SegmentRange:
    segment_id: int
    min_key: float
    max_key: float


class KvtSegments:
    """The table's segments by key range (what getCurrentSegmentsKeyValueTable answers)."""

    def __init__(self, ranges: Sequence[SegmentRange]) -> None:
        if not ranges:
            raise ValueError("a key-value table has at least one segment")
        ordered = sorted(ranges, key=lambda r: r.max_key)
        for r in ordered:
            if r.min_key > r.max_key:
                raise ValueError(f"segment {r.segment_id} has the range [{r.min_key}, {r.max_key})")
        # SegmentCollection's sanity checks on the ranges the controller sent.
        if ordered[0].max_key <= 0.0 or not 1.0 <= ordered[-1].max_key < 1.00001:
            raise ValueError(f"the segments' key ranges do not cover [0, 1): {list(ordered)}")
        self.ranges: tuple[SegmentRange, ...] = tuple(ordered)
        self._upper = [r.max_key for r in ordered]

    def segment_for(self, primary_key: bytes) -> SegmentRange:
        """SegmentCollection.getSegmentForKey: the ceiling entry of the hash among upper ends."""
        return self.ranges[bisect.bisect_left(self._upper, hash_to_range(primary_key))]
