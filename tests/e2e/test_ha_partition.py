"""Issue 35's fencing under a real partition: the primary of the `dev ha` cluster is cut off
(`pgcontroller dev ha partition`: nftables rules dropping its loopback traffic with etcd, the
standbys and every client on the shared address; `app/dev/partition.py`), together with the
`serve` that leads, which reaches it through the node's own address only. The other `serve`, on
every node's shared address, is on the majority's side.

What must hold: the cut-off controller's writes after the cut commit nothing (a scope it is asked
to create does not exist afterwards, and its call does not succeed), no instant has both serves
claiming the leadership or a bucket, the majority's Patroni promotes the synchronous standby and
the other `serve` leads and owns every bucket there, the real client (through the other serve)
writes on and every event it was acknowledged is read back exactly once and in key order, and
once the partition heals the old primary rejoins as a standby.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import aiohttp
import pytest
from grpclib.exceptions import GRPCError, StreamTerminatedError

from app.api.grpc.proto import controller_pb2 as pb
from app.dev import ha, partition
from app.store.migrate import upgrade_to_head
from app.testing.served import ServedProcess
from tests.support.dataplane import (
    ClientProcess,
    Controller,
    read_back_exactly_once,
    start_with_segment_store,
)
from tests.support.dev_ha import dev_ha
from tests.support.hostile import ok_json, until_leader_and_ready
from tests.support.ownership import Overlaps
from tests.support.resumed import writes_resumed_after

pytestmark = [pytest.mark.interop, pytest.mark.timeout(420)]

SCOPE, STREAM, KEYS, PREFIX = "cut", "events", 4, "c"
RATE, COUNT = 40, 1600
# The issue bounds a failover after a kill by 15 s; a partition is slower on the majority's side
# by design: connections to the old primary end only when the kernel gives up on them
# (app/store/hosts.py: TCP_USER_TIMEOUT, 10 s, against Patroni's 6 s ttl here). Measured: 13.5 s.
WRITES_BACK_WITHIN_S = 30.0
# A call to the cut-off controller gets this long to (wrongly) succeed.
FENCED_CALL_S = 20.0


@asynccontextmanager
async def _served(work: Path, url: str) -> AsyncIterator[ServedProcess]:
    await asyncio.to_thread(work.mkdir)
    served = await start_with_segment_store(work, "--db-url", url)
    try:
        yield served
    finally:
        await served.stop()


async def _create_scope(served: ServedProcess, scope: str) -> str:
    """createScope through `served`'s gRPC: the status's name, or why the call failed."""
    controller = Controller(served)
    try:
        reply = await asyncio.wait_for(
            controller.stub.createScope(pb.ScopeInfo(scope=scope)), timeout=FENCED_CALL_S
        )
        return pb.CreateScopeStatus.Status.Name(reply.status)
    except (TimeoutError, OSError, StreamTerminatedError) as exc:
        return f"failed: {type(exc).__name__}"
    except GRPCError as exc:
        return f"failed: {exc.status.name} {exc.message}"
    finally:
        controller.close()


async def _until_not_leading(http: aiohttp.ClientSession, served: ServedProcess, timeout_s: float) -> float:
    """When `served` first no longer claimed the leadership (time.monotonic()), sampled every 50 ms."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            view = await ok_json(http, f"{served.rest_base}/v1/cluster/self")
        except (AssertionError, aiohttp.ClientError, TimeoutError):
            view = None
        if not (isinstance(view, dict) and view["leader"]):
            return time.monotonic()
        assert time.monotonic() < deadline, "the cut-off serve still claims the leadership"
        await asyncio.sleep(0.05)


async def test_a_partitioned_primary_and_its_controller_commit_nothing_and_the_majority_takes_over(
    tmp_path: Path, ha_cluster: ha.HaState
) -> None:
    cluster = ha_cluster
    await asyncio.to_thread(partition.ensure_nft)
    old = await asyncio.to_thread(ha.leader, cluster)
    assert old is not None
    unknown = await asyncio.to_thread(dev_ha, "partition", "--dir", cluster.root, "--node", "node9")
    assert unknown.returncode == 1 and "no node 'node9'" in unknown.stderr, unknown.stderr
    await asyncio.to_thread(upgrade_to_head, cluster.service_url())
    clients: list[ClientProcess] = []
    try:
        async with (
            _served(tmp_path / "cut", cluster.side_url(old)) as cut_off,
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=3)) as http,
        ):
            await until_leader_and_ready(http, cut_off, 60)
            async with _served(tmp_path / "majority", cluster.service_url()) as majority:
                controller = Controller(majority)
                try:
                    await controller.create_stream(SCOPE, STREAM, 2)
                finally:
                    controller.close()
                uri = f"tcp://127.0.0.1:{majority.grpc_port}"
                writer = await ClientProcess.start(
                    "write", tmp_path, uri=uri, scope=SCOPE, stream=STREAM, count=COUNT, keys=KEYS,
                    prefix=PREFIX, rate=RATE, progress_every=10,
                )  # fmt: skip
                clients.append(writer)
                await writer.until(lambda r: r["acked"] >= 200, timeout_s=90)
                overlaps = Overlaps([cut_off, majority])
                sampling = asyncio.create_task(overlaps.run())

                cut = await asyncio.to_thread(dev_ha, "partition", "--dir", cluster.root, "--node", old.name)
                cut_at = time.monotonic()
                assert cut.returncode == 0, cut.stderr
                assert json.loads(cut.stdout) == {"partitioned": old.name, "side_url": cluster.side_url(old)}
                stepped_down = asyncio.create_task(_until_not_leading(http, cut_off, 60))
                fenced = asyncio.create_task(_create_scope(cut_off, "fenced"))
                new_leader_at = await asyncio.to_thread(ha.wait_new_leader, cluster, old)
                writes_back_s = await writes_resumed_after(writer, cut_at, 2 * RATE, timeout_s=90)
                await until_leader_and_ready(http, majority, 60)
                stepped_down_s = await stepped_down - cut_at
                fenced_outcome = await fenced
                overlaps.stop()
                await sampling

                assert (await asyncio.to_thread(dev_ha, "heal", "--dir", cluster.root)).returncode == 0
                assert (await writer.result(timeout_s=180))["written"] == COUNT
                print(
                    f"ha partition: after the cut, the cut-off serve stopped leading {stepped_down_s:.2f} s, "
                    f"new Patroni leader {new_leader_at - cut_at:.2f} s, writes back {writes_back_s:.2f} s; "
                    f"the cut-off serve's createScope: {fenced_outcome}; {overlaps.samples} ownership "
                    f"samples, {overlaps.unanswered} unanswered"
                )
                assert writes_back_s < WRITES_BACK_WITHIN_S, f"writes back {writes_back_s:.1f} s later"
                assert not fenced_outcome.startswith("SUCCESS"), fenced_outcome
                assert (overlaps.leaders_twice, overlaps.buckets_twice) == (0, 0)
                assert overlaps.samples - overlaps.unanswered > 0

                controller = Controller(majority)
                try:
                    exists = await controller.stub.checkScopeExists(pb.ScopeInfo(scope="fenced"))
                    assert not exists.exists, "the cut-off controller's scope was committed"
                finally:
                    controller.close()
                await read_back_exactly_once(uri, tmp_path, SCOPE, STREAM, COUNT, PREFIX, KEYS)
                # Healed: Patroni rewinds the old primary into a standby of the new one.
                await asyncio.to_thread(ha.wait_ready, cluster, 120)
                roles = {m["name"]: m["role"] for m in await asyncio.to_thread(ha.members, cluster)}
                assert roles[old.name] in ("sync_standby", "replica"), roles
    finally:
        # The partition, if a failure left it, is healed by the fixture.
        for client in clients:
            await client.kill()
