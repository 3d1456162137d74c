"""Several real `serve` processes on one database.

* Two, then three processes share every bucket fairly; one leaving hands its share over.
* A SIGKILLed process's buckets are owned by a survivor within 15 s, the scale and commit
  batch it had in flight complete exactly once, and its transaction timeouts are kept.
* A database restart: every process reconnects and resumes, and no bucket is held by two
  processes at any sample.

Each process reports what it holds itself (REST /v1/cluster/self); the overlap checks compare
those self-reports, which is what "worked by two processes at once" would show.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import aiohttp
import asyncpg
import pytest
from grpclib.client import Channel

from app.api.grpc.proto import controller_pb2 as pb
from app.api.grpc.proto.controller_grpc import ControllerServiceStub
from app.domain.cluster import DEFAULT_COUNTS, BucketService
from app.domain.ids import qualified_segment_name, transaction_segment_name
from app.domain.records import ScalingPolicy, StreamConfig
from app.domain.txns import TxnStatus
from app.store.migrate import upgrade_to_head
from app.testing.cluster import is_fair, kill, overlap, owned_by, start_member
from app.testing.controller import running_controller
from app.testing.scale import scale_request
from app.testing.served import ServedProcess
from tests.support.db import throwaway_cluster

COUNTS = {service.value: DEFAULT_COUNTS.of(service) for service in BucketService}
FAST = ("--rebalance-delay", "0.5")


async def until(
    probe: Callable[[], Awaitable[object]], timeout_s: float = 30.0, what: str = "condition"
) -> float:
    """Seconds it took for `probe` to answer truthily."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    while not await probe():
        if loop.time() - started > timeout_s:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        await asyncio.sleep(0.05)
    return loop.time() - started


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


async def stop_all(members: list[ServedProcess]) -> None:
    for member in members:
        if member.process.returncode is None:
            assert await member.stop() == 0, member.log()


async def test_two_then_three_processes_share_buckets_fairly(
    db_url: str, tmp_path: Path, http: aiohttp.ClientSession
) -> None:
    members = [
        await start_member(tmp_path, "p1", db_url, *FAST),
        await start_member(tmp_path, "p2", db_url, *FAST),
    ]
    try:

        async def fair() -> bool:
            return is_fair(await owned_by(http, members), COUNTS)

        await until(fair, what="a fair share over two processes")
        members.append(await start_member(tmp_path, "p3", db_url, *FAST))
        await until(fair, what="a fair share over three processes")
        views = await owned_by(http, members)
        assert sorted(len(v["watermarks"]) for v in views if v) == [33, 33, 34]
        assert sorted(len(v["requests"]) for v in views if v) == [5, 5, 6]

        channel = Channel("127.0.0.1", members[0].grpc_port)
        try:
            servers = await ControllerServiceStub(channel).getControllerServerList(pb.ServerRequest())
        finally:
            channel.close()
        assert sorted(n.port for n in servers.nodeURI) == sorted(m.grpc_port for m in members)

        leaving = members.pop(1)
        assert await leaving.stop() == 0, leaving.log()
        await until(fair, what="the two survivors sharing everything after an orderly stop")
    finally:
        await stop_all(members)


async def _stream_in_bucket_of(
    conn: asyncpg.Connection, scope: str, buckets: frozenset[int], prefix: str
) -> str:
    for n in range(1000):
        name = f"{prefix}{n}"
        if await conn.fetchval("SELECT pgc_request_bucket($1, $2)", scope, name) in buckets:
            return name
    raise AssertionError("no stream name hashes into the wanted buckets")


async def test_sigkilled_process_buckets_move_and_its_inflight_work_completes_once(
    db_url: str, tmp_path: Path, http: aiohttp.ClientSession
) -> None:
    doomed = await start_member(
        tmp_path,
        "doomed",
        db_url,
        *FAST,
        env={"PGCONTROLLER_FAILPOINTS": "scale.after_new_epoch,commit.before_complete"},
    )
    survivor = await start_member(tmp_path, "survivor", db_url, *FAST)
    members = [doomed, survivor]
    conn = await asyncpg.connect(db_url)
    try:

        async def fair() -> bool:
            return is_fair(await owned_by(http, members), COUNTS)

        await until(fair, what="a fair share")
        doomed_view = (await owned_by(http, [doomed]))[0]
        assert doomed_view is not None
        doomed_buckets = doomed_view["requests"]
        scaled = await _stream_in_bucket_of(conn, "fo", doomed_buckets, "scaled")
        committed = await _stream_in_bucket_of(conn, "fo", doomed_buckets, "txns")

        async with running_controller(db_url, workers=False) as api:
            await api.scopes.create_scope("fo")
            for name in (scaled, committed):
                await api.streams.create_stream("fo", name, StreamConfig(ScalingPolicy.fixed(2)))
            txn = (await api.transactions.create("fo", committed, 30_000)).txn
            for segment in (0, 1):
                txn_segment = transaction_segment_name(
                    qualified_segment_name("fo", committed, segment), txn.high, txn.low
                )
                await api.segment_store.append(txn_segment, 10)
            await api.transactions.commit("fo", committed, txn)
            channel = Channel("127.0.0.1", survivor.grpc_port)
            try:
                stub = ControllerServiceStub(channel)
                started = await stub.scale(
                    scale_request(pb.StreamInfo(scope="fo", stream=scaled), [1], [(0.5, 0.75), (0.75, 1.0)])
                )
                assert started.status == pb.ScaleResponse.STARTED
            finally:
                channel.close()

            async def both_parked() -> bool:
                log = doomed.log()
                return "scale.after_new_epoch reached" in log and "commit.before_complete reached" in log

            await until(both_parked, what="the doomed process parking the scale and the commit")
            # Its lease runs out after the kill: only a survivor can time it out.
            expiring = (await api.transactions.create("fo", committed, 10_000)).txn
            await kill(doomed)
            members.remove(doomed)
            took_over_s = await until(
                lambda: _owns_everything(http, survivor),
                timeout_s=15,
                what="the survivor owning every bucket",
            )

            async def drained() -> bool:
                return await conn.fetchval("SELECT count(*) FROM requests") == 0

            await until(drained, what="the orphaned requests finished")
            segments = await api.segments.current_segments("fo", scaled)
            assert len(segments) == 3
            epochs = await conn.fetchval(
                "SELECT count(*) FROM epochs e JOIN streams s ON s.id = e.stream_id WHERE s.name = $1", scaled
            )
            assert epochs == 2, "the scale added exactly one epoch"
            assert await api.transactions.state("fo", committed, txn) is TxnStatus.COMMITTED
            for segment in (0, 1):
                info = await api.segment_store.get_segment_info(
                    qualified_segment_name("fo", committed, segment)
                )
                assert info.length == 10, "the transaction was merged exactly once"

            async def timed_out() -> bool:
                return await api.transactions.state("fo", committed, expiring) is TxnStatus.ABORTED

            await until(timed_out, what="the survivor aborting the expired transaction")
            completed = await api.transactions.list_completed("fo", committed)
            assert sorted(c.txn for c in completed) == sorted([txn, expiring])
        assert took_over_s <= 15
    finally:
        await conn.close()
        await stop_all(members)


async def _owns_everything(http: aiohttp.ClientSession, member: ServedProcess) -> bool:
    return is_fair(await owned_by(http, [member]), COUNTS)


async def test_database_restart_every_process_resumes_and_no_bucket_is_held_twice(
    tmp_path: Path, http: aiohttp.ClientSession
) -> None:
    with throwaway_cluster() as database:
        url = database.url()
        await asyncio.to_thread(upgrade_to_head, url)
        members = [
            await start_member(tmp_path, "r1", url, *FAST),
            await start_member(tmp_path, "r2", url, *FAST),
        ]
        samples: list[dict[str, set[int]]] = []
        stop = asyncio.Event()

        async def sample() -> None:
            while not stop.is_set():
                samples.append(overlap(await owned_by(http, members)))
                await asyncio.sleep(0.05)

        try:

            async def fair() -> bool:
                return is_fair(await owned_by(http, members), COUNTS)

            await until(fair, what="a fair share before the restart")
            sampler = asyncio.create_task(sample())
            await asyncio.to_thread(database.stop)
            await asyncio.sleep(1.0)
            lost = await owned_by(http, members)
            assert all(view is not None and not any(view.values()) for view in lost), lost
            await asyncio.to_thread(database.start)
            resumed_s = await until(fair, what="a fair share after the restart")
            await asyncio.sleep(2)  # keep sampling a while after the shares settled
            stop.set()
            await sampler
            assert len(samples) > 20
            assert [s for s in samples if s] == [], "a bucket was held by two processes"
            assert resumed_s < 30
            # And the work resumes: a stream is created and scaled through the resumed processes.
            channel = Channel("127.0.0.1", members[1].grpc_port)
            try:
                stub = ControllerServiceStub(channel)
                assert (
                    await stub.createScope(pb.ScopeInfo(scope="rs"))
                ).status == pb.CreateScopeStatus.SUCCESS
                info = pb.StreamInfo(scope="rs", stream="s")
                config = pb.StreamConfig(streamInfo=info, scalingPolicy=pb.ScalingPolicy(minNumSegments=1))
                assert (await stub.createStream(config)).status == pb.CreateStreamStatus.SUCCESS
                scale = await stub.scale(scale_request(info, [0], [(0.0, 0.5), (0.5, 1.0)]))
                assert scale.status == pb.ScaleResponse.STARTED

                async def scaled() -> bool:
                    return len((await stub.getCurrentSegments(info)).segmentRanges) == 2

                await until(scaled, what="a scale after the restart")
            finally:
                channel.close()
        finally:
            stop.set()
            await stop_all(members)
