"""The stream store port: a stream's metadata (state, configuration, epochs, truncation, sealed
sizes), every write conditional on the version read, with the request that follows it written
in the same transaction."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from app.domain.records import (
    EpochRecord,
    EpochTransitionRecord,
    SegmentRecord,
    StreamConfig,
    StreamState,
    TruncationRecord,
    Versioned,
)
from app.domain.requests import NewRequest


@dataclass(frozen=True, slots=True)
class StreamCreation:
    """What `create_stream_metadata` found or wrote."""

    created: bool  # False: the stream was there already
    state: StreamState
    creation_time: int
    config: StreamConfig
    epoch_zero: EpochRecord


class StreamStore(Protocol):
    async def create_stream_metadata(
        self,
        scope: str,
        name: str,
        config: StreamConfig,
        creation_time: int,
    ) -> StreamCreation:
        """Writes the stream in CREATING with its epoch 0 in one transaction, or returns what
        exists (also when a concurrent create won the name). Raises NotFound when the scope is
        missing or being deleted."""
        ...

    async def file_creation_finishers(self, started_before: int, buckets: Sequence[int], now_ms: int) -> int:
        """Files a create request for each stream of the request `buckets` still CREATING although
        its creation started before `started_before`, unless it has one (internal streams another
        workflow finishes are left to it); the count."""
        ...

    async def get_creation(self, scope: str, name: str) -> StreamCreation:
        """What creating the stream wrote, to finish it (created=False). Raises NotFound."""
        ...

    async def get_state(self, scope: str, name: str) -> Versioned[StreamState]: ...

    async def set_state(
        self,
        scope: str,
        name: str,
        state: StreamState,
        expected_version: int,
        *,
        request: NewRequest | None = None,
    ) -> int:
        """Conditional on the version; returns the new version. Raises WriteConflict. Every
        conditional write below takes an optional `request`, enqueued in the same
        transaction (the outbox: no intent without its request)."""
        ...

    async def activate_created_stream(
        self, scope: str, name: str, expected_state_version: int, *, index_tags: bool
    ) -> None:
        """CREATING -> ACTIVE and (unless internal) the tag index, in one transaction."""
        ...

    async def get_config(self, scope: str, name: str) -> Versioned[StreamConfig]: ...

    async def get_configs(self, scope: str, names: Sequence[str]) -> dict[str, StreamConfig]:
        """The configurations of those of `names` that exist in `scope`, by name."""
        ...

    async def stream_exists(self, scope: str, name: str) -> bool: ...

    async def list_streams(self, scope: str, after: str, limit: int) -> list[str]:
        """Every stream name in the scope (internal ones too). Raises NotFound for the scope."""
        ...

    async def list_streams_for_tag(self, scope: str, tag: str, after: str, limit: int) -> list[str]: ...

    async def get_active_epoch(self, scope: str, name: str) -> tuple[StreamState, EpochRecord]:
        """The state and the active epoch record in one read."""
        ...

    async def get_epoch(self, scope: str, name: str, epoch: int, stream_id: int | None = None) -> EpochRecord:
        """`stream_id` (the stream row's id, when the caller read it) lets an epoch cached under
        it answer without the stream's cached view, which any change of its state drops."""
        ...

    async def get_head(self, scope: str, name: str) -> dict[int, int]:
        """The truncation stream cut, or the epoch-0 segments at offset 0 if never truncated."""
        ...

    async def get_epochs(self, scope: str, name: str, low: int, high: int) -> list[EpochRecord]:
        """Epochs low..high in order, one round trip whatever the history length."""
        ...

    async def get_epochs_by_time(
        self, scope: str, name: str, from_ms: int, to_ms: int, limit: int
    ) -> list[EpochRecord]: ...

    async def get_successor_epochs(
        self, scope: str, name: str, segment: int
    ) -> tuple[EpochRecord, EpochRecord] | None:
        """(the epoch the segment was sealed in, the one before), None while unsealed/unknown."""
        ...

    async def get_config_record(self, scope: str, name: str) -> Versioned[tuple[StreamConfig, bool]]:
        """The configuration with its `updating` flag."""
        ...

    async def set_config(
        self,
        scope: str,
        name: str,
        config: StreamConfig,
        updating: bool,
        expected_version: int,
        *,
        request: NewRequest | None = None,
    ) -> int: ...

    async def reindex_tags(self, scope: str, name: str) -> None:
        """Makes the tag index match the stored configuration's tags."""
        ...

    async def get_current_epoch_pointer(self, scope: str, name: str) -> Versioned[int]: ...

    async def set_current_epoch_pointer(
        self, scope: str, name: str, epoch: int, expected_version: int
    ) -> int: ...

    async def get_truncation(self, scope: str, name: str) -> Versioned[TruncationRecord]: ...

    async def set_truncation(
        self,
        scope: str,
        name: str,
        record: TruncationRecord,
        expected_version: int,
        *,
        request: NewRequest | None = None,
    ) -> int: ...

    async def complete_truncation(
        self,
        scope: str,
        name: str,
        completed: TruncationRecord,
        deleted_now: frozenset[int],
        completed_at: int,
        expected_version: int,
    ) -> int: ...

    async def get_epoch_transition(
        self, scope: str, name: str
    ) -> Versioned[EpochTransitionRecord | None]: ...

    async def set_epoch_transition(
        self,
        scope: str,
        name: str,
        record: EpochTransitionRecord | None,
        expected_version: int,
        *,
        request: NewRequest | None = None,
    ) -> int: ...

    async def add_epoch(
        self,
        scope: str,
        name: str,
        record: EpochRecord,
        sealed: Sequence[int],
        created: Sequence[SegmentRecord],
        *,
        duplicate: bool = False,
    ) -> None:
        """The new epoch, its new segments, and sealed-in marks for the sealed ones; idempotent.
        A `duplicate` epoch (a rolling transaction's copy) records empty history lists."""
        ...

    async def get_sealed_size_shard(
        self, scope: str, name: str, shard: int
    ) -> Versioned[dict[int, int]] | None: ...

    async def put_sealed_size_shard(
        self, scope: str, name: str, shard: int, sizes: dict[int, int], expected_version: int | None
    ) -> int: ...

    async def all_segment_ids(self, scope: str, name: str) -> list[int]: ...

    async def get_creation_time(self, scope: str, name: str) -> int: ...

    async def delete_stream(self, scope: str, name: str, creation_time: int = 0) -> bool:
        """Removes the metadata (only the incarnation created at `creation_time` when non-zero)."""
        ...
