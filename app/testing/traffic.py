"""Simulated segment-store traffic for tests and benches: a wrapper of the controller's
SegmentStore port that tells an AutoScaleMonitor (the segment store's own auto-scaler, on a clock
the test moves) what the controller asks of the store, and counts each `append` as one event of
its size. It lets a test run twenty minutes of a segment store's judgement in an instant; the
store itself measures real appends in app/segmentstore/measured_storage.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from app.domain.records import ScaleType
from app.ports import SegmentInfo, SegmentStore
from app.segmentstore.autoscaler import AutoScaleMonitor


class AppendingSegmentStore(SegmentStore, Protocol):
    """A SegmentStore that also takes simulated writes (the embedded one does)."""

    async def append(self, name: str, size: int) -> int: ...


class TrafficRecordingSegmentStore:
    """Wraps a segment store so the monitor follows it: segments are tracked with the policy
    they are created or updated with, forgotten when sealed or deleted, and every `append` counts
    as one event of `size` bytes. Every call is passed through unchanged."""

    def __init__(self, inner: AppendingSegmentStore, monitor: AutoScaleMonitor) -> None:
        self._inner = inner
        self._monitor = monitor

    async def create_segment(
        self, name: str, scale_type: ScaleType, target_rate: int, rollover_size_bytes: int
    ) -> None:
        await self._inner.create_segment(name, scale_type, target_rate, rollover_size_bytes)
        # A repeated create (a workflow re-run) must not restart the averages or the cooldown.
        if not self._monitor.is_tracked(name):
            self._monitor.created(name, scale_type, target_rate)

    async def create_segments(
        self, names: Sequence[str], scale_type: ScaleType, target_rate: int, rollover_size_bytes: int
    ) -> None:
        await self._inner.create_segments(names, scale_type, target_rate, rollover_size_bytes)
        for name in names:
            if not self._monitor.is_tracked(name):
                self._monitor.created(name, scale_type, target_rate)

    async def seal_segment(self, name: str) -> int:
        length = await self._inner.seal_segment(name)
        self._monitor.forget(name)
        return length

    async def truncate_segment(self, name: str, offset: int) -> None:
        await self._inner.truncate_segment(name, offset)

    async def delete_segment(self, name: str) -> None:
        await self._inner.delete_segment(name)
        self._monitor.forget(name)

    async def update_policy(self, name: str, scale_type: ScaleType, target_rate: int) -> None:
        await self._inner.update_policy(name, scale_type, target_rate)
        self._monitor.policy_updated(name, scale_type, target_rate)

    async def get_segment_info(self, name: str) -> SegmentInfo:
        return await self._inner.get_segment_info(name)

    async def create_transaction_segment(
        self, segment_name: str, txn_high: int, txn_low: int, rollover_size_bytes: int
    ) -> None:
        await self._inner.create_transaction_segment(segment_name, txn_high, txn_low, rollover_size_bytes)

    async def create_transaction_segments(
        self, segment_names: Sequence[str], txn_high: int, txn_low: int, rollover_size_bytes: int
    ) -> None:
        await self._inner.create_transaction_segments(segment_names, txn_high, txn_low, rollover_size_bytes)

    async def merge_transaction_segment(
        self, segment_name: str, txn_high: int, txn_low: int, *, txn_parent: str | None = None
    ) -> int:
        return await self._inner.merge_transaction_segment(
            segment_name, txn_high, txn_low, txn_parent=txn_parent
        )

    async def merge_transaction_segments(
        self, segment_name: str, txns: Sequence[tuple[int, int]], *, txn_parent: str | None = None
    ) -> int:
        return await self._inner.merge_transaction_segments(segment_name, txns, txn_parent=txn_parent)

    async def abort_transaction_segment(self, segment_name: str, txn_high: int, txn_low: int) -> None:
        await self._inner.abort_transaction_segment(segment_name, txn_high, txn_low)

    async def create_table_segment(self, name: str, key_length: int, rollover_size_bytes: int) -> None:
        await self._inner.create_table_segment(name, key_length, rollover_size_bytes)

    async def delete_table_segment(self, name: str, must_be_empty: bool) -> None:
        await self._inner.delete_table_segment(name, must_be_empty)

    async def append(self, name: str, size: int) -> int:
        length = await self._inner.append(name, size)
        self._monitor.record(name, 1, size)
        return length
