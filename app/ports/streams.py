"""The ports the core needs: what services ask of storage, the segment store and time.

Services and workers import only these Protocols; `app.main` wires concrete adapters in.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from app.domain.cluster import (
    BucketCounts,
    BucketRow,
    BucketService,
    ClusterSettings,
    Fence,
    LeaderRecord,
    Member,
)
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

    async def ack(self, request_id: int, fence: Fence | None = None) -> None:
        """Idempotent. With a fence, deletes only while the fence's generation still owns the
        bucket: a takeover since then leaves the request to the new owner."""
        ...

    async def pending_ids_for_key(self, processor: Processor, scope: str, stream: str) -> list[int]:
        """Ids of the key's queued requests of `processor`, oldest first."""
        ...

    async def ack_many(self, request_ids: Sequence[int], fence: Fence | None = None) -> None:
        """Acknowledges requests another request's run has done the work of; fenced like `ack`."""
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

    def on_session_lost(self, callback: Callable[[], None]) -> None:
        """`callback()` the moment the session's connection is seen to close, so owners can
        stop work at once instead of at their next check."""
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
        self, scope: str, name: str, epoch: int, now_ms: int, lease_ms: int, max_exec_expiry: int
    ) -> CreatedTxn:
        """A new OPEN record under `epoch`, in the stream's request bucket (the database decides
        it). IllegalState while the stream is SEALING/SEALED."""
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


# --- segment-store hosts and the container map (reference §11) ---------------------------


@dataclass(frozen=True, slots=True, order=True)
class SegmentStoreHost:
    """A segment store's endpoint; the identity of a host in the container map."""

    host: str
    port: int

    def __str__(self) -> str:
        # Brackets keep an IPv6 literal's colons apart from the port's.
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


@dataclass(frozen=True, slots=True)
class RegisteredHost:
    address: SegmentStoreHost
    registered_at: int
    version: int


class ContainerMapStore(Protocol):
    """Registered segment stores and the container -> host map the leader maintains."""

    async def register_host(self, host: SegmentStoreHost, now_ms: int) -> bool:
        """Idempotent; True when the host was not registered before."""
        ...

    async def get_host(self, host: SegmentStoreHost) -> RegisteredHost:
        """Raises NotFound."""
        ...

    async def deregister_host(self, host: SegmentStoreHost, expected_version: int) -> None:
        """Conditional on the version; NotFound when the host is not registered."""
        ...

    async def list_hosts(self) -> list[RegisteredHost]:
        """Every registered host, in (host, port) order."""
        ...

    async def read_container_map(self) -> dict[int, Versioned[SegmentStoreHost]]:
        """Every stored container row with its version; empty before the first assignment."""
        ...

    async def replace_container_map(
        self, assignment: dict[int, SegmentStoreHost], expected: dict[int, int]
    ) -> None:
        """Makes the stored map equal `assignment` in one transaction, provided every row still
        has the version in `expected` (container -> version as read) and no row exists beyond
        those; otherwise nothing is written and WriteConflict is raised."""
        ...


# --- cluster ---------------------------------------------------------------------------------


class ClusterStore(Protocol):
    """Settings, membership, leadership and bucket ownership records (app/store/cluster.py)."""

    async def get_settings(self) -> ClusterSettings: ...

    async def configure_settings(self, counts: BucketCounts, container_count: int) -> ClusterSettings: ...

    async def ensure_buckets(self, service: BucketService, count: int) -> None: ...

    async def register_member(self, member: Member) -> int: ...

    async def heartbeat(self, member_id: str, now_ms: int, expected_version: int) -> int | None: ...

    async def members(self, now_ms: int, ttl_ms: int) -> list[tuple[Member, bool, int]]: ...

    async def remove_members(self, dead: Sequence[tuple[str, int]]) -> list[str]: ...

    async def get_leader(self) -> LeaderRecord | None: ...

    async def set_leader(self, member_id: str, now_ms: int, expected_version: int | None) -> LeaderRecord: ...

    async def bucket_rows(self, service: BucketService | None = None) -> list[BucketRow]: ...

    async def assign_buckets(
        self, service: BucketService, changes: Sequence[tuple[BucketRow, str]]
    ) -> int: ...

    async def claim_bucket(self, row: BucketRow, owner: str, now_ms: int) -> Fence: ...

    async def release_bucket(self, fence: Fence, owner: str) -> bool: ...

    async def fence_holds(self, fence: Fence) -> bool: ...


# --- auto-scaling (app/store/autoscale.py, app/services/autoscale.py, app/segmentstore/traffic.py) ---

from collections.abc import Mapping  # noqa: E402

from app.domain.autoscale import ReportResult, ScaleDirection  # noqa: E402


class AutoScaleStore(Protocol):
    """The report intake and the cold-segment markers (reference §5.3)."""

    async def check_segment(self, scope: str, name: str, segment_id: int) -> None:
        """NotFound for a missing stream or a segment the stream never had."""
        ...

    async def enqueue_report(self, request: NewRequest, segment_id: int) -> int:
        """Queues the AUTO_SCALE request after the same check as check_segment."""
        ...

    async def cold_markers(self, scope: str, name: str) -> dict[int, Versioned[int]]:
        """segment id -> (cold until, version)."""
        ...

    async def put_cold_marker(
        self, scope: str, name: str, segment_id: int, until: int, expected_version: int | None
    ) -> int:
        """Creates (None) or rewrites the marker at its version; WriteConflict on a lost race,
        NotFound for a missing stream."""
        ...

    async def delete_cold_markers(self, scope: str, name: str, markers: Mapping[int, int]) -> None:
        """All of them (segment id -> version read) or none (WriteConflict)."""
        ...


class ScaleReportSink(Protocol):
    """Where segment-store traffic reports go (Pravega's writer to `_requeststream`)."""

    async def report(
        self,
        scope: str,
        stream: str,
        segment_id: int,
        direction: ScaleDirection | str,
        timestamp: int,
        num_of_splits: int,
        silent: bool,
    ) -> ReportResult: ...


# --- watermarks (reference §6) -----------------------------------------------------------------

# Mapping is imported with the auto-scaling section above.
from app.domain.watermarks import SegmentRange, TrackedMark, Watermark, WriterMark  # noqa: E402


@dataclass(frozen=True, slots=True)
class StoredWatermark:
    """An emitted watermark with its per-stream sequence number (1, 2, ...)."""

    seq: int
    watermark: Watermark
    created_at: int


@dataclass(frozen=True, slots=True)
class WatermarkMember:
    """A stream of a watermark bucket with everything one round reads about it."""

    stream_id: int
    scope: str
    stream: str
    bucket: int
    timeout_ms: int  # the stream's timestampAggregationTimeout
    marks: tuple[TrackedMark, ...]
    latest: StoredWatermark | None


@dataclass(frozen=True, slots=True)
class WatermarkAppend:
    """Appends `watermark` as number after_seq + 1, only if after_seq is still the latest
    (0: none yet) and the fence still owns the stream's bucket."""

    stream_id: int
    fence: Fence
    after_seq: int
    watermark: Watermark
    created_at: int


@dataclass(frozen=True, slots=True)
class MarkChange:
    """A fenced write of one writer mark, conditional on the version the round read."""

    stream_id: int
    fence: Fence
    writer: str
    expected_version: int
    inactive_since: int | None = None  # the new value, for set_inactive_since


class WatermarkStore(Protocol):
    """Writer marks and emitted watermarks. A stream with at least one mark is a member of its
    watermark bucket. Batched calls serve one round over many streams in few round trips."""

    async def get_writer_mark(self, scope: str, name: str, writer: str) -> Versioned[WriterMark] | None:
        """None when the writer has no mark; NotFound when the stream is missing."""
        ...

    async def create_writer_mark(self, scope: str, name: str, writer: str, mark: WriterMark) -> int:
        """NotFound for a missing stream, WriteConflict when the mark exists already."""
        ...

    async def update_writer_mark(
        self, scope: str, name: str, writer: str, mark: WriterMark, expected_version: int
    ) -> int:
        """Conditional on the version; NotFound when the mark (or stream) is gone."""
        ...

    async def members(
        self, buckets: Sequence[int], bucket_count: int, after_stream_id: int, limit: int
    ) -> list[WatermarkMember]:
        """Member streams of `buckets` (the `_system` scope left out) with id > after_stream_id,
        in id order, at most `limit`."""
        ...

    async def member(self, scope: str, name: str, bucket_count: int) -> WatermarkMember | None:
        """The stream as a round reads it, None when it has no marks; NotFound when missing."""
        ...

    async def segment_ranges(self, wanted: Sequence[tuple[int, int]]) -> dict[tuple[int, int], SegmentRange]:
        """Key ranges of (stream id, segment id) pairs; unknown pairs are left out."""
        ...

    async def epoch_segments(
        self, wanted: Sequence[tuple[int, int]]
    ) -> dict[tuple[int, int], tuple[SegmentRange, ...]]:
        """The segments of (stream id, epoch) records; unknown pairs are left out."""
        ...

    async def append_watermarks(self, appends: Sequence[WatermarkAppend], keep: int) -> set[int]:
        """The stream ids whose append landed; each landed append trims its stream to the
        `keep` most recent watermarks."""
        ...

    async def remove_marks(self, removals: Sequence[MarkChange]) -> int:
        """Deletes the marks still at their version and fence; returns how many."""
        ...

    async def set_inactive_since(self, changes: Sequence[MarkChange]) -> int:
        """Sets each mark's `inactive_since` where version and fence still hold; how many."""
        ...

    async def list_watermarks(self, scope: str, name: str, limit: int) -> list[StoredWatermark]:
        """Newest first; NotFound when the stream is missing."""
        ...

    async def txn_commit_times(self, scope: str, name: str, txns: Sequence[TxnId]) -> list[tuple[str, int]]:
        """(writer id, commit time) of those of `txns` committed with both (reference §6.3)."""
        ...


class TxnWriterMarks(Protocol):
    """What the commit worker asks of watermarking when a batch commits (reference §6.3)."""

    async def commit_times(self, scope: str, name: str, txns: Sequence[TxnId]) -> dict[str, int]:
        """Each writer's latest commit time in the batch; read before the batch completes."""
        ...

    async def note_txn_marks(
        self, scope: str, name: str, times: Mapping[str, int], position: Mapping[int, int]
    ) -> None:
        """Notes each writer's mark at `position`; never raises (errors are logged)."""
        ...


# --- retention and subscribers (reference §4.3-§4.5, §7) ----------------------------------

import enum  # noqa: E402 - kept with the section that needs it

from app.domain.records import RetentionPolicy  # noqa: E402
from app.domain.retention import StreamCutRecord, SubscriberRecord  # noqa: E402


class RetentionWrite(enum.Enum):
    """What a fenced retention write did."""

    WRITTEN = "written"
    UNCHANGED = "unchanged"  # nothing to do: not newer than the latest record, nothing to purge
    FENCED = "fenced"  # the bucket was claimed again since the fence: this process must stop


@dataclass(frozen=True, slots=True)
class RetentionMember:
    """A stream with a retention policy in one of the asked retention buckets."""

    scope: str
    name: str
    bucket: int
    latest_recording_time: int | None  # None: its retention set is empty


@dataclass(frozen=True, slots=True)
class RetentionContext:
    """Everything one retention cycle reads about a stream, read together."""

    state: StreamState
    policy: RetentionPolicy | None
    active_epoch: int
    truncation: Versioned[TruncationRecord]
    records: tuple[StreamCutRecord, ...]  # the retention set, oldest first
    subscriber_cuts: tuple[dict[int, int], ...]  # published cuts, by subscriber name


class RetentionStore(Protocol):
    """Retention sets and subscribers. Writes of the retention worker carry the Fence of the
    stream's retention bucket and do nothing (FENCED) once its generation moved on. A missing
    stream raises NotFound."""

    async def list_members(self, buckets: Sequence[int], bucket_count: int) -> list[RetentionMember]:
        """Streams with a retention policy in `buckets`, one statement; internal (`_system`),
        creating, sealing and sealed streams are left out."""
        ...

    async def get_context(self, scope: str, name: str) -> RetentionContext: ...

    async def add_record(
        self, scope: str, name: str, record: StreamCutRecord, fence: Fence
    ) -> RetentionWrite:
        """Appends to the retention set only if newer than its latest record (else UNCHANGED)."""
        ...

    async def purge_records(self, scope: str, name: str, up_to_time: int, fence: Fence) -> RetentionWrite:
        """Removes the records recorded at or before `up_to_time`."""
        ...

    async def start_truncation(
        self,
        scope: str,
        name: str,
        record: TruncationRecord,
        expected_version: int,
        request: NewRequest,
        fence: Fence,
    ) -> RetentionWrite:
        """The truncate API's first step under a fence: the new (updating) truncation record at
        the version read, and its request in the same transaction. Raises WriteConflict."""
        ...

    async def list_subscribers(self, scope: str, name: str) -> list[Versioned[SubscriberRecord]]:
        """By subscriber name."""
        ...

    async def get_subscriber(
        self, scope: str, name: str, subscriber: str
    ) -> Versioned[SubscriberRecord] | None: ...

    async def insert_subscriber(self, scope: str, name: str, record: SubscriberRecord) -> bool:
        """False when the subscriber exists already (nothing is changed then)."""
        ...

    async def set_subscriber(
        self, scope: str, name: str, record: SubscriberRecord, expected_version: int
    ) -> int:
        """Replaces the subscriber's record at the version read; raises WriteConflict, or
        NotFound when the subscriber (or the stream) is gone."""
        ...

    async def delete_subscriber(self, scope: str, name: str, subscriber: str, expected_version: int) -> bool:
        """False when it was gone already; raises WriteConflict when it changed since read."""
        ...


# --- key-value tables ---------------------------------------------------------------------------

from app.domain.kvtables import KvtRecord, KvtState  # noqa: E402 - kept with the section that needs it


@dataclass(frozen=True, slots=True)
class KvtCreation:
    """What `create_kvt` found or wrote: `created` is False when a table of that name existed
    (then `record` is that table, and no request was queued)."""

    created: bool
    record: Versioned[KvtRecord]


class KvtStore(Protocol):
    """Key-value table records (app/store/kvtables.py). Writes name the table's incarnation
    (its id) and the version read; a lost race raises WriteConflict."""

    async def create_kvt(self, record: KvtRecord, request: NewRequest) -> KvtCreation:
        """Inserts the table in CREATING (its start number from the deleted-table record) and
        `request` in one transaction, unless the name is taken. NotFound when the scope is
        missing or being deleted."""
        ...

    async def get_kvt(self, scope: str, name: str) -> Versioned[KvtRecord]:
        """Raises NotFound."""
        ...

    async def set_kvt_state(
        self,
        scope: str,
        name: str,
        kvt_id: str,
        state: KvtState,
        expected_version: int,
        *,
        request: NewRequest | None = None,
    ) -> int:
        """Conditional on id and version; `request` is queued in the same transaction. NotFound
        when this incarnation is gone."""
        ...

    async def delete_kvt(self, scope: str, name: str, kvt_id: str, expected_version: int) -> bool:
        """Removes the row at the version read; False when this incarnation was gone already."""
        ...

    async def list_kvts(self, scope: str, after: str, limit: int) -> list[str]:
        """Names strictly after `after`, in name order, whatever their state. NotFound for a
        missing scope."""
        ...

    async def count_kvts(self, scope: str) -> int:
        """Tables in the scope in any state (deleteScope's SCOPE_NOT_EMPTY)."""
        ...

    async def get_deleted_kvt(self, scope: str, name: str) -> Versioned[int] | None:
        """The highest segment number of the last deleted table of the name."""
        ...

    async def put_deleted_kvt(
        self, scope: str, name: str, last_segment_number: int, expected_version: int | None
    ) -> int:
        """Inserts (None) or rewrites the record at its version; WriteConflict on a lost race."""
        ...


# --- reader groups ------------------------------------------------------------------------------

import uuid  # noqa: E402 - kept with the section that needs it

from app.domain.readergroups import ReaderGroupRecord  # noqa: E402 - kept with the section that needs it


@dataclass(frozen=True, slots=True)
class ReaderGroupCreation:
    """What `create_reader_group` found or wrote: `created` is False when a group of that name
    existed (then `record` is that group, and no request was queued)."""

    created: bool
    record: Versioned[ReaderGroupRecord]


class ReaderGroupStore(Protocol):
    """Reader-group records (app/store/readergroups.py). Every write is conditional on the
    version read (a lost race raises WriteConflict, a vanished group NotFound)."""

    async def create_reader_group(
        self, record: ReaderGroupRecord, request: NewRequest
    ) -> ReaderGroupCreation:
        """Inserts the group and `request` in one transaction unless the name is taken. NotFound
        when the scope is missing or being deleted."""
        ...

    async def get_reader_group(self, scope: str, name: str) -> Versioned[ReaderGroupRecord] | None: ...

    async def update_reader_group(
        self, record: ReaderGroupRecord, expected_version: int, *, request: NewRequest | None = None
    ) -> int:
        """Writes generation, state, configuration and the updating flag of the group with
        `record`'s id; `request` is queued in the same transaction. Returns the new version."""
        ...

    async def delete_reader_group(
        self, scope: str, name: str, reader_group_id: uuid.UUID, expected_version: int
    ) -> None:
        """Removes that incarnation of the group at the version read."""
        ...

    async def list_reader_groups(self, scope: str) -> list[str]:
        """Names in name order, whatever their state. NotFound for a missing scope."""
        ...

    async def count_reader_groups(self, scope: str) -> int:
        """Groups in the scope in any state (deleteScope's SCOPE_NOT_EMPTY)."""
        ...


# --- customized state views ---------------------------------------------------------------------

from collections.abc import Iterable  # noqa: E402 - kept with the section that needs it

from app.domain.state_views import (  # noqa: E402 - kept with the section that needs it
    AggregationBatch,
    CustomizedView,
    ParticipantSummary,
    ResourceStates,
    StateChange,
    StatesWrite,
    StateViewConfig,
    ViewChange,
    ViewKey,
    ViewSummary,
)


class StateViewStore(Protocol):
    """Participants' customized states, the aggregation config and the aggregated views
    (app/store/state_views.py). Every write is conditional on the version read (WriteConflict);
    the aggregator's batch is also fenced by the leader term."""

    async def resource_version(self, participant: str, state_name: str, resource: str) -> int | None: ...

    async def write_states(
        self,
        participant: str,
        state_name: str,
        resource: str,
        partitions: Mapping[str, str | None],
        *,
        replace: bool,
        expected_version: int | None,
        now_ms: int,
    ) -> StatesWrite:
        """`replace`: `partitions` is the whole new map; else a merge where None removes a
        partition. `expected_version` None: the record must not exist yet. A record left with
        no partition is removed. Every partition changed is logged for the aggregator."""
        ...

    async def participant_states(
        self, participant: str, state_name: str | None = None, resource: str | None = None
    ) -> list[ResourceStates]:
        """By state name, then resource."""
        ...

    async def participants(self) -> list[ParticipantSummary]: ...

    async def participant_versions(self, participant: str) -> dict[ViewKey, int]: ...

    async def remove_participant(self, participant: str, expected: Mapping[ViewKey, int]) -> int:
        """Every record of the participant, at the versions read, or nothing (WriteConflict)."""
        ...

    async def get_config(self) -> StateViewConfig: ...

    async def set_config(self, state_names: Sequence[str], expected_version: int, now_ms: int) -> int:
        """The new version; WriteConflict when the config moved since read."""
        ...

    async def list_views(self, state_name: str | None = None) -> list[ViewSummary]: ...

    async def get_view(self, state_name: str, resource: str) -> CustomizedView:
        """Raises NotFound."""
        ...

    async def view_version(self, state_name: str, resource: str) -> int | None: ...

    async def built_names(self) -> frozenset[str]:
        """The state names whose views the aggregator has built."""
        ...

    async def take_changes(self, limit: int) -> list[StateChange]:
        """The oldest change-log entries (at most `limit`), grouped by partition."""
        ...

    async def partition_states(self, keys: Iterable[tuple[str, str, str]]) -> dict[ViewKey, dict[str, str]]:
        """The given (state name, resource, partition) keys' current participant -> state maps,
        as JSON object text (folded where the data is); partitions nobody reports are absent."""
        ...

    async def name_states(self, state_name: str) -> dict[ViewKey, dict[str, str]]:
        """The same for every stored state of one state name."""
        ...

    async def view_versions(self, keys: Iterable[ViewKey]) -> dict[ViewKey, int]: ...

    async def views_of_names(self, state_names: Sequence[str]) -> dict[ViewKey, int]: ...

    async def apply_aggregation(
        self, term: int, batch: AggregationBatch, now_ms: int
    ) -> list[ViewChange] | None:
        """None (nothing written) when `term` is no longer the leader's."""
        ...
