"""The transaction store port: active and completed transaction records and the commit batch,
every write conditional on the version read."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from app.domain.records import Versioned
from app.domain.requests import NewRequest
from app.domain.txns import CompletedTxn, TxnId, TxnRecord, TxnStatus


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
    epoch: int  # the transaction's epoch
    stream_id: int  # the stream row's id (for get_epoch)


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
        self, scope: str, name: str, epoch: int | None, now_ms: int, lease_ms: int, max_exec_expiry: int
    ) -> CreatedTxn:
        """A new OPEN record under `epoch` (None: the current epoch's reference epoch, read by
        the same statement), in the stream's request bucket (the database decides it).
        IllegalState while the stream is SEALING/SEALED."""
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

    async def move_open_txn(
        self,
        scope: str,
        name: str,
        txn: TxnId,
        target: TxnStatus,
        request: NewRequest,
        *,
        writer_id: str | None = None,
        commit_time: int | None = None,
    ) -> int | None:
        """A commit's or abort's common case in one statement: move_txn of a transaction that is
        OPEN, at whatever version it is (the database re-checks OPEN on the row version it
        updates, so no concurrent change is overwritten). None when it is not OPEN or missing:
        the caller reads the record and decides."""
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

    async def abandon_commit_batch(
        self, scope: str, name: str, txns: Sequence[TxnId], expected_version: int, now_ms: int
    ) -> int:
        """A commit that failed finally: the batch's transactions completed ABORTED, the batch
        record emptied and COMMITTING_TXN back to ACTIVE, in one metadata transaction."""
        ...

    async def expired(self, buckets: Sequence[int], cutoff_ms: int, limit: int) -> list[ExpiredTxn]: ...

    async def next_expiry(self, buckets: Sequence[int]) -> int | None: ...

    async def gc_completed(self, cutoff_ms: int) -> int: ...
