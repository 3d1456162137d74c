"""The record cache's epochs are bounded by their segments, not only by their count: an epoch may
hold MAX_SEGMENTS_PER_EPOCH segments, and 100,000 such epochs would be a billion cached records
(defect 4's memory half)."""

from __future__ import annotations

from app.domain.limits import MAX_SEGMENTS_PER_EPOCH
from app.domain.records import EpochRecord
from app.domain.scaling import initial_segments
from app.store.cache import MAX_CACHED_SEGMENTS, RecordCache


def _epoch(epoch: int, segments: int) -> EpochRecord:
    return EpochRecord(epoch, epoch, initial_segments(segments, 0, 0), 0)


def test_defect_4_cached_epochs_stay_within_the_segment_budget() -> None:
    cache = RecordCache(max_epoch_segments=25_000)
    for stream_id in range(10):
        cache.remember_epoch(stream_id, _epoch(0, MAX_SEGMENTS_PER_EPOCH))
        assert cache.cached_epoch_segments <= 25_000
    # The least recently used went first; the two most recent are kept.
    assert cache.epoch(9, 0) is not None and cache.epoch(8, 0) is not None
    assert cache.epoch(7, 0) is None
    # Small epochs fill the room the large ones leave.
    for stream_id in range(100, 200):
        cache.remember_epoch(stream_id, _epoch(0, 3))
    assert cache.cached_epoch_segments <= 25_000
    assert all(cache.epoch(stream_id, 0) is not None for stream_id in range(100, 200))


def test_defect_4_an_epoch_remembered_twice_is_weighed_once() -> None:
    cache = RecordCache(max_epoch_segments=MAX_CACHED_SEGMENTS)
    record = _epoch(0, 10)
    for _ in range(5):
        cache.remember_epoch(1, record)
    assert cache.cached_epoch_segments == 10


def test_defect_4_an_epoch_larger_than_the_budget_is_not_kept() -> None:
    cache = RecordCache(max_epoch_segments=100)
    cache.remember_epoch(1, _epoch(0, 101))
    assert cache.epoch(1, 0) is None and cache.cached_epoch_segments == 0


async def test_defect_4_a_large_epoch_read_in_batches_is_the_epoch_read_whole() -> None:
    from app.store.rows import epoch_from_row
    from app.store.streams import _epoch_record

    for count in (1, 1000, 1001, MAX_SEGMENTS_PER_EPOCH):
        segments = initial_segments(count, 3, 77)
        row = {
            "epoch": 0,
            "reference_epoch": 0,
            "creation_time": 77,
            "splits": 2,
            "merges": 1,
            "segment_ids": [s.id for s in segments],
            "key_starts": [s.key_start for s in segments],
            "key_ends": [s.key_end for s in segments],
            "segment_creation_times": [s.creation_time for s in segments],
        }
        assert await _epoch_record(row) == epoch_from_row(row)
