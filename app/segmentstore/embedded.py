"""The embedded segment store: the SegmentStore port served from PostgreSQL rows.

It is the default when no real segment store is configured. It keeps Pravega's segment-store
semantics that the controller relies on (idempotent create/seal/delete, final length on
seal, merge-once) so workflows behave as they will against a real one. `append` simulates
writer traffic for tests and demonstrations; it is not part of the port.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from app.domain.records import ScaleType
from app.ports import Clock, SegmentInfo

# Re-exported: the name's home is app.segmentstore.names, shared with the wire client.
from app.segmentstore.names import transaction_segment_name as transaction_segment_name


class SegmentRows(Protocol):
    async def create(
        self,
        names: Sequence[str],
        kind: str,
        scale_type: int,
        target_rate: int,
        rollover: int,
        key_length: int,
        now_ms: int,
    ) -> None: ...
    async def info(self, name: str) -> SegmentInfo: ...
    async def exists(self, name: str) -> bool: ...
    async def seal(self, name: str) -> int: ...
    async def truncate(self, name: str, offset: int) -> None: ...
    async def delete(self, name: str, with_suffix_like: str) -> None: ...
    async def update_policy(self, name: str, scale_type: int, target_rate: int) -> None: ...
    async def merge(self, parent: str, txn_segments: Sequence[str]) -> int: ...
    async def append(self, name: str, size: int) -> int: ...
    async def delete_table(self, name: str, must_be_empty: bool) -> None: ...


def _like_escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


class EmbeddedSegmentStore:
    def __init__(self, rows: SegmentRows, clock: Clock) -> None:
        self._rows = rows
        self._clock = clock

    async def create_segment(
        self, name: str, scale_type: ScaleType, target_rate: int, rollover_size_bytes: int
    ) -> None:
        await self._rows.create(
            [name], "stream", int(scale_type), target_rate, rollover_size_bytes, 0, self._clock.now_ms()
        )

    async def create_segments(
        self, names: Sequence[str], scale_type: ScaleType, target_rate: int, rollover_size_bytes: int
    ) -> None:
        await self._rows.create(
            names, "stream", int(scale_type), target_rate, rollover_size_bytes, 0, self._clock.now_ms()
        )

    async def seal_segment(self, name: str) -> int:
        return await self._rows.seal(name)

    async def truncate_segment(self, name: str, offset: int) -> None:
        await self._rows.truncate(name, offset)

    async def delete_segment(self, name: str) -> None:
        # A deleted segment takes its open transaction segments with it, as in Pravega.
        await self._rows.delete(name, _like_escape(name) + "#transaction.%")

    async def update_policy(self, name: str, scale_type: ScaleType, target_rate: int) -> None:
        await self._rows.update_policy(name, int(scale_type), target_rate)

    async def get_segment_info(self, name: str) -> SegmentInfo:
        return await self._rows.info(name)

    async def create_transaction_segment(
        self, segment_name: str, txn_high: int, txn_low: int, rollover_size_bytes: int
    ) -> None:
        # No parent check, as in Pravega's segment store: a transaction is named after its
        # "generalised" parent seg(number, txn epoch), which need not exist as a segment.
        await self._rows.create(
            [transaction_segment_name(segment_name, txn_high, txn_low)],
            "transaction",
            0,
            0,
            rollover_size_bytes,
            0,
            self._clock.now_ms(),
        )

    async def create_transaction_segments(
        self, segment_names: Sequence[str], txn_high: int, txn_low: int, rollover_size_bytes: int
    ) -> None:
        await self._rows.create(
            [transaction_segment_name(name, txn_high, txn_low) for name in segment_names],
            "transaction",
            0,
            0,
            rollover_size_bytes,
            0,
            self._clock.now_ms(),
        )

    async def merge_transaction_segment(
        self, segment_name: str, txn_high: int, txn_low: int, *, txn_parent: str | None = None
    ) -> int:
        source = transaction_segment_name(txn_parent or segment_name, txn_high, txn_low)
        return await self._rows.merge(segment_name, [source])

    async def merge_transaction_segments(
        self, segment_name: str, txns: Sequence[tuple[int, int]], *, txn_parent: str | None = None
    ) -> int:
        parent = txn_parent or segment_name
        return await self._rows.merge(
            segment_name, [transaction_segment_name(parent, h, lo) for h, lo in txns]
        )

    async def abort_transaction_segment(self, segment_name: str, txn_high: int, txn_low: int) -> None:
        txn = transaction_segment_name(segment_name, txn_high, txn_low)
        await self._rows.delete(txn, _like_escape(txn))

    async def create_table_segment(self, name: str, key_length: int, rollover_size_bytes: int) -> None:
        await self._rows.create([name], "table", 0, 0, rollover_size_bytes, key_length, self._clock.now_ms())

    async def delete_table_segment(self, name: str, must_be_empty: bool) -> None:
        await self._rows.delete_table(name, must_be_empty)

    async def append(self, name: str, size: int) -> int:
        """Simulated writer traffic: grows an unsealed segment by `size` bytes."""
        return await self._rows.append(name, size)
