"""Synthetic stream histories for `pgcontroller dev seed`: epochs from splits, merges and
rolling transactions, sealed sizes, retention cuts, truncations with their history, and
transactions with the details kept at completion, as table rows.

Pure and deterministic: a stream's rows depend only on the spec, the seed and its name, so any
stream can be regenerated alone. Every record is what the real workflows write
(scale_rules.new_epoch_record, txns.rolling_epochs, streamcuts.next_truncation and
completed_truncation, the completing statements of sql/queries/txns.sql), computed on plain
tuples because this runs millions of times. It lives in the store package beside seed.py, which
copies its rows, because the rows are in the tables' column order (seed.COLUMNS).
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from app.domain.containers import java_string_hash
from app.domain.errors import InvalidInput
from app.domain.ids import qualified_segment_name
from app.domain.names import is_valid_scope_or_stream_name, mark_stream_name
from app.domain.records import SEALED_SIZE_SHARD_EPOCHS, RetentionType, ScaleType
from app.domain.retention import DEFAULT_RETENTION_FREQUENCY_MS
from app.domain.scaling import uniform_key_ranges
from app.domain.txns import DEFAULT_TXN_LIMITS, TxnLimits

LONG_MAX = 2**63 - 1  # a retention policy given only its minimum has Long.MAX_VALUE as maximum
_LOW_32 = 0xFFFFFFFF

# A split never cuts a segment narrower than this: a random walk of splits must not reach
# key ranges whose doubles can no longer be halved.
_MIN_SPLIT_WIDTH = 2.0**-24
# A commit after a scale is processed soon after it: the rolled transaction's max execution
# time (at least 1000 x 10 s) then always covers creation in the old epoch to the commit.
_ROLL_DELAY_MAX_MS = 60_000
_PROBE_RECORD = 0  # a retention record is taken (detail: its index)
_PROBE_OPEN = 1  # an open transaction is created (detail: its index)
_ROLLED = (1, 1, 1, 2, 3)  # transactions a roll commits, drawn evenly
_LEASES_MS = (10_000, 30_000, 60_000, 120_000, 300_000, 600_000)
_RETENTION_MINIMA_MS = (3_600_000, 6 * 3_600_000, 24 * 3_600_000)
# Times the workflows take (log-normal: median ms, sigma), and the share of slow ones (1-20 s)
# on top: a commit from its request to completion, an abort likewise, a rolling commit's
# request before its roll, a truncation from its retention cycle to completion.
_COMMIT_LATENCY = (math.log(60.0), 0.9)
_ABORT_LATENCY = (math.log(25.0), 0.8)
_ROLL_WAIT = (math.log(30.0), 1.0)
_TRUNCATION_LATENCY = (math.log(150.0), 1.0)
_SLOW_SHARE = 0.02
_WRITER_SHARE = 0.9  # commits naming their writer (the others: clients that send no writer id)
_WRITER_TIME_SHARE = 0.5  # of those, commits given an event time (commit(timestamp))
# A committed transaction's commit_order before the store assigns it: the store takes values
# of the global sequence, in request-time order per stream, as the moves to COMMITTING would.
COMMIT_ORDER_PENDING = 0

Row = tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class ScaleMix:
    """Relative weights of the events that make epochs. A rolling transaction (two duplicate
    epochs, app/domain/txns.py rolling_epochs) can only follow a scale, so its realised share is
    somewhat lower; each roll commits transactions of its own (1-3), on top of the stream's
    `txns_per_stream`."""

    split: float = 50.0
    merge: float = 45.0
    rolling: float = 5.0


@dataclass(frozen=True, slots=True)
class TxnMix:
    """Relative weights of transaction end states; OPEN ones are still within their lease at the end."""

    committed: float = 80.0
    aborted: float = 15.0
    open: float = 5.0


@dataclass(frozen=True, slots=True)
class SeedSpec:
    """Everything a seeded history depends on besides database ids.

    The model, kept simple on purpose: every stream is ACTIVE with an auto-scaling policy and
    no scale or commit in flight; retention policies are TIME-based, recorded every frequency
    and truncated as the retention cycle would; completed transactions cover the whole span (a
    running controller's GC then removes those older than its TTL); commits in place complete
    before the next epoch, rolled ones just after their roll."""

    streams: int
    epochs_per_stream: int | None = None
    total_epochs: int | None = None  # spread evenly; takes the place of epochs_per_stream
    scopes: int = 1
    seed: int = 0
    scope_prefix: str = "seed"
    stream_prefix: str = "stream"
    start_ms: int = 0
    span_ms: int = 30 * 86_400_000
    scale_mix: ScaleMix = ScaleMix()
    txns_per_stream: int = 20
    txn_mix: TxnMix = TxnMix()
    max_segments: int = 8
    min_segments: int | None = None  # every stream's; None: drawn per stream (1-4)
    retention_fraction: float = 0.25
    retention_frequency_ms: int = DEFAULT_RETENTION_FREQUENCY_MS
    tag_pool: int = 10
    mark_streams: bool = True
    segment_store_rows: bool = True
    request_buckets: int = 16
    txn_limits: TxnLimits = DEFAULT_TXN_LIMITS

    def validate(self) -> None:
        if self.streams <= 0 or self.scopes <= 0:
            raise InvalidInput("streams and scopes must be positive")
        if (self.epochs_per_stream is None) == (self.total_epochs is None):
            raise InvalidInput("give exactly one of epochs per stream and total epochs")
        if self.epochs_per_stream is not None and self.epochs_per_stream <= 0:
            raise InvalidInput("epochs per stream must be positive (epoch 0 counts)")
        if self.total_epochs is not None and self.total_epochs < self.streams:
            raise InvalidInput(f"{self.total_epochs} epochs cannot give each of {self.streams} streams one")
        if self.span_ms <= 0 or self.start_ms < 0:
            raise InvalidInput("the time span must be positive and the start time not negative")
        if not 2 <= self.max_segments <= 10_000:
            raise InvalidInput(
                "max segments must lie in 2..10000 (2: a stream must be able to split and merge)"
            )
        if self.min_segments is not None and not 1 <= self.min_segments < self.max_segments:
            raise InvalidInput("min segments must lie in 1..max segments - 1")
        if self.txns_per_stream < 0 or self.tag_pool < 0 or self.request_buckets <= 0:
            raise InvalidInput("transactions and tags must not be negative, request buckets positive")
        if not 0.0 <= self.retention_fraction <= 1.0:
            raise InvalidInput("the retention fraction must lie in [0, 1]")
        if self.retention_frequency_ms <= 0:
            raise InvalidInput("the retention frequency must be positive")
        for name, weights in (("scale", self.scale_mix), ("transaction", self.txn_mix)):
            values = [getattr(weights, f) for f in weights.__slots__]
            if any(v < 0 for v in values) or sum(values) <= 0:
                raise InvalidInput(f"{name} mix weights must not be negative and must not all be 0")
        if self.scale_mix.split + self.scale_mix.merge <= 0:
            raise InvalidInput("a scale mix needs some split or merge weight")
        for slot in stream_slots(self, limit=1):
            for name in (slot.scope, slot.name, mark_stream_name(slot.name)):
                if not is_valid_scope_or_stream_name(name):
                    raise InvalidInput(f"{name!r} is not a valid scope or stream name")

    @property
    def end_ms(self) -> int:
        return self.start_ms + self.span_ms

    @property
    def epoch_count(self) -> int:
        if self.total_epochs is not None:
            return self.total_epochs
        assert self.epochs_per_stream is not None
        return self.epochs_per_stream * self.streams


@dataclass(frozen=True, slots=True)
class StreamSlot:
    """A stream to seed: where it lives and how many epoch records it gets (epoch 0 included)."""

    index: int
    scope: str
    name: str
    epochs: int


def scope_names(spec: SeedSpec) -> list[str]:
    width = len(str(spec.scopes - 1))
    return [f"{spec.scope_prefix}{j:0{width}d}" for j in range(spec.scopes)]


def stream_slots(spec: SeedSpec, *, limit: int | None = None) -> Iterator[StreamSlot]:
    """The streams in seeding order; names are zero-padded so they list in that order."""
    scopes = scope_names(spec)
    width = len(str(spec.streams - 1))
    count = spec.streams if limit is None else min(limit, spec.streams)
    for i in range(count):
        if spec.total_epochs is not None:
            epochs = spec.total_epochs // spec.streams + (1 if i < spec.total_epochs % spec.streams else 0)
        else:
            assert spec.epochs_per_stream is not None
            epochs = spec.epochs_per_stream
        yield StreamSlot(i, scopes[i % spec.scopes], f"{spec.stream_prefix}{i:0{width}d}", epochs)


@dataclass(frozen=True, slots=True)
class StreamIds:
    """Database ids reserved for one slot, and the first segment numbers (a re-created name
    numbers its segments after those of the deleted stream, whose highest number is kept)."""

    stream_id: int
    mark_stream_id: int | None = None
    first_number: int = 0
    mark_first_number: int = 0


@dataclass
class Rows:
    """Rows waiting to be written, one list per table, in the column order the store declares
    (app/dev/seed.py COLUMNS). Transaction ids are ordinals into the counter values the store
    reserves for this batch (`txn_ids` of them), so the global counter stays the only source;
    likewise a commit's commit_order is COMMIT_ORDER_PENDING until the store numbers it."""

    streams: list[Row] = field(default_factory=list)
    stream_configs: list[Row] = field(default_factory=list)
    stream_states: list[Row] = field(default_factory=list)
    stream_current_epochs: list[Row] = field(default_factory=list)
    stream_truncations: list[Row] = field(default_factory=list)
    stream_epoch_transitions: list[Row] = field(default_factory=list)
    stream_tags: list[Row] = field(default_factory=list)
    epochs: list[Row] = field(default_factory=list)
    segments: list[Row] = field(default_factory=list)
    sealed_size_shards: list[Row] = field(default_factory=list)
    retention_set: list[Row] = field(default_factory=list)
    truncation_history: list[Row] = field(default_factory=list)
    completed_txns: list[Row] = field(default_factory=list)
    completed_txn_details: list[Row] = field(default_factory=list)
    transactions: list[Row] = field(default_factory=list)
    embedded_segments: list[Row] = field(default_factory=list)
    # An open transaction's segments (one per segment of its epoch): (txn ordinal, txn high bits,
    # parent segment name, length, created at); the name needs the transaction id, so the store
    # completes these rows.
    txn_segments: list[Row] = field(default_factory=list)
    txn_ids: int = 0
    user_epochs: int = 0  # epoch rows of user streams (mark streams' epoch 0 not counted)

    TABLES = (
        "streams",
        "stream_configs",
        "stream_states",
        "stream_current_epochs",
        "stream_truncations",
        "stream_epoch_transitions",
        "stream_tags",
        "epochs",
        "segments",
        "sealed_size_shards",
        "retention_set",
        "truncation_history",
        "completed_txns",
        "completed_txn_details",
        "transactions",
        "embedded_segments",
        "txn_segments",
    )

    def table(self, name: str) -> list[Row]:
        rows: list[Row] = getattr(self, name)
        return rows

    def next_txn(self) -> int:
        ordinal = self.txn_ids
        self.txn_ids += 1
        return ordinal

    def take(self) -> Rows:
        """The buffered rows as a new object; this one starts empty (generators keep writing here)."""
        taken = Rows(txn_ids=self.txn_ids, user_epochs=self.user_epochs)
        for name in self.TABLES:
            setattr(taken, name, self.table(name))
            setattr(self, name, [])
        self.txn_ids = self.user_epochs = 0
        return taken


def cut_json(cut: dict[int, int]) -> str:
    """A stream cut as stored (app/store/rows.cut_to_json, serialised)."""
    return "{" + ",".join(f'"{k}":{v}' for k, v in cut.items()) + "}"


@dataclass(frozen=True, slots=True)
class _RetentionPlan:
    """Where the retention cycles of a TIME policy (app/services/retention.py) leave the stream
    at the end: records every frequency + 1 ms (a record needs strictly more than the frequency),
    truncation at the newest record at least `minimum` old, purging it and everything older."""

    times: tuple[int, ...]  # record k (1-based) at times[k - 1]
    truncated_at: int  # record index of the last truncation, 0 = never truncated
    keep_from: int  # first record index still in the set
    lag: int  # the cycle truncating at record k is the one taking record k + lag
    step: int  # time between cycles

    @staticmethod
    def of(first: int, frequency: int, minimum: int, end: int) -> _RetentionPlan:
        step = frequency + 1
        count = 0 if first > end else (end - first) // step + 1
        times = tuple(first + k * step for k in range(count))
        lag = -(-minimum // step)  # records from the truncation point to the newest
        truncated = max(0, count - lag)
        return _RetentionPlan(times, truncated, truncated + 1, lag, step)

    def truncation_cycle(self, k: int) -> int:
        """When the cycle truncating at record k ran: record k was the newest at least the
        minimum old then, each cycle truncating one record further than the one before."""
        return self.times[k + self.lag - 1]


class StreamHistory:
    """Generates one stream, epoch by epoch, into a Rows buffer; `advance` can stop at any
    epoch boundary so one huge stream never has to fit in memory.

    The active epoch is held as parallel lists (ids, key starts, key ends, creation times,
    write rates) sorted by key start. A scale builds new lists and never mutates old ones, so
    an epoch row takes them as they are and the previous epoch stays readable for a roll.

    Two random streams: `_rng` draws the history (epochs, sizes, transactions and their
    completion times), `_aux` what only the reporting side sees (request times, writers, the
    truncations' completion times), so the history stays the same when those are refined.
    """

    def __init__(self, spec: SeedSpec, slot: StreamSlot, ids: StreamIds, rows: Rows) -> None:
        self._spec, self._slot, self._rows = spec, slot, rows
        rng = random.Random(f"{spec.seed}/{slot.scope}/{slot.name}")
        self._rng = rng
        self._aux = random.Random(f"{spec.seed}/{slot.scope}/{slot.name}/details")
        self._sid = ids.stream_id
        start, end = spec.start_ms, spec.end_ms
        # Streams appear during the first tenth of the span, then live to its end.
        self.creation_time = ct = start + rng.randrange(max(1, spec.span_ms // 10))
        self.end_time = end
        drawn = rng.randint(1, min(4, spec.max_segments - 1))  # drawn always: the rest stays the same
        self.min_segments = drawn if spec.min_segments is None else spec.min_segments
        self.scale_type = rng.choice(
            (ScaleType.BY_RATE_IN_KBYTES_PER_SEC, ScaleType.BY_RATE_IN_EVENTS_PER_SEC)
        )
        self.target_rate = rng.choice((100, 1000, 5000))
        self.scale_factor = rng.choice((2, 2, 3))
        self.retention_min = rng.choice(_RETENTION_MINIMA_MS) if rng.random() < spec.retention_fraction else 0
        count = rng.randint(0, 3) if spec.tag_pool > 0 else 0
        self.tags = sorted({f"tag-{rng.randrange(spec.tag_pool)}" for _ in range(count)})
        self.name_hash = java_string_hash(f"{slot.scope}/{slot.name}")
        self._bucket = (self.name_hash & 0x7FFFFFFF) % spec.request_buckets

        ranges = uniform_key_ranges(self.min_segments)
        rate = rng.uniform(0.05, 5.0)  # bytes per ms over the whole key space
        self._ids = [ids.first_number + i for i in range(len(ranges))]
        self._ks = [r[0] for r in ranges]
        self._ke = [r[1] for r in ranges]
        self._cts = [ct] * len(ranges)
        self._rates = [rate * (r[1] - r[0]) for r in ranges]
        self._next_number = ids.first_number + len(ranges)
        self._epoch = self._ref = 0
        self._ct = ct  # creation time of the newest epoch (the active one, or A+2 of a roll)
        self._prev_ct = ct  # creation time of the epoch the active one replaced
        self._splits = self._merges = 0
        self._last_was_scale = False
        # The epoch the active one replaced (ids, key starts, key ends): a roll copies it.
        self._prev: tuple[list[int], list[float], list[float]] = ([], [], [])
        self._prev_ref = 0
        self._scales = self._rolls = self._committed = 0
        self._cum_sealed = 0  # bytes of every sealed segment so far (what size_till counts)
        self._shards: dict[int, dict[int, int]] = {}  # sealed sizes per shard, until the shard is final
        self._shard_live: dict[int, int] = {0: len(ranges)}  # unsealed segments per shard

        mix = spec.scale_mix
        self._p_roll = mix.rolling / (mix.split + mix.merge + mix.rolling)
        self._p_split = mix.split / (mix.split + mix.merge)

        # Transactions: open ones at chosen times near the end; the others spread over the
        # active intervals at a constant rate, the fraction carried from interval to interval.
        limits = spec.txn_limits
        self._leases = [x for x in _LEASES_MS if limits.min_lease_ms <= x <= limits.max_lease_ms]
        if not self._leases:
            self._leases = [limits.min_lease_ms]
        self._writers = 1 + self._aux.randrange(4)
        tmix = spec.txn_mix
        open_count = round(spec.txns_per_stream * tmix.open / (tmix.committed + tmix.aborted + tmix.open))
        self._txn_rate = (spec.txns_per_stream - open_count) / max(1, end - ct)
        self._txn_carry = 0.0
        closed = tmix.committed + tmix.aborted
        self._p_commit = tmix.committed / closed if closed > 0 else 1.0
        # Probes: times at which the active epoch is looked at (retention records, creation of
        # open transactions), resolved in time order as the history passes them.
        probes: list[tuple[int, int, int]] = []  # (time, kind, detail)
        self._open_leases: list[int] = []
        for _ in range(open_count):
            lease = rng.choice(self._leases)
            low = max(ct, end - (limits.max_execution_time(lease) - lease))
            if low < end:
                probes.append((rng.randrange(low, end), _PROBE_OPEN, len(self._open_leases)))
                self._open_leases.append(lease)
        self._retention: _RetentionPlan | None = None
        # Segments from the previous truncation cut on (from epoch 0 before the first), while
        # truncations are to come: what the next one deletes is among them.
        self._between: set[int] | None = None
        # The last truncation: its cut and span epoch; what all of them deleted and the size
        # truncated so far (the completed record, streamcuts.completed_truncation).
        self._truncation: tuple[dict[int, int], int] | None = None
        self._deleted: list[int] = []
        self._size_till = 0
        if self.retention_min:
            freq = spec.retention_frequency_ms
            plan = _RetentionPlan.of(ct + 1 + rng.randrange(freq), freq, self.retention_min, end)
            self._retention = plan
            for k in range(1, len(plan.times) + 1):
                probes.append((plan.times[k - 1], _PROBE_RECORD, k))
            if plan.truncated_at > 0:
                self._between = set(self._ids)
        probes.sort()
        self._probes = probes
        self._probe = 0
        self._done = False

        rows.streams.append((self._sid, slot.scope, slot.name, ct, self.name_hash))
        self._emit_epoch([], self._ids)
        if ids.mark_stream_id is not None:
            self._emit_mark_stream(ids.mark_stream_id, ids.mark_first_number)

    # --- driving ---------------------------------------------------------------------------------

    @property
    def done(self) -> bool:
        return self._done

    def advance(self, max_epochs: int) -> bool:
        """Writes up to about `max_epochs` more epochs (a roll writes two); True once the stream
        is complete, its final rows included."""
        target = self._slot.epochs - 1
        rng = self._rng
        budget = max_epochs
        while budget > 0 and self._epoch < target:
            # The time left shared among the epochs left, jittered: the history ends before the
            # span does unless there are more epochs than milliseconds.
            share = (self.end_time - self._ct) / (target - self._epoch + 1)
            when = self._ct + 1 + int(share * (0.5 + rng.random()))
            if self._last_was_scale and self._epoch + 2 <= target and rng.random() < self._p_roll:
                self._roll(max(self._ct + 1, min(when, self._ct + _ROLL_DELAY_MAX_MS)), rng.choice(_ROLLED))
                budget -= 2
            else:
                self._scale(when)
                budget -= 1
        if self._epoch >= target and not self._done:
            self._finish()
        return self._done

    # --- events --------------------------------------------------------------------------------

    def _scale(self, when: int) -> None:
        """A split of one segment or a merge of two neighbours (scale_rules.new_epoch_record)."""
        rng = self._rng
        ids, ks, ke, cts, rates = self._ids, self._ks, self._ke, self._cts, self._rates
        count = len(ids)
        time = max(when, self._ct + 1)
        self._pass(time)
        epoch = self._epoch + 1
        first = self._next_number  # above every number so far: numbers only grow, never reused
        base = epoch << 32
        pieces = 2 if self.scale_factor == 2 else 2 + int(rng.random() < 0.5)
        if count + pieces - 1 > self._spec.max_segments:
            pieces = 2
        split = count <= self.min_segments or (
            count + 1 <= self._spec.max_segments and rng.random() < self._p_split
        )
        i = rng.randrange(count) if split else rng.randrange(count - 1)
        if split and ke[i] - ks[i] < _MIN_SPLIT_WIDTH:
            i = max(range(count), key=lambda j: ke[j] - ks[j])
            if ke[i] - ks[i] < _MIN_SPLIT_WIDTH:
                split, i = False, min(i, count - 2)
        if split:
            # scale_rules.split_ranges: neighbours share one computed double, the last end is the segment's.
            start, stop, rate = ks[i], ke[i], rates[i] / pieces
            delta = (stop - start) / pieces
            starts = [start + delta * j for j in range(pieces)]
            new_ids = [base | (first + j) for j in range(pieces)]
            self._ids = ids[:i] + new_ids + ids[i + 1 :]
            self._ks = ks[:i] + starts + ks[i + 1 :]
            self._ke = ke[:i] + starts[1:] + [stop] + ke[i + 1 :]
            self._cts = cts[:i] + [time] * pieces + cts[i + 1 :]
            self._rates = rates[:i] + [rate * (0.5 + rng.random()) for _ in range(pieces)] + rates[i + 1 :]
            self._next_number = first + pieces
            self._splits += 1
            sealed = [ids[i]]
            self._seal(ids[i], ks[i], ke[i], cts[i], epoch, int(rates[i] * (time - cts[i])))
        else:
            new_ids = [base | first]
            self._ids = ids[:i] + new_ids + ids[i + 2 :]
            self._ks = [*ks[:i], ks[i], *ks[i + 2 :]]
            self._ke = [*ke[:i], ke[i + 1], *ke[i + 2 :]]
            self._cts = [*cts[:i], time, *cts[i + 2 :]]
            self._rates = [
                *rates[:i],
                (rates[i] + rates[i + 1]) * (0.8 + 0.4 * rng.random()),
                *rates[i + 2 :],
            ]
            self._next_number = first + 1
            self._merges += 1
            sealed = [ids[i], ids[i + 1]] if ids[i] < ids[i + 1] else [ids[i + 1], ids[i]]
            for j in (i, i + 1):
                self._seal(ids[j], ks[j], ke[j], cts[j], epoch, int(rates[j] * (time - cts[j])))
        self._prev, self._prev_ref, self._prev_ct = (ids, ks, ke), self._ref, self._ct
        self._epoch, self._ref, self._ct = epoch, epoch, time
        self._created(new_ids, epoch)
        self._emit_epoch(sealed, new_ids)
        self._last_was_scale = True
        self._scales += 1

    def _roll(self, time: int, txn_count: int) -> None:
        """A rolling commit (app/domain/txns.py rolling_epochs) at `time`, committing `txn_count`
        transactions of the txn epoch E, the previous active epoch's reference: A+1 copies E and
        holds the commits, A+2 copies A and becomes active."""
        rng = self._rng
        ids, ks, ke, cts, rates = self._ids, self._ks, self._ke, self._cts, self._rates
        self._pass(time + 1)
        a, txn_epoch = self._epoch, self._prev_ref
        for _ in range(txn_count):
            self._rolled_commit(txn_epoch, time, time + 1 + rng.randrange(50))
        for j in range(len(ids)):
            self._seal(ids[j], ks[j], ke[j], cts[j], a + 1, int(rates[j] * (time - cts[j])))
        # E has the numbers and ranges of the previous active epoch (a duplicate keeps them).
        prev_ids, prev_ks, prev_ke = self._prev
        copy_base, active_base = (a + 1) << 32, (a + 2) << 32
        copies = [copy_base | (s & _LOW_32) for s in prev_ids]
        self._created(copies, a + 1)
        for j, segment in enumerate(copies):
            self._seal(segment, prev_ks[j], prev_ke[j], time, a + 2, rng.randrange(1, 65_536) * txn_count)
        renewed = [active_base | (s & _LOW_32) for s in ids]
        self._created(renewed, a + 2)
        self._splits = self._merges = 0  # a duplicate carries no split or merge counts (txns._duplicate)
        self._epoch, self._ref, self._ct = a + 1, txn_epoch, time
        self._ids, self._ks, self._ke, self._cts = copies, prev_ks, prev_ke, [time] * len(copies)
        self._emit_epoch([], [])
        # Rolls only follow scales, so the rolled-over active epoch A is its own reference.
        self._epoch, self._ref, self._ct = a + 2, a, time + 1
        self._ids, self._ks, self._ke, self._cts = renewed, ks, ke, [time + 1] * len(renewed)
        self._emit_epoch([], [])
        self._last_was_scale = False
        self._rolls += 1
        self._committed += 1

    # --- time passing ----------------------------------------------------------------------------

    def _pass(self, until: int) -> None:
        """The active epoch ends at `until` (exclusive): its transactions and the probes before
        then are generated against it."""
        if until > self._ct:
            self._txn_carry += self._txn_rate * (until - self._ct)
            if self._txn_carry >= 1.0:
                count = int(self._txn_carry)
                self._txn_carry -= count
                self._txns_in(self._ct, until, count)
        probes = self._probes
        while self._probe < len(probes) and probes[self._probe][0] < until:
            time, kind, detail = probes[self._probe]
            self._probe += 1
            if kind == _PROBE_OPEN:
                self._open_txn(self._open_leases[detail], time)
            else:
                self._record(detail, time)

    def _txns_in(self, low: int, high: int, count: int) -> None:
        rng, end = self._rng, self.end_time
        for _ in range(count):
            created = rng.randrange(low, high)
            lease = rng.choice(self._leases)
            if rng.random() < self._p_commit and created + 1 < high:
                # Committed in place: before the next epoch, within the lease (no ping needed).
                done = created + 1 + rng.randrange(min(lease - 1, high - 1 - created))
                requested = max(created + 1, done - self._took(_COMMIT_LATENCY))
                self._completed(self._ref, "COMMITTED", done, created, lease, requested)
                self._committed += 1
            else:
                grace = self._spec.txn_limits.timeout_grace_ms
                timeout = created + lease + grace + rng.randrange(400)
                if rng.random() < 0.5 and timeout <= end:
                    # Timed out: the sweeper asked for the abort once the lease and grace ran out.
                    done, earliest = timeout, created + lease + grace
                else:
                    done = created + 1 + rng.randrange(max(1, min(lease - 1, end - created)))
                    earliest = created + 1
                requested = max(earliest, done - self._took(_ABORT_LATENCY))
                self._completed(self._ref, "ABORTED", done, created, lease, requested)

    def _rolled_commit(self, txn_epoch: int, roll: int, done: int) -> None:
        """A commit of a transaction of the epoch the active one replaced, asked for after the
        scale (so the commit processor found its epoch gone and rolled at `roll`); created
        while that epoch was active, within one lease of the scale, pinged if the wait for the
        commit outlasted its lease."""
        aux, scaled = self._aux, self._ct
        lease = aux.choice(self._leases)
        created = scaled - 1 - aux.randrange(min(lease, scaled - self._prev_ct))
        # Within its maximum execution time, however short the leases (then it is the roll that
        # waited, as happens when the commit processor is behind).
        latest = created + self._spec.txn_limits.max_execution_time(lease) - 1
        requested = max(scaled, min(roll - self._took(_ROLL_WAIT), latest))
        pinged = None
        if requested - created >= lease:
            pinged = requested - aux.randrange(min(lease, requested - created + 1))
        self._completed(txn_epoch, "COMMITTED", done, created, lease, requested, pinged)

    def _took(self, latency: tuple[float, float]) -> int:
        """How long a workflow step took, in ms: log-normal, with a share of slow ones."""
        aux = self._aux
        if aux.random() < _SLOW_SHARE:
            return aux.randrange(1_000, 20_000)
        return int(aux.lognormvariate(*latency))

    def _completed(
        self,
        epoch: int,
        status: str,
        time: int,
        created: int,
        lease: int,
        requested: int,
        pinged: int | None = None,
    ) -> None:
        """A completed record and the details its completion kept of the active record (the
        completing statements of sql/queries/txns.sql): requested at `requested`, last pinged
        at `pinged` (None: never)."""
        sid, high, txn = self._sid, epoch << 32, self._rows.next_txn()
        self._rows.completed_txns.append((sid, high, txn, status, time))
        max_exec = created + self._spec.txn_limits.max_execution_time(lease)
        expiry = min((created if pinged is None else pinged) + lease, max_exec)
        writer = writer_time = order = None
        if status == "COMMITTED":
            order = COMMIT_ORDER_PENDING
            aux = self._aux
            if aux.random() < _WRITER_SHARE:
                writer = f"writer-{aux.randrange(self._writers)}"
                if aux.random() < _WRITER_TIME_SHARE:
                    writer_time = max(0, requested - aux.randrange(2_000))
        self._rows.completed_txn_details.append(
            (sid, high, txn, epoch, created, lease, expiry, max_exec, writer, writer_time, order, requested)
        )

    def _open_txn(self, lease: int, created: int) -> None:
        """An OPEN transaction on the active epoch's reference (where createTransaction puts it), pinged
        so that its lease runs past the end and within its maximum execution time (a ping never
        extends a lease beyond it)."""
        end = self.end_time
        max_exec = created + self._spec.txn_limits.max_execution_time(lease)
        ping = self._rng.randint(max(created, end - lease + 1), min(end, max_exec - lease))
        pings = 0 if ping == created else max(1, (ping - created) * 2 // lease)
        txn = self._rows.next_txn()
        if self._spec.segment_store_rows:
            scope, name, ref = self._slot.scope, self._slot.name, self._ref
            self._rows.txn_segments.extend(
                (
                    txn,
                    ref << 32,
                    qualified_segment_name(scope, name, ref << 32 | sid & _LOW_32),
                    self._rng.randrange(4096),
                    created,
                )
                for sid in self._ids
            )
        self._rows.transactions.append(
            (
                self._sid,
                self._ref << 32,
                txn,
                self._ref,
                self._bucket,
                "OPEN",
                created,
                lease,
                ping + lease,
                max_exec,
                None,
                None,
                None,
                None,
                pings,
            )
        )

    def _record(self, k: int, time: int) -> None:
        """Retention record k: the tail cut at `time` (the active segments' write offsets) and
        the bytes from the epoch-0 head up to it. A record truncated at later is purged then,
        and its truncation is in the history."""
        plan = self._retention
        assert plan is not None
        cut = {
            sid: int(rate * (time - ct))
            for sid, ct, rate in zip(self._ids, self._cts, self._rates, strict=True)
        }
        size = self._cum_sealed + sum(cut.values())
        if k >= plan.keep_from:
            self._rows.retention_set.append((self._sid, time, size, cut_json(cut)))
            return
        # streamcuts.next_truncation: what lies between the previous cut and this one, minus
        # this cut (nothing between them was deleted before).
        between = self._between
        assert between is not None
        deleted = sorted(between - cut.keys())
        self._between = set(cut) if k < plan.truncated_at else None
        # Completed by the cycle that truncated at this record, within that cycle.
        cycle = plan.truncation_cycle(k)
        completed = min(cycle + self._took(_TRUNCATION_LATENCY), cycle + plan.step - 1, self.end_time)
        self._rows.truncation_history.append(
            (self._sid, completed, cut_json(cut), size - self._size_till, size, deleted)
        )
        self._deleted.extend(deleted)
        self._size_till = size
        # The span (app/domain/streamcuts.py): the newest epoch among the cut's ids holds every one of them.
        self._truncation = (cut, max(sid >> 32 for sid in cut))

    # --- segments and sizes --------------------------------------------------------------------

    def _created(self, created: list[int], epoch: int) -> None:
        shard = epoch // SEALED_SIZE_SHARD_EPOCHS
        self._shard_live[shard] = self._shard_live.get(shard, 0) + len(created)
        if self._between is not None:
            self._between.update(created)

    def _seal(self, sid: int, ks: float, ke: float, ct: int, sealed_epoch: int, size: int) -> None:
        created_in = sid >> 32
        self._rows.segments.append((self._sid, sid, sid & _LOW_32, created_in, ct, ks, ke, sealed_epoch, 1))
        self._cum_sealed += size
        shard = created_in // SEALED_SIZE_SHARD_EPOCHS
        sizes = self._shards.get(shard)
        if sizes is None:
            sizes = self._shards[shard] = {}
        sizes[sid] = size
        live = self._shard_live[shard] - 1
        self._shard_live[shard] = live
        # A shard is final once nothing created in it is live and no epoch of it is to come.
        if live == 0 and shard < sealed_epoch // SEALED_SIZE_SHARD_EPOCHS:
            self._emit_shard(shard)

    def _emit_shard(self, shard: int) -> None:
        sizes = self._shards.pop(shard, None)
        self._shard_live.pop(shard, None)
        if sizes:
            self._rows.sealed_size_shards.append((self._sid, shard, cut_json(sizes), 0))

    # --- rows ----------------------------------------------------------------------------------

    def _emit_epoch(self, sealed: list[int], created: list[int]) -> None:
        self._rows.epochs.append(
            (
                self._sid,
                self._epoch,
                self._ref,
                self._ct,
                self._splits,
                self._merges,
                self._ids,
                self._ks,
                self._ke,
                self._cts,
                sealed,
                created,
            )
        )
        self._rows.user_epochs += 1

    def _finish(self) -> None:
        end = self.end_time
        self._pass(end + 1)
        if self._txn_carry >= 0.5 and end > self._ct:
            self._txns_in(self._ct, end, 1)
        rows, sid, scope, name = self._rows, self._sid, self._slot.scope, self._slot.name
        active = list(zip(self._ids, self._ks, self._ke, self._cts, self._rates, strict=True))
        for seg, ks, ke, ct, _rate in active:
            rows.segments.append((sid, seg, seg & _LOW_32, seg >> 32, ct, ks, ke, None, 0))
        for shard in sorted(self._shards):
            self._emit_shard(shard)
        retention = self._retention is not None
        rows.stream_configs.append(
            (
                sid,
                int(self.scale_type),
                self.target_rate,
                self.scale_factor,
                self.min_segments,
                int(RetentionType.TIME) if retention else None,
                self.retention_min,
                LONG_MAX if retention else 0,
                self.tags,
                0,
                0,
                False,
                0,
            )
        )
        truncations = self._retention.truncated_at if self._retention is not None else 0
        # Versions count the conditional writes the real workflows would have made.
        moves = self._scales + self._rolls + truncations + self._committed
        rows.stream_states.append((sid, "ACTIVE", 1 + 2 * moves))
        rows.stream_current_epochs.append((sid, self._epoch, self._scales + self._rolls))
        if self._truncation is not None:
            cut, span_epoch = self._truncation
            span = dict.fromkeys(cut, span_epoch)
            deleted = sorted(self._deleted)
            rows.stream_truncations.append(
                (sid, cut_json(cut), cut_json(span), deleted, [], self._size_till, False, 2 * truncations)
            )
        else:
            rows.stream_truncations.append((sid, "{}", "{}", [], [], 0, False, 0))
        rows.stream_epoch_transitions.append((sid, -1, 0, [], [], [], [], 2 * self._scales))
        rows.stream_tags.extend((scope, tag, name, sid) for tag in self.tags)
        if self._spec.segment_store_rows:
            truncated = self._truncation[0] if self._truncation is not None else {}
            for seg, _ks, _ke, ct, rate in active:
                length = max(0, int(rate * (end - ct)))
                rows.embedded_segments.append(
                    (
                        qualified_segment_name(scope, name, seg),
                        "stream",
                        length,
                        min(length, truncated.get(seg, 0)),
                        False,
                        int(self.scale_type),
                        self.target_rate,
                        0,
                        0,
                        ct,
                        0,
                    )
                )
        self._done = True

    def _emit_mark_stream(self, mark_id: int, first_number: int) -> None:
        """The watermark stream every createStream makes beside the stream
        (names.mark_stream_name): fixed, one segment, ACTIVE, never tag-indexed."""
        rows, scope, ct = self._rows, self._slot.scope, self.creation_time
        mark = mark_stream_name(self._slot.name)
        segment = first_number
        rows.streams.append((mark_id, scope, mark, ct, java_string_hash(f"{scope}/{mark}")))
        rows.stream_configs.append((mark_id, 0, 0, 0, 1, None, 0, 0, [], 0, 0, False, 0))
        rows.stream_states.append((mark_id, "ACTIVE", 1))
        rows.stream_current_epochs.append((mark_id, 0, 0))
        rows.stream_truncations.append((mark_id, "{}", "{}", [], [], 0, False, 0))
        rows.stream_epoch_transitions.append((mark_id, -1, 0, [], [], [], [], 0))
        rows.epochs.append((mark_id, 0, 0, ct, 0, 0, [segment], [0.0], [1.0], [ct], [], [segment]))
        rows.segments.append((mark_id, segment, segment, 0, ct, 0.0, 1.0, None, 0))
        if self._spec.segment_store_rows:
            rows.embedded_segments.append(
                (qualified_segment_name(scope, mark, segment), "stream", 0, 0, False, 0, 0, 0, 0, ct, 0)
            )
