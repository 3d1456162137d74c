"""The ports the core needs: what services ask of storage, the segment store and time.

Services and workers import only these Protocols; `app.main` wires concrete adapters in.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from app.domain.records import (
    EpochRecord,
    EpochTransitionRecord,
    ScaleType,
    ScopeState,
    SegmentRecord,
    StreamConfig,
    StreamState,
    TruncationRecord,
    Versioned,
)
from app.domain.requests import NewRequest, Processor, Request, RequestKind
from app.domain.txns import CompletedTxn, TxnId, TxnRecord, TxnStatus


class Clock(Protocol):
    def now_ms(self) -> int:
        """Milliseconds since the Unix epoch."""
        ...


@dataclass(frozen=True, slots=True)
class StreamCreation:
    """What `create_stream_metadata` found or wrote."""

    created: bool  # False: the stream was there already
    state: StreamState
    creation_time: int
    config: StreamConfig
    epoch_zero: EpochRecord


class ScopeStore(Protocol):
    async def create_scope(self, name: str, now_ms: int) -> None:
        """Raises AlreadyExists, also for a scope being deleted."""
        ...

    async def get_scope_state(self, name: str) -> ScopeState:
        """Raises NotFound."""
        ...

    async def delete_scope(self, name: str) -> None:
        """Raises NotFound, or NotEmpty while any stream (internal ones too) remains."""
        ...

    async def list_scopes(self, after: str, limit: int) -> list[str]:
        """Names strictly after `after` in name order; "" starts at the beginning."""
        ...

    async def get_scope(self, name: str) -> Versioned[ScopeState]: ...

    async def set_scope_state(
        self, name: str, state: ScopeState, expected_version: int, *, request: NewRequest | None = None
    ) -> int:
        """Conditional; a `request` is enqueued in the same transaction (outbox)."""
        ...

    async def stream_names(self, name: str) -> list[str]:
        """Every stream of the scope, internal ones too."""
        ...


class StreamStore(Protocol):
    async def create_stream_metadata(
        self, scope: str, name: str, config: StreamConfig, creation_time: int
    ) -> StreamCreation:
        """Writes the stream in CREATING with its epoch 0 in one transaction, or returns what
        exists. Raises NotFound when the scope is missing or being deleted."""
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

    async def stream_exists(self, scope: str, name: str) -> bool: ...

    async def list_streams(self, scope: str, after: str, limit: int) -> list[str]:
        """Every stream name in the scope (internal ones too). Raises NotFound for the scope."""
        ...

    async def list_streams_for_tag(self, scope: str, tag: str, after: str, limit: int) -> list[str]: ...

    async def get_active_epoch(self, scope: str, name: str) -> tuple[StreamState, EpochRecord]:
        """The state and the active epoch record in one read."""
        ...

    async def get_epoch(self, scope: str, name: str, epoch: int) -> EpochRecord: ...

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


class RequestQueue(Protocol):
    """The durable request queue. Rows are deleted only once their workflow completed."""

    async def enqueue(self, request: NewRequest) -> int: ...

    async def pending(
        self,
        processor: Processor,
        buckets: Sequence[int],
        exclude: Sequence[int],
        limit: int,
        *,
        first_per_key: bool = False,
    ) -> list[Request]:
        """Queued requests in id order; with `first_per_key`, only each key's oldest."""
        ...

    async def get(self, request_id: int) -> Request | None: ...

    async def postpone(self, request: Request, not_before: int, error: str | None) -> Request: ...

    async def mark_started(self, request: Request) -> Request: ...

    async def ack(self, request_id: int) -> None: ...

    async def pending_ids_for_key(self, processor: Processor, scope: str, stream: str) -> list[int]:
        """Ids of the key's queued requests of `processor`, oldest first."""
        ...

    async def ack_many(self, request_ids: Sequence[int]) -> None:
        """Acknowledges requests another request's run has done the work of."""
        ...

    async def has_pending(self, scope: str, stream: str, kind: RequestKind) -> bool: ...

    async def get_waiting_processor(self, scope: str, stream: str) -> Versioned[str] | None: ...

    async def set_waiting_processor(self, scope: str, stream: str, processor: Processor) -> str | None: ...

    async def clear_waiting_processor(self, scope: str, stream: str, processor: Processor) -> None: ...


class AdvisoryLocks(Protocol):
    """Session-level locks on one dedicated connection: losing it loses every lock at once."""

    async def try_lock(self, namespace: int, key: int) -> bool: ...

    async def unlock(self, namespace: int, key: int) -> None: ...

    async def check_alive(self) -> None:
        """Raises StoreUnavailable when the session (and with it every lock) is gone."""
        ...

    async def reset(self) -> None:
        """Drops the session; the next call opens a new one holding no locks."""
        ...


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


@dataclass(frozen=True, slots=True)
class TxnLookup:
    """What is known of a transaction id on a stream: its active record, its outcome, both
    absent (UNKNOWN), never both present for long."""

    active: Versioned[TxnRecord] | None
    completed: CompletedTxn | None

    @property
    def status(self) -> TxnStatus:
        if self.active is not None:
            return self.active.value.status
        if self.completed is not None:
            return self.completed.status
        return TxnStatus.UNKNOWN


@dataclass(frozen=True, slots=True)
class CreatedTxn:
    txn: TxnId
    rollover_size_bytes: int


@dataclass(frozen=True, slots=True)
class CommitBatch:
    """The commit batch in progress: txns of one epoch in commit order, and once it decided
    to roll, the active epoch it rolls over."""

    epoch: int
    txns: tuple[TxnId, ...]
    rolling_active_epoch: int | None = None


@dataclass(frozen=True, slots=True)
class CommittingRecord:
    batch: CommitBatch | None  # None: no batch in progress
    version: int | None  # None: the record was never written


@dataclass(frozen=True, slots=True)
class ExpiredTxn:
    scope: str
    stream: str
    txn: TxnId
    version: int
    lease_expiry: int


class TxnStore(Protocol):
    """Transaction records. Writes are conditional on the version read; a lost race raises
    WriteConflict, a missing stream NotFound."""

    async def create_txn(
        self, scope: str, name: str, epoch: int, bucket: int, now_ms: int, lease_ms: int, max_exec_expiry: int
    ) -> CreatedTxn:
        """A new OPEN record under `epoch`. IllegalState while the stream is SEALING/SEALED."""
        ...

    async def get_txn(self, scope: str, name: str, txn: TxnId) -> TxnLookup: ...

    async def extend_lease(
        self, scope: str, name: str, txn: TxnId, lease_ms: int, lease_expiry: int, expected_version: int
    ) -> int: ...

    async def extend_open_lease(
        self, scope: str, name: str, txn: TxnId, lease_ms: int, now_ms: int, max_lease_ms: int
    ) -> bool:
        """A ping's common case: True when the transaction was OPEN, the lease within the
        maximum and within the maximum execution time, and the lease is now extended."""
        ...

    async def move_txn(
        self,
        scope: str,
        name: str,
        txn: TxnId,
        target: TxnStatus,
        expected_version: int,
        request: NewRequest,
        *,
        writer_id: str | None = None,
        commit_time: int | None = None,
    ) -> int:
        """OPEN -> COMMITTING/ABORTING together with the request that completes it."""
        ...

    async def complete_abort(
        self, scope: str, name: str, txn: TxnId, expected_version: int, now_ms: int
    ) -> bool:
        """ABORTING -> completed ABORTED; False when the active record was gone already."""
        ...

    async def list_active(self, scope: str, name: str) -> list[Versioned[TxnRecord]]: ...

    async def list_completed(self, scope: str, name: str, limit: int) -> list[CompletedTxn]: ...

    async def get_committing(self, scope: str, name: str) -> CommittingRecord: ...

    async def next_commit_batch(self, scope: str, name: str, limit: int) -> CommitBatch | None: ...

    async def start_commit_batch(
        self, scope: str, name: str, batch: CommitBatch, expected_version: int | None
    ) -> int: ...

    async def set_rolling_epoch(
        self, scope: str, name: str, active_epoch: int, expected_version: int
    ) -> int: ...

    async def complete_commit_batch(
        self,
        scope: str,
        name: str,
        txns: Sequence[TxnId],
        expected_version: int,
        now_ms: int,
        state_version: int | None,
    ) -> int:
        """Completed COMMITTED records in, active records out, the batch record emptied and
        (with `state_version`) COMMITTING_TXN back to ACTIVE: one metadata transaction."""
        ...

    async def expired(self, buckets: Sequence[int], cutoff_ms: int, limit: int) -> list[ExpiredTxn]: ...

    async def next_expiry(self, buckets: Sequence[int]) -> int | None: ...

    async def gc_completed(self, cutoff_ms: int) -> int: ...


class SegmentStoreLocator(Protocol):
    """Where a segment's container lives: answers getURI without touching storage."""

    def endpoint_for_segment(self, qualified_name: str) -> tuple[str, int]: ...


@dataclass(frozen=True, slots=True)
class ControllerEndpoint:
    host: str
    port: int


class ClusterView(Protocol):
    async def live_controllers(self) -> Sequence[ControllerEndpoint]: ...
