"""Key-space arithmetic for segments, bit-for-bit as Pravega computes it in IEEE doubles.

Clients see these doubles, so `0.6000000000000001` and a last end of `0.9999999999999999`
for n = 49 are kept on purpose (the chunk 1/n is computed first, then multiplied).
"""

from app.domain.records import SegmentRecord


def uniform_key_ranges(count: int) -> list[tuple[float, float]]:
    # The chunk is computed once and multiplied, exactly as Java does; do not "fix" the doubles.
    chunk = 1.0 / count
    return [(i * chunk, (i + 1) * chunk) for i in range(count)]


def initial_segments(
    count: int, first_number: int, creation_time: int, start: int = 0, stop: int | None = None
) -> tuple[SegmentRecord, ...]:
    """Epoch 0's segments of a stream of `count`, or only those at positions [start, stop): a
    caller building a large epoch in slices gets the same doubles as building it whole."""
    chunk = 1.0 / count
    return tuple(
        SegmentRecord(
            number=first_number + i,
            creation_epoch=0,
            creation_time=creation_time,
            key_start=i * chunk,
            key_end=(i + 1) * chunk,
        )
        for i in range(start, count if stop is None else min(stop, count))
    )
