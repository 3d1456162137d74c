"""Transaction records and rules (Pravega's): ids, lease limits, the ping and
commit/abort decision tables, and the epochs a rolling transaction writes.

Pure: the store and the workflows apply these decisions; nothing here does I/O.
"""

from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass

from app.domain.errors import InvalidInput
from app.domain.ids import number_of, segment_id
from app.domain.records import EpochRecord, SegmentRecord

_LOW_32 = 0xFFFFFFFF
_LOW_64 = 0xFFFFFFFFFFFFFFFF
_SIGNED_64 = 1 << 63


class TxnStatus(enum.Enum):
    """A transaction's status as stored; OPEN, COMMITTING and ABORTING are the active ones."""

    OPEN = "OPEN"
    COMMITTING = "COMMITTING"
    COMMITTED = "COMMITTED"
    ABORTING = "ABORTING"
    ABORTED = "ABORTED"
    UNKNOWN = "UNKNOWN"


ACTIVE_STATUSES = (TxnStatus.OPEN, TxnStatus.COMMITTING, TxnStatus.ABORTING)


class PingStatus(enum.Enum):
    OK = "OK"
    LEASE_TOO_LARGE = "LEASE_TOO_LARGE"
    MAX_EXECUTION_TIME_EXCEEDED = "MAX_EXECUTION_TIME_EXCEEDED"
    DISCONNECTED = "DISCONNECTED"
    COMMITTED = "COMMITTED"
    ABORTED = "ABORTED"
    UNKNOWN = "UNKNOWN"


class Outcome(enum.Enum):
    """What a commit or abort call answers (the wire's TxnStatus.Status)."""

    SUCCESS = "SUCCESS"
    FAILURE = "FAILURE"


class Decision(enum.Enum):
    """What to do with a commit or abort call, given the status found."""

    PROCEED = "PROCEED"  # OPEN: move to COMMITTING/ABORTING and queue the work
    ALREADY = "ALREADY"  # already on (or past) the requested path: SUCCESS, nothing written
    REFUSE = "REFUSE"  # crossing paths or unknown: FAILURE


def _signed(value: int) -> int:
    value &= _LOW_64
    return value - (1 << 64) if value >= _SIGNED_64 else value


@dataclass(frozen=True, slots=True, order=True)
class TxnId:
    """A transaction id as the wire carries it: two signed 64-bit halves of a UUID.

    `high = (epoch << 32) | counter_msb32`, `low = counter_lsb64`; the epoch the
    transaction was created on is the top 32 bits."""

    high: int
    low: int

    @staticmethod
    def make(epoch: int, counter: int) -> TxnId:
        if epoch < 0 or counter < 0:
            raise InvalidInput("a transaction id needs a non-negative epoch and counter")
        return TxnId(_signed((epoch << 32) | ((counter >> 64) & _LOW_32)), _signed(counter & _LOW_64))

    @property
    def epoch(self) -> int:
        return (self.high & _LOW_64) >> 32

    @property
    def uuid(self) -> uuid.UUID:
        return uuid.UUID(int=((self.high & _LOW_64) << 64) | (self.low & _LOW_64))

    def __str__(self) -> str:
        return str(self.uuid)

    @staticmethod
    def parse(text: str) -> TxnId:
        """From a UUID string (with or without dashes), as REST paths carry it."""
        try:
            value = uuid.UUID(text.strip()).int
        except ValueError:
            raise InvalidInput(f"{text!r} is not a transaction id (a UUID)") from None
        return TxnId(_signed(value >> 64), _signed(value))


@dataclass(frozen=True, slots=True)
class TxnLimits:
    """Lease bounds and record lifetimes; Pravega's defaults (10 s / 600 s leases, 24 h TTL)."""

    min_lease_ms: int = 10_000
    max_lease_ms: int = 600_000
    max_execution_bound_ms: int = 86_400_000
    completed_ttl_ms: int = 24 * 3_600_000
    # The Python client first pings right at lease expiry: aborting exactly at the lease
    # would race with it (client-calls.md caveat 8), so expiry is acted on this much later.
    timeout_grace_ms: int = 1_000

    def __post_init__(self) -> None:
        if not 0 < self.min_lease_ms <= self.max_lease_ms:
            raise ValueError("transaction leases need 0 < min <= max")
        if self.max_execution_bound_ms <= 0 or self.completed_ttl_ms <= 0 or self.timeout_grace_ms < 0:
            raise ValueError("transaction time bounds must be positive")

    def check_lease(self, lease_ms: int) -> None:
        if lease_ms < self.min_lease_ms:
            raise InvalidInput(f"lease {lease_ms} ms is below the minimum of {self.min_lease_ms} ms")
        if lease_ms > self.max_lease_ms:
            raise InvalidInput(f"lease {lease_ms} ms is above the maximum of {self.max_lease_ms} ms")

    def max_execution_time(self, lease_ms: int) -> int:
        return min(1000 * lease_ms, self.max_execution_bound_ms)

    def completed_batch(self, time_ms: int) -> int:
        return time_ms // self.completed_ttl_ms

    def gc_cutoff(self, now_ms: int) -> int:
        """Completed records older than this go: the current and the previous batch stay, so a
        record lives between one and two TTLs, as with Pravega's GC of batches."""
        return (self.completed_batch(now_ms) - 1) * self.completed_ttl_ms


DEFAULT_TXN_LIMITS = TxnLimits()


@dataclass(frozen=True, slots=True)
class TxnRecord:
    """An active transaction (OPEN, COMMITTING or ABORTING)."""

    txn: TxnId
    epoch: int
    status: TxnStatus
    creation_time: int
    lease_ms: int
    lease_expiry: int
    max_exec_expiry: int
    writer_id: str | None = None
    commit_time: int | None = None
    commit_order: int | None = None


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    txn: TxnId
    status: TxnStatus  # COMMITTED or ABORTED
    completion_time: int


def ping_decision(
    status: TxnStatus, lease_ms: int, now_ms: int, max_exec_expiry: int, limits: TxnLimits
) -> PingStatus:
    """pingTxn's checks for a found record: no longer open, lease too large, past the maximum
    execution time; OK means extend the lease. (The timeout service running and a missing
    active record are the caller's checks, made first.)"""
    if status in (TxnStatus.COMMITTING, TxnStatus.COMMITTED):
        return PingStatus.COMMITTED
    if status in (TxnStatus.ABORTING, TxnStatus.ABORTED):
        return PingStatus.ABORTED
    if lease_ms > limits.max_lease_ms:
        return PingStatus.LEASE_TOO_LARGE
    if now_ms + lease_ms > max_exec_expiry:
        return PingStatus.MAX_EXECUTION_TIME_EXCEEDED
    return PingStatus.OK


def ping_of_completed(status: TxnStatus | None) -> PingStatus:
    if status is TxnStatus.COMMITTED:
        return PingStatus.COMMITTED
    if status is TxnStatus.ABORTED:
        return PingStatus.ABORTED
    return PingStatus.UNKNOWN


def commit_decision(status: TxnStatus) -> Decision:
    """Commit of OPEN proceeds, of COMMITTING/COMMITTED succeeds again, else FAILURE; `status`
    UNKNOWN when neither record exists."""
    if status is TxnStatus.OPEN:
        return Decision.PROCEED
    if status in (TxnStatus.COMMITTING, TxnStatus.COMMITTED):
        return Decision.ALREADY
    return Decision.REFUSE


def abort_decision(status: TxnStatus) -> Decision:
    """Abort of OPEN proceeds, of ABORTING/ABORTED succeeds again, else FAILURE."""
    if status is TxnStatus.OPEN:
        return Decision.PROCEED
    if status in (TxnStatus.ABORTING, TxnStatus.ABORTED):
        return Decision.ALREADY
    return Decision.REFUSE


def txn_segments(txn_epoch: EpochRecord) -> tuple[SegmentRecord, ...]:
    """The txn epoch's segments re-labelled with the txn epoch (createTransaction's answer): the "generalised"
    parents a transaction's segments are named after, sorted by key."""
    return tuple(
        SegmentRecord(s.number, txn_epoch.epoch, s.creation_time, s.key_start, s.key_end)
        for s in txn_epoch.sorted_segments()
    )


def txn_parent_id(segment: int, txn_epoch: int) -> int:
    """The generalised parent in the txn epoch of a segment with the same number."""
    return segment_id(number_of(segment), txn_epoch)


def commits_in_place(active: EpochRecord, txn_epoch: EpochRecord) -> bool:
    """Merge straight into the active segments when the active epoch is the txn epoch or a
    duplicate of it; otherwise the commit rolls (two new epochs copy the txn's and the active one)."""
    return active.epoch == txn_epoch.epoch or active.reference_epoch == txn_epoch.reference_epoch


@dataclass(frozen=True, slots=True)
class RollingEpochs:
    """A rolling commit's epochs: the copy of the txn epoch the commits land in, then the copy of
    the active epoch."""

    txn_copy: EpochRecord  # epoch A+1
    active_copy: EpochRecord  # epoch A+2


def _duplicate(source: EpochRecord, epoch: int, time: int) -> EpochRecord:
    return EpochRecord(
        epoch=epoch,
        reference_epoch=source.reference_epoch,
        segments=tuple(
            SegmentRecord(s.number, epoch, time, s.key_start, s.key_end) for s in source.sorted_segments()
        ),
        creation_time=time,
    )


def rolling_epochs(active: EpochRecord, txn_epoch: EpochRecord, now_ms: int) -> RollingEpochs:
    time = max(active.creation_time + 1, now_ms)
    return RollingEpochs(
        txn_copy=_duplicate(txn_epoch, active.epoch + 1, time),
        active_copy=_duplicate(active, active.epoch + 2, time + 1),
    )
