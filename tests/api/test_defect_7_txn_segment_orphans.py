"""No race leaves a transaction segment without its transaction (defect 7): createTransaction
writes the transaction's row, then its segments; a seal (which aborts the open transactions) or a
deletion of the stream can complete in between. Over real gRPC, with the workers running, such
races end with every transaction segment in the embedded segment store still referenced by a
transaction row, counted with SQL."""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence

import asyncpg
import pytest
from grpclib.exceptions import GRPCError

from app.api.grpc.proto import controller_pb2 as pb
from app.api.grpc.proto.controller_grpc import ControllerServiceStub
from app.segmentstore.client import WireSegmentStore
from app.testing.controller import running_controller
from tests.api.conftest import Served, serve

SCOPE = "orphans"
LEASE = 10_000
WAIT_S = 30.0

# A transaction segment is named `<parent>#transaction.<high:016x><low:016x>`; ids are unique.
ORPHANS = """
SELECT e.name FROM embedded_segments e
WHERE e.kind = 'transaction' AND NOT EXISTS (
    SELECT 1 FROM transactions t
    WHERE right(e.name, 32) = lpad(to_hex(t.txn_high), 16, '0') || lpad(to_hex(t.txn_low), 16, '0')
)
ORDER BY e.name
"""


@pytest.fixture
async def served(db_url: str) -> AsyncIterator[Served[None]]:
    async with running_controller(db_url) as services, serve(services, None) as both:
        assert (await both.stub.createScope(pb.ScopeInfo(scope=SCOPE))).status == pb.CreateScopeStatus.SUCCESS
        yield both


async def _orphans(db_url: str) -> list[str]:
    conn = await asyncpg.connect(db_url)
    try:
        return [row["name"] for row in await conn.fetch(ORPHANS)]
    finally:
        await conn.close()


async def _txn_rows(db_url: str, stream: str) -> int:
    conn = await asyncpg.connect(db_url)
    try:
        count = await conn.fetchval(
            "SELECT count(*) FROM transactions t JOIN streams s ON s.id = t.stream_id"
            " WHERE s.scope = $1 AND s.name = $2",
            SCOPE,
            stream,
        )
        return int(count)
    finally:
        await conn.close()


async def _create_stream(stub: ControllerServiceStub, name: str, segments: int = 2) -> pb.StreamInfo:
    info = pb.StreamInfo(scope=SCOPE, stream=name)
    config = pb.StreamConfig(streamInfo=info, scalingPolicy=pb.ScalingPolicy(minNumSegments=segments))
    assert (await stub.createStream(config)).status == pb.CreateStreamStatus.SUCCESS
    return info


async def _create_txn(stub: ControllerServiceStub, info: pb.StreamInfo) -> None:
    """A client's createTransaction: whatever it answers (a txn, or a refusal once the stream is
    sealing, sealed or gone) is fine here; what it leaves behind is what the test checks."""
    with contextlib.suppress(GRPCError):
        await stub.createTransaction(pb.CreateTxnRequest(streamInfo=info, lease=LEASE))


async def _seal_and_delete(stub: ControllerServiceStub, info: pb.StreamInfo, delete: bool) -> None:
    assert (await stub.sealStream(info)).status == pb.UpdateStreamStatus.SUCCESS
    if delete:
        assert (await stub.deleteStream(info)).status == pb.DeleteStreamStatus.SUCCESS


async def _until(condition: Callable[[], Awaitable[bool]], what: str) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT_S
    while not await condition():
        assert loop.time() < deadline, what
        await asyncio.sleep(0.02)


async def test_defect_7_no_orphan_when_a_seal_and_delete_complete_between_the_row_and_the_segments(
    served: Served[None], db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The window made wide on purpose: each creation's segments wait until the stream has been
    sealed (its transactions aborted) and, for one stream, deleted."""
    stub = served.stub
    sealed_only = await _create_stream(stub, "sealed")
    deleted = await _create_stream(stub, "deleted")
    gate = asyncio.Event()
    original = WireSegmentStore.create_transaction_segments

    async def held(self: WireSegmentStore, names: Sequence[str], high: int, low: int, rollover: int) -> None:
        await gate.wait()
        await original(self, names, high, low, rollover)

    monkeypatch.setattr(WireSegmentStore, "create_transaction_segments", held)
    creations = [
        asyncio.create_task(_create_txn(stub, info)) for info in (sealed_only, deleted) for _ in range(5)
    ]
    for info in (sealed_only, deleted):

        async def rows_written(stream: str = info.stream) -> bool:
            return await _txn_rows(db_url, stream) == 5

        await _until(rows_written, f"the transaction rows of {info.stream} were never written")
    await _seal_and_delete(stub, sealed_only, delete=False)
    await _seal_and_delete(stub, deleted, delete=True)
    gate.set()
    await asyncio.wait_for(asyncio.gather(*creations), WAIT_S)

    assert await _orphans(db_url) == []


async def test_defect_7_no_orphan_after_concurrent_create_seal_delete_races(
    served: Served[None], db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race as clients run it: transactions created from many tasks while each stream is
    sealed and deleted, against a segment store that takes up to 400 ms to create segments (a
    remote one's latency; the embedded one on loopback answers in about a millisecond, which
    hides the race that a loaded server shows)."""
    stub = served.stub
    rng = random.Random(7)
    original = WireSegmentStore.create_transaction_segments

    async def slow(self: WireSegmentStore, names: Sequence[str], high: int, low: int, rollover: int) -> None:
        await asyncio.sleep(rng.random() * 0.4)
        await original(self, names, high, low, rollover)

    monkeypatch.setattr(WireSegmentStore, "create_transaction_segments", slow)
    streams = [await _create_stream(stub, f"race{i}") for i in range(6)]

    async def client(info: pb.StreamInfo) -> None:
        for _ in range(6):
            await _create_txn(stub, info)
            await asyncio.sleep(rng.random() * 0.005)

    async def closer(info: pb.StreamInfo, index: int) -> None:
        await asyncio.sleep(rng.random() * 0.05)
        await _seal_and_delete(stub, info, delete=index % 2 == 0)

    await asyncio.wait_for(
        asyncio.gather(
            *(client(info) for info in streams for _ in range(4)),
            *(closer(info, i) for i, info in enumerate(streams)),
        ),
        WAIT_S,
    )

    async def quiet() -> bool:
        # Aborts requested by the seals are processed by the workers; wait until none is pending.
        conn = await asyncpg.connect(db_url)
        try:
            return int(await conn.fetchval("SELECT count(*) FROM requests")) == 0
        finally:
            await conn.close()

    await _until(quiet, "the workers never finished the aborts")
    assert await _orphans(db_url) == []


async def _waiting_on_locks(db_url: str) -> int:
    conn = await asyncpg.connect(db_url)
    try:
        count = await conn.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND wait_event_type = 'Lock'"
        )
        return int(count)
    finally:
        await conn.close()


async def test_defect_7_no_transaction_stays_open_on_a_stream_sealed_while_it_was_created(
    served: Served[None], db_url: str
) -> None:
    """A createTransaction that read the stream ACTIVE must not commit its OPEN row after the
    seal's workflow looked for transactions to abort: that row would outlive the seal (and its
    segments the stream). The creation is held inside its statement, after reading the state, by
    an uncommitted row with the id it is about to take; the seal runs meanwhile."""
    stub = served.stub
    info = await _create_stream(stub, "held", segments=1)
    blocker = await asyncpg.connect(db_url)
    try:
        transaction = blocker.transaction()
        await transaction.start()
        stream_id = await blocker.fetchval(
            "SELECT id FROM streams WHERE scope = $1 AND name = $2", SCOPE, info.stream
        )
        next_low = int(await blocker.fetchval("SELECT nextval('txn_counter')")) + 1
        await blocker.execute(
            "INSERT INTO transactions (stream_id, txn_high, txn_low, epoch, bucket, status,"
            " creation_time, lease_ms, lease_expiry, max_exec_expiry)"
            " VALUES ($1, 0, $2, 0, 0, 'OPEN', 0, 1, 1, 1)",
            stream_id,
            next_low,
        )
        creation = asyncio.create_task(_create_txn(stub, info))

        async def creation_held() -> bool:
            return await _waiting_on_locks(db_url) == 1

        await _until(creation_held, "the creation never waited on the uncommitted row")
        seal = asyncio.create_task(stub.sealStream(info))

        async def seal_done_or_held() -> bool:
            return seal.done() or await _waiting_on_locks(db_url) == 2

        await _until(seal_done_or_held, "the seal neither finished nor waited")
        await transaction.rollback()
    finally:
        await blocker.close()
    await asyncio.wait_for(creation, WAIT_S)
    assert (await asyncio.wait_for(seal, WAIT_S)).status == pb.UpdateStreamStatus.SUCCESS

    open_rows = await _txn_rows(db_url, info.stream)
    assert open_rows == 0, f"{open_rows} transaction(s) left active on the sealed stream"
    assert await _orphans(db_url) == []
