"""The segment store's traffic measurement over its real PostgreSQL storage: what MeasuredStorage
counts (events or bytes by policy, committed appends only, merged transactions and transient
segments as Pravega counts them), what it learns of policies, and what the monitor reports from
it on a clock the test moves. Reports go to a recording sink: the intake behind it has its own
tests (tests/workers/test_autoscale.py)."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from app.domain.autoscale import ReportResult, ScaleDirection
from app.segmentstore import storage as st
from app.segmentstore.autoscaler import AutoScaleMonitor, AutoScalerConfig
from app.segmentstore.measured_storage import MeasuredStorage
from app.store.segment_data import PgSegmentStorage
from app.testing.clock import ManualClock

TICK_MS = 5_000
EVENTS, KBYTES, NO_SCALING = 2, 1, 0


class RecordingSink:
    def __init__(self) -> None:
        self.reports: list[tuple[str, str, int, ScaleDirection, int, int, bool]] = []

    async def report(
        self,
        scope: str,
        stream: str,
        segment_id: int,
        direction: ScaleDirection | str,
        timestamp: int,
        num_of_splits: int,
        silent: bool,
    ) -> ReportResult:
        parsed = ScaleDirection.parse(direction)
        self.reports.append((scope, stream, segment_id, parsed, timestamp, num_of_splits, silent))
        return ReportResult(True)


class Store:
    """MeasuredStorage over the real storage, its monitor and sink, one ManualClock for both."""

    def __init__(self, inner: PgSegmentStorage, config: AutoScalerConfig | None = None) -> None:
        self.inner = inner
        self.clock = ManualClock()
        self.sink = RecordingSink()
        self.monitor = AutoScaleMonitor(self.sink, self.clock, config)
        self.measured = MeasuredStorage(inner, self.monitor, self.clock)
        self.scope = f"m{uuid.uuid4().hex[:10]}"

    def segment(self, number: int = 0, stream: str = "s") -> str:
        return f"{self.scope}/{stream}/{number}.#epoch.0"

    async def append(
        self, name: str, data: bytes, events: int, *, writer: int = 1, number: int | None = None
    ) -> None:
        event_number = number if number is not None else self.clock.now_ms()
        await self.measured.append(st.AppendRequest(name, writer, data, event_number, events))

    def rates(self, name: str) -> tuple[float, float, float, float]:
        aggregates = self.monitor.rates_of(name)
        assert aggregates is not None, f"{name} is not tracked"
        r = aggregates.rates
        return (r.two_minute, r.five_minute, r.ten_minute, r.twenty_minute)

    def settle(self, name: str) -> float:
        """Ends the current tick (a zero-traffic update past it) and returns the 2-minute rate."""
        self.clock.advance(TICK_MS + 1)
        assert self.monitor.record(name, 0, 0)
        return self.rates(name)[0]


@pytest.fixture
def store(storage: PgSegmentStorage) -> Store:
    return Store(storage)


async def test_events_or_bytes_by_the_segments_policy(store: Store) -> None:
    by_events, by_bytes = store.segment(0), store.segment(1)
    await store.measured.create_segment(by_events, "stream", EVENTS, 10, 0)
    await store.measured.create_segment(by_bytes, "stream", KBYTES, 10, 0)
    # Every second, one block of 5 events and 2 KiB on each: the averages settle at 5 events/s
    # and at 2 KiB/s, whatever the other unit's traffic.
    for _ in range(30):
        store.clock.advance(1_000)
        for name in (by_events, by_bytes):
            await store.append(name, bytes(2048), 5)
    assert store.rates(by_events) == pytest.approx((5, 5, 5, 5))
    assert store.rates(by_bytes) == pytest.approx((2, 2, 2, 2))


async def test_only_committed_appends_count(store: Store) -> None:
    name = store.segment()
    await store.measured.create_segment(name, "stream", EVENTS, 10, 0)
    await store.append(name, b"x" * 10, 7, number=1)
    # A resent block (the writer's event number is not ahead) stores nothing, counts nothing.
    await store.append(name, b"x" * 10, 7, number=1)
    assert store.settle(name) == pytest.approx(7 / ((TICK_MS + 1) / 1000))
    await store.measured.seal(name)
    with pytest.raises(st.SegmentSealed):
        await store.append(name, b"x", 1, number=2)
    assert not store.monitor.is_tracked(name), "a sealed segment is forgotten"


async def test_a_merged_transaction_counts_for_its_parent_spread_over_its_life(store: Store) -> None:
    short, long = store.segment(0), store.segment(1)
    for name in (short, long):
        await store.measured.create_segment(name, "stream", EVENTS, 10, 0)
    txn_short = short + "#transaction.00000000000000000000000000000001"
    txn_long = long + "#transaction.00000000000000000000000000000002"
    await store.measured.create_segment(txn_long, "transaction", NO_SCALING, 0, 0)
    store.clock.advance(16_000)
    await store.measured.create_segment(txn_short, "transaction", NO_SCALING, 0, 0)
    for txn in (txn_short, txn_long):
        await store.append(txn, bytes(100), 10)
    # Appends to a transaction are not its parent's traffic until the merge.
    assert store.rates(short)[0] == store.rates(long)[0] == 0.0
    store.clock.advance(4_000)
    await store.measured.merge(short, [txn_short], [])
    await store.measured.merge(long, [txn_long], [])
    # Both ticks end 20 s after the parents were created. The short one lived 4 s (under a
    # tick): all 10 events count. The long one lived 20 s: a tick's share, 10 * 5 / 20 = 2.
    assert store.rates(short)[0] == pytest.approx(10 / 5)
    assert store.rates(long)[0] == pytest.approx(2 / 5)
    assert (await store.inner.segment_state(short)).length == 100


async def test_a_transient_segment_is_one_event_and_an_unknown_source_counts_nothing(store: Store) -> None:
    target = store.segment()
    await store.measured.create_segment(target, "stream", EVENTS, 10, 0)
    transient = f"{target}#transient.{1:032x}.{uuid.uuid4().hex}"
    await store.measured.create_segment(transient, "transient", NO_SCALING, 0, 0)
    for part in range(3):
        await store.append(transient, bytes(1000), 1, number=part + 1)
    # A transaction this store did not see written (created and filled before it started).
    stranger = target + "#transaction.00000000000000000000000000000009"
    await store.inner.create_segment(stranger, "transaction", NO_SCALING, 0, 0)
    await store.inner.append(st.AppendRequest(stranger, 5, bytes(50), 1, 50))
    await store.measured.merge(target, [transient, stranger], [])
    assert store.settle(target) == pytest.approx(1 / ((TICK_MS + 1) / 1000))
    assert (await store.inner.segment_state(target)).length == 3050


async def test_the_policy_of_a_segment_created_elsewhere_is_loaded_on_its_first_append(store: Store) -> None:
    hot, fixed = store.segment(0), store.segment(1)
    # Created by another store process (or before a restart): this one never saw the create.
    await store.inner.create_segment(hot, "stream", EVENTS, 10, 0)
    await store.inner.create_segment(fixed, "stream", NO_SCALING, 0, 0)
    for name in (hot, fixed):
        await store.append(name, b"x", 1)
    await wait_until(lambda: store.monitor.is_tracked(hot) and not store.monitor.wants_policy(fixed))
    assert not store.monitor.is_tracked(fixed)
    assert store.rates(hot)[0] == 0.0, "the append that asked for the policy is not counted"
    # Not created here: never in the processor's cache, so its idle expiry is silent.
    store.clock.advance(store.monitor.config.cache_expiry_ms + 1)
    assert await store.monitor.run_once() == []
    assert store.monitor.tracked() == []


async def test_policy_updates(store: Store) -> None:
    name = store.segment()
    await store.measured.create_segment(name, "stream", EVENTS, 10, 0)
    for _ in range(12):
        store.clock.advance(1_000)
        await store.append(name, bytes(4096), 3)
    before = store.rates(name)[0]
    assert before > 0
    # A new target under the same type keeps the averages; a new type starts them again.
    await store.measured.update_policy(name, EVENTS, 1)
    assert store.rates(name)[0] == before and store.monitor.rates_of(name).target_rate == 1  # type: ignore[union-attr]
    await store.measured.update_policy(name, KBYTES, 1)
    assert store.rates(name) == (0.0, 0.0, 0.0, 0.0)
    await store.measured.update_policy(name, NO_SCALING, 0)
    assert not store.monitor.is_tracked(name) and not store.monitor.wants_policy(name)


async def test_idle_segments_created_here_send_one_silent_down(storage: PgSegmentStorage) -> None:
    store = Store(storage, AutoScalerConfig(cooldown_ms=0, mute_ms=0, cache_expiry_ms=30_000))
    busy, idle = store.segment(0), store.segment(1)
    for name in (busy, idle):
        await store.measured.create_segment(name, "stream", EVENTS, 10, 0)
    sent = []
    for _ in range(40):
        store.clock.advance(1_000)
        await store.append(busy, b"x", 1)
        sent += await store.monitor.run_once()
    # The idle one, once 30 s passed without an append; the busy one stays quiet (1 event/s
    # against 10 is cold, but DOWN needs twenty minutes of age).
    assert [(r.segment_name, r.direction, r.num_of_splits, r.silent) for r in sent] == [
        (idle, ScaleDirection.DOWN, 0, True)
    ]
    assert store.sink.reports[0][:3] == (store.scope, "s", 1)
    assert store.monitor.tracked() == [busy]
    store.clock.advance(30_001)
    assert [r.silent for r in await store.monitor.run_once()] == [True]
    assert store.monitor.tracked() == []


async def test_a_hot_segment_reports_up_with_its_splits(storage: PgSegmentStorage) -> None:
    store = Store(storage, AutoScalerConfig(cooldown_ms=0, mute_ms=0))
    name = store.segment(3)
    await store.measured.create_segment(name, "stream", EVENTS, 10, 0)
    ups = []
    for _ in range(130):  # 130 s of 120 events/s against 10 per segment
        store.clock.advance(1_000)
        await store.append(name, b"x" * 8, 120)
        ups += await store.monitor.run_once()
    # Once, when the 2-minute average is first trusted (past 2 minutes of age): 120 / 10 pieces.
    assert [(r.direction, r.num_of_splits, r.timestamp) for r in ups] == [
        (ScaleDirection.UP, 12, store.monitor.rates_of(name).start_time + 121_000)  # type: ignore[union-attr]
    ]
    assert store.sink.reports[0][:3] == (store.scope, "s", 3)


async def wait_until(condition: object, timeout_s: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not condition():  # type: ignore[operator]
        assert asyncio.get_running_loop().time() < deadline, "condition never held"
        await asyncio.sleep(0.01)
