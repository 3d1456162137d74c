"""Reader groups and consumption-based retention: a group with retention
(MANUAL or AUTOMATIC) subscribes its streams when created; the cut it reports bounds where the
retention worker truncates; once the group opts out (an update to NONE) or is deleted, its
subscription is gone and retention is bounded by the policy alone.

The reader-group requests run through a real dispatcher; retention runs through
RetentionWorker.run_once under a seeded fence, with a fake clock so recording times are exact.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest

from app.domain.readergroups import ReaderGroupConfig, ScopedStream, StreamDataRetention
from app.domain.records import RetentionPolicy, RetentionType, ScalingPolicy, StreamConfig
from app.services.readergroups import CreateStatus, DeleteStatus, UpdateStatus
from app.services.retention import SubscriberUpdate
from app.testing.controller import running_controller
from tests.support.readergroups import Rig as RgRig
from tests.support.readergroups import rig as rg_rig
from tests.workers.test_retention import Rig, claim, make_rig, records, truncation, write
from workers.retention import RetentionWorker

SC = "ret"  # the scope test_retention's helpers work in
ST = "s"
F = 30 * 60_000
SUBSCRIBER = f"{SC}/rg"
LONG_MAX = 2**63 - 1


@dataclass
class Both:
    ret: Rig
    rg: RgRig
    worker: RetentionWorker


@pytest.fixture
async def both(db_url: str) -> AsyncIterator[Both]:
    async with running_controller(db_url, workers=False) as s:
        await s.scopes.create_scope(SC)
        retention = make_rig(s, await claim(s))
        policy = RetentionPolicy(RetentionType.SIZE, 5, LONG_MAX)
        await s.streams.create_stream(SC, ST, StreamConfig(ScalingPolicy.fixed(2), retention=policy))
        async with rg_rig(s, workers=True) as groups:
            worker = retention.worker()
            assert (await worker.run_once()).members == 1  # first seen: due one period later
            yield Both(retention, groups, worker)


def group_config(retention: StreamDataRetention) -> ReaderGroupConfig:
    return ReaderGroupConfig({ScopedStream(SC, ST): {}}, retention=retention)


async def cycle(b: Both, *sizes: int) -> None:
    """Writes, lets a period pass, runs one retention pass."""
    await write(b.ret, *sizes)
    b.ret.clock.advance(F + 1)
    done = await b.worker.run_once()
    assert (done.due, done.failed, done.fenced) == (1, 0, 0)


async def truncation_done(b: Both) -> None:
    """The truncate request the pass queued is run by the dispatcher."""
    for _ in range(500):
        if not (await truncation(b.ret)).updating:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the truncation did not complete")


async def publish(b: Both, group_id: uuid.UUID, generation: int, cut: dict[int, int]) -> SubscriberUpdate:
    return await b.rg.subscribers.update_subscriber_stream_cut(
        SC, ST, SUBSCRIBER, str(group_id), generation, cut
    )


@pytest.mark.parametrize(
    "retention",
    [
        StreamDataRetention.MANUAL_RELEASE_AT_USER_STREAMCUT,
        StreamDataRetention.AUTOMATIC_RELEASE_AT_LAST_CHECKPOINT,
    ],
    ids=["manual", "automatic"],
)
async def test_a_subscribing_group_bounds_truncation_until_it_opts_out(
    both: Both, retention: StreamDataRetention
) -> None:
    created = await both.rg.service.create_reader_group(SC, "rg", group_config(retention))
    assert created.status is CreateStatus.SUCCESS and created.record is not None
    group_id = created.record.id
    assert await both.rg.subscribers.list_subscribers(SC, ST) == [SUBSCRIBER]

    await cycle(both, 10, 10)  # cut1 {0:10,1:10} (20 bytes) recorded; it retains 0 < 5
    assert not (await truncation(both.ret)).stream_cut
    assert await publish(both, group_id, 0, {0: 2, 1: 2}) is SubscriberUpdate.SUCCESS

    # cut2 (40 bytes): without the group the policy would truncate at cut1; the group has
    # read only up to {0:2,1:2} (it retains 36 >= min), so that is where the stream is cut.
    await cycle(both, 10, 10)
    assert (await truncation(both.ret)).stream_cut == {0: 2, 1: 2}
    await truncation_done(both)

    # While subscribed, the next period cannot move past the group's cut.
    await cycle(both, 10, 10)
    assert (await truncation(both.ret)).stream_cut == {0: 2, 1: 2}

    # The group opts out: its subscription goes, and with it the bound.
    updated = await both.rg.service.update_reader_group(
        SC, "rg", group_config(StreamDataRetention.NONE), group_id, 0
    )
    assert (updated.status, updated.generation) == (UpdateStatus.SUCCESS, 1)
    assert await both.rg.subscribers.list_subscribers(SC, ST) == []
    assert await publish(both, group_id, 1, {0: 3, 1: 3}) is SubscriberUpdate.SUBSCRIBER_NOT_FOUND

    await cycle(both, 10, 10)  # 80 bytes now: minCut = the newest record retaining >= 5
    assert (await truncation(both.ret)).stream_cut == {0: 30, 1: 30}
    assert [size for size, _ in await records(both.ret)][-1] == 80


async def test_a_group_without_retention_does_not_bound_truncation(both: Both) -> None:
    created = await both.rg.service.create_reader_group(SC, "rg", group_config(StreamDataRetention.NONE))
    assert created.status is CreateStatus.SUCCESS
    assert await both.rg.subscribers.list_subscribers(SC, ST) == []
    await cycle(both, 10, 10)
    await cycle(both, 10, 10)
    assert (await truncation(both.ret)).stream_cut == {0: 10, 1: 10}  # the policy's minCut


async def test_opting_in_later_and_deleting_the_group(both: Both) -> None:
    created = await both.rg.service.create_reader_group(SC, "rg", group_config(StreamDataRetention.NONE))
    assert created.record is not None
    group_id = created.record.id
    opted_in = await both.rg.service.update_reader_group(
        SC, "rg", group_config(StreamDataRetention.AUTOMATIC_RELEASE_AT_LAST_CHECKPOINT), group_id, 0
    )
    assert opted_in.status is UpdateStatus.SUCCESS
    assert await both.rg.subscribers.list_subscribers(SC, ST) == [SUBSCRIBER]
    # Subscribed with the new generation: the old one is refused.
    assert await publish(both, group_id, 0, {0: 1, 1: 1}) is SubscriberUpdate.GENERATION_MISMATCH
    assert await publish(both, group_id, 1, {0: 1, 1: 1}) is SubscriberUpdate.SUCCESS

    await cycle(both, 10, 10)
    await cycle(both, 10, 10)
    assert (await truncation(both.ret)).stream_cut == {0: 1, 1: 1}
    await truncation_done(both)

    assert await both.rg.service.delete_reader_group(SC, "rg", str(group_id)) is DeleteStatus.SUCCESS
    assert await both.rg.subscribers.list_subscribers(SC, ST) == []
    await cycle(both, 10, 10)
    assert (await truncation(both.ret)).stream_cut == {0: 20, 1: 20}
