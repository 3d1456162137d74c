"""Pravega's finer controller metrics move when the real thing happens: a transaction's segments
created, merged and dropped in the segment store (over TCP), the commit and abort calls, a
retention truncation carried out by the workers, a key-value table created. Each over real gRPC
to `serve`'s listeners and scraped from its `/prometheus`."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from app.api.grpc.proto import controller_pb2 as pb
from app.domain.ids import qualified_segment_name
from app.store.retention import PgRetentionStore
from app.testing.controller import running_controller, serving
from app.testing.scale import scale_request
from tests.api.test_grpc_streams import config
from tests.metrics.scraping import Samples, Served, counted, scrape, value
from tests.support.dataplane import ClientProcess, to_proto_id

P = "pravega_controller_"
CREATED_SEGMENTS = f"{P}transactions_created_segments_latency_seconds_count"
COMMITTING = f"{P}transactions_committing_latency_seconds_count"
COMMITTED_SEGMENTS = f"{P}transactions_committed_segments_latency_seconds_count"
ABORTING = f"{P}transactions_aborting_latency_seconds_count"
ABORTED_SEGMENTS = f"{P}transactions_aborted_segments_latency_seconds_count"
COMMITTED = f"{P}transactions_committed_total"
COMMITTED_LATENCY = f"{P}transactions_committed_latency_seconds_count"
ABORTED = f"{P}transactions_aborted_total"
ABORTED_LATENCY = f"{P}transactions_aborted_latency_seconds_count"
LONG_MAX = 2**63 - 1


@pytest.fixture
async def client_served(db_url: str) -> AsyncIterator[Served]:
    """`serve` with Pravega's default lease bound: the client asks for 90 s leases."""
    async with (
        running_controller(db_url, txn_max_lease_ms=120_000) as services,
        serving(services) as servers,
    ):
        handle = Served(servers.rest_port, servers.grpc_port)
        try:
            yield handle
        finally:
            handle.channel.close()


async def eventually(check: Callable[[], Awaitable[bool]], what: str, timeout_s: float = 30.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not await check():
        if loop.time() > deadline:
            raise AssertionError(f"{what} did not happen within {timeout_s} s")
        await asyncio.sleep(0.02)


async def txn_reaches(served: Served, info: pb.StreamInfo, txn: pb.TxnId, state: int) -> None:
    async def reached() -> bool:
        got = await served.stub.checkTransactionState(pb.TxnRequest(streamInfo=info, txnId=txn))
        return bool(got.state == state)

    await eventually(reached, f"transaction state {state}")


async def stream(served: Served, segments: int = 2) -> pb.StreamInfo:
    scope = f"t{uuid.uuid4().hex[:8]}"
    await served.stub.createScope(pb.ScopeInfo(scope=scope))
    assert (
        await served.stub.createStream(config(scope, "s", segments))
    ).status == pb.CreateStreamStatus.SUCCESS
    return pb.StreamInfo(scope=scope, stream="s")


def deltas(before: Samples, after: Samples, *names: str) -> list[float]:
    return [value(after, name) - value(before, name) for name in names]


async def test_create_commit_and_abort_time_their_segment_store_work(served: Served) -> None:
    info = await stream(served)
    stub = served.stub
    start = await scrape(served.base)

    committed = await stub.createTransaction(pb.CreateTxnRequest(streamInfo=info, lease=30_000))
    aborted = await stub.createTransaction(pb.CreateTxnRequest(streamInfo=info, lease=30_000))
    created = await scrape(served.base)
    # One observation per transaction, however many segments (two here) it has.
    assert deltas(start, created, CREATED_SEGMENTS) == [2]

    status = await stub.commitTransaction(pb.TxnRequest(streamInfo=info, txnId=committed.txnId))
    assert status.status == pb.TxnStatus.SUCCESS
    await txn_reaches(served, info, committed.txnId, pb.TxnState.COMMITTED)
    # The worker counts just after the state it wrote becomes visible: wait for the count.
    after_commit = await counted(served, created, COMMITTED, 1)
    assert deltas(created, after_commit, COMMITTING, COMMITTED_SEGMENTS, ABORTING, ABORTED_SEGMENTS) == [
        1,
        1,
        0,
        0,
    ]
    assert deltas(created, after_commit, COMMITTED, COMMITTED_LATENCY, ABORTED, ABORTED_LATENCY) == [
        1,
        1,
        0,
        0,
    ]

    status = await stub.abortTransaction(pb.TxnRequest(streamInfo=info, txnId=aborted.txnId))
    assert status.status == pb.TxnStatus.SUCCESS
    await txn_reaches(served, info, aborted.txnId, pb.TxnState.ABORTED)
    after_abort = await counted(served, after_commit, ABORTED, 1)
    assert deltas(after_commit, after_abort, COMMITTED, ABORTED, ABORTED_LATENCY) == [0, 1, 1]
    assert deltas(after_commit, after_abort, COMMITTING, COMMITTED_SEGMENTS, ABORTING, ABORTED_SEGMENTS) == [
        0,
        0,
        1,
        1,
    ]

    # A refused call (commit of an aborted transaction) is a failure: no committing latency.
    refused = await stub.commitTransaction(pb.TxnRequest(streamInfo=info, txnId=aborted.txnId))
    assert refused.status == pb.TxnStatus.FAILURE
    assert deltas(after_abort, await scrape(served.base), COMMITTING) == [0]


@pytest.mark.interop
async def test_the_real_clients_transactions_are_timed(client_served: Served, tmp_path: Path) -> None:
    """The pravega client opens two transactions, writes into both, commits one, aborts the other."""
    served = client_served
    info = await stream(served)
    before = await scrape(served.base)
    client = await ClientProcess.start(
        "txn", tmp_path, uri=served.grpc_uri, scope=info.scope, stream="s", before=2, size=5, after=2
    )
    done = await client.result(120)
    # commit() and abort() return once decided; the workers merge and drop after.
    for key, state in (("committed", pb.TxnState.COMMITTED), ("aborted", pb.TxnState.ABORTED)):
        await txn_reaches(served, info, to_proto_id(int(done[key])), state)
    names = (CREATED_SEGMENTS, COMMITTING, COMMITTED_SEGMENTS, ABORTING, ABORTED_SEGMENTS)
    assert deltas(before, await scrape(served.base), *names) == [2, 1, 1, 1, 1]


async def test_a_rolling_commit_times_its_merge(served: Served) -> None:
    """A transaction of an epoch the stream has scaled past commits by rolling: its merge into
    the copies of its epoch's segments is the committed-segments latency."""
    info = await stream(served, segments=1)
    stub = served.stub
    txn = await stub.createTransaction(pb.CreateTxnRequest(streamInfo=info, lease=30_000))
    started = await stub.scale(scale_request(info, [0], [(0.0, 0.5), (0.5, 1.0)]))
    assert started.status == pb.ScaleResponse.STARTED

    async def scaled() -> bool:
        check = await stub.checkScale(pb.ScaleStatusRequest(streamInfo=info, epoch=started.epoch))
        return bool(check.status == pb.ScaleStatusResponse.SUCCESS)

    await eventually(scaled, "the scale")
    before = await scrape(served.base)
    status = await stub.commitTransaction(pb.TxnRequest(streamInfo=info, txnId=txn.txnId))
    assert status.status == pb.TxnStatus.SUCCESS
    await txn_reaches(served, info, txn.txnId, pb.TxnState.COMMITTED)
    segments = await stub.getCurrentSegments(info)
    # Rolled: the active epoch is a copy (epoch 3: the txn epoch's copy was 2), not the scale's 1.
    assert {s.segmentId.segmentId >> 32 for s in segments.segmentRanges} == {3}
    assert deltas(before, await scrape(served.base), COMMITTED_SEGMENTS) == [1]


async def test_a_retention_truncation_adds_the_bytes_before_its_cut(db_url: str) -> None:
    """SIZE retention keeping at least 30 bytes of a one-segment stream (so each write lands
    whole between two cycles): 40 bytes, a cycle records them, 40 more; the next cycle records
    80 and truncates at the first record's cut, 40 bytes in."""
    async with (
        running_controller(db_url, retention_frequency_ms=200) as services,
        serving(services) as servers,
    ):
        served = Served(servers.rest_port, servers.grpc_port)
        try:
            scope = f"r{uuid.uuid4().hex[:8]}"
            await served.stub.createScope(pb.ScopeInfo(scope=scope))
            retention = pb.RetentionPolicy(
                retentionType=pb.RetentionPolicy.SIZE, retentionParam=30, retentionMax=LONG_MAX
            )
            created = await served.stub.createStream(config(scope, "s", 1, retention=retention))
            assert created.status == pb.CreateStreamStatus.SUCCESS
            before = await scrape(served.base)
            segment = qualified_segment_name(scope, "s", 0)

            async def recorded() -> bool:
                # A record of these 40 bytes: a cycle may already have recorded the empty stream
                # (a slow machine), and then any record would do while the truncation never got
                # past that empty cut.
                context = await PgRetentionStore(services.pool).get_context(scope, "s")
                return any(record.recording_size == 40 for record in context.records)

            await services.segment_store.append(segment, 40)
            await eventually(recorded, "the first retention record")
            await services.segment_store.append(segment, 40)

            async def truncated() -> bool:
                record = (await services.stream_store.get_truncation(scope, "s")).value
                return not record.updating and record.stream_cut == {0: 40}

            await eventually(truncated, "the retention truncation")
            after = await scrape(served.base)
            assert deltas(before, after, f"{P}retention_truncated_size") == [40]
        finally:
            served.channel.close()


async def test_a_key_value_table_adds_its_segments(served: Served) -> None:
    scope = f"k{uuid.uuid4().hex[:8]}"
    await served.stub.createScope(pb.ScopeInfo(scope=scope))
    before = await scrape(served.base)
    table = pb.KeyValueTableConfig(
        scope=scope,
        kvtName="t",
        partitionCount=3,
        primaryKeyLength=8,
        secondaryKeyLength=4,
        rolloverSizeBytes=1024,
    )
    created = await served.stub.createKeyValueTable(table)
    assert created.status == pb.CreateKeyValueTableStatus.SUCCESS
    after = await scrape(served.base)
    assert deltas(before, after, f"{P}kvtable_segments_count") == [3]

    deleted = await served.stub.deleteKeyValueTable(pb.KeyValueTableInfo(scope=scope, kvtName="t"))
    assert deleted.status == pb.DeleteKVTableStatus.SUCCESS
    assert deltas(before, await scrape(served.base), f"{P}kvtable_segments_count") == [0]
