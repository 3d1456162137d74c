"""The segment-store port: the controller's calls into the data plane, each idempotent on its
outcome so a workflow step can be run again after a crash."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from app.domain.records import ScaleType


@dataclass(frozen=True, slots=True)
class SegmentInfo:
    name: str
    length: int
    start_offset: int
    sealed: bool


class SegmentStore(Protocol):
    """The controller's calls into the segment store. Every call is idempotent on its outcome:
    creating what exists, sealing what is sealed, deleting what is gone all succeed."""

    async def create_segment(
        self, name: str, scale_type: ScaleType, target_rate: int, rollover_size_bytes: int
    ) -> None: ...

    async def create_segments(
        self, names: Sequence[str], scale_type: ScaleType, target_rate: int, rollover_size_bytes: int
    ) -> None:
        """Every named segment with one policy, as one batch (a stream's epoch 0): all of them,
        or (on error) some, never a half-created one; idempotent like the single create."""
        ...

    async def seal_segment(self, name: str) -> int:
        """Seals and returns the final length. Raises NotFound for a missing segment."""
        ...

    async def truncate_segment(self, name: str, offset: int) -> None: ...

    async def delete_segment(self, name: str) -> None: ...

    async def update_policy(self, name: str, scale_type: ScaleType, target_rate: int) -> None: ...

    async def get_segment_info(self, name: str) -> SegmentInfo: ...

    async def create_transaction_segment(
        self, segment_name: str, txn_high: int, txn_low: int, rollover_size_bytes: int
    ) -> None: ...

    async def create_transaction_segments(
        self, segment_names: Sequence[str], txn_high: int, txn_low: int, rollover_size_bytes: int
    ) -> None:
        """The transaction's segment under each named parent: all of them, or (on error) some,
        never a half-created one; idempotent like the single create."""
        ...

    async def merge_transaction_segment(
        self, segment_name: str, txn_high: int, txn_low: int, *, txn_parent: str | None = None
    ) -> int:
        """Merges the transaction segment into `segment_name`; returns its new length. The
        transaction segment is named after `txn_parent` (default: `segment_name` itself):
        a rolled or re-labelled transaction merges into a segment other than its namesake.
        Merging one that was merged already returns the target's current length."""
        ...

    async def merge_transaction_segments(
        self, segment_name: str, txns: Sequence[tuple[int, int]], *, txn_parent: str | None = None
    ) -> int:
        """Merges the transactions, in order, as one batch (the wire's MergeSegmentsBatch);
        returns the target's length afterwards. The same idempotence as the single merge."""
        ...

    async def abort_transaction_segment(self, segment_name: str, txn_high: int, txn_low: int) -> None: ...

    async def create_table_segment(self, name: str, key_length: int, rollover_size_bytes: int) -> None: ...

    async def delete_table_segment(self, name: str, must_be_empty: bool) -> None: ...
