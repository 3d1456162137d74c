"""Which segment an event's routing key goes to: Pravega's StreamSegments, bit for bit.

Invariant: a routing key is hashed as Java's client hashes it (Guava murmur3_128 seeded with
"EventRouter".hashCode() over the key's UTF-16 code units, its first 64 bits made a fraction in
[0, 1)), and goes to the segment whose key range's upper end is the least one at or above that fraction,
so events this client writes land where a Java writer's events with the same key land.
"""

from __future__ import annotations

import bisect
import random
from collections.abc import Sequence
from typing import Final

from app.domain.containers import java_string_hash, murmur3_128_bytes_as_long
from app.kvtclient.routing import long_to_double_fraction
from app.streamclient.controller import KeyRange

ROUTER_SEED: Final = java_string_hash("EventRouter")


def hash_routing_key(key: str) -> float:
    """HashHelper.seededWith("EventRouter").hashToRange(key): hashUnencodedChars is the UTF-16
    code units, little-endian."""
    return long_to_double_fraction(murmur3_128_bytes_as_long(key.encode("utf-16-le"), ROUTER_SEED))


class SegmentRouter:
    """The segments a writer writes to, by key range (what createTransaction answers)."""

    def __init__(self, ranges: Sequence[KeyRange]) -> None:
        if not ranges:
            raise ValueError("a stream has at least one segment")
        self.ranges = tuple(sorted(ranges, key=lambda r: r.max_key))
        self._upper = [r.max_key for r in self.ranges]

    def segment_for(self, routing_key: str | None) -> int:
        """SegmentCollection.getSegmentForKey: the segment whose range's upper end is the ceiling
        entry of the key's hash (a random position without a key, as Java's writer does)."""
        where = random.random() if routing_key is None else hash_routing_key(routing_key)
        index = bisect.bisect_left(self._upper, where)
        return self.ranges[min(index, len(self.ranges) - 1)].segment_id
