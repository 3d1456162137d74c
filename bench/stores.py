"""Segment stores as processes of their own: a container move after a SIGKILL, and write
throughput with one store against two, with the real Pravega Python client on a throwaway
durable PostgreSQL. Printed figures, not a timed test.

    .venv/bin/python bench/stores.py [--rate 2000] [--events 40000] [--event-size 1024]
        [--skip move,throughput]

move        one controller (`serve --no-embedded-segment-store`), two `segment-store` processes with
            the default heartbeat (2 s) and expiry (10 s); a writer at --rate events/s on a
            4-segment stream; store a is SIGKILLed. Figures: seconds from the kill until every
            container is served again (the map's owner answers a segment request of each
            container; target <= 15 s), and the writer's stall (the longest gap between its
            acknowledgements, reported every 100 events). The real writer retries the address it
            was last given for ever, so a fresh store is started on a's address once the
            containers have moved (as a supervisor would): its WrongHost sends the writer back to
            getURI. The stall is the client's retry schedule (1 ms, 10 ms, 100 ms, 1 s, 10 s...)
            on top of the move.
throughput  four writers (each its own 4-segment stream, --events/4 events of --event-size
            bytes, acknowledged at the end), first with one store, then with two: MB/s in total.

The controller's rebalance delay is 1 s so that the second store gets containers quickly; a
departure does not wait for it.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import itertools

from grpclib.client import Channel

from app.api.grpc.proto import controller_pb2 as pb
from app.api.grpc.proto.controller_grpc import ControllerServiceStub
from app.domain.containers import container_for_segment
from app.ports import HostAddress
from app.segmentstore.wire import commands as wc
from app.store.containers import PgContainerMapStore
from app.store.pool import create_pool
from app.testing.served import ServedProcess, start_served
from bench._common import create_fixed_stream, throwaway_cluster
from tests.segmentstore.server_harness import Client, rid
from tests.support.dataplane import ClientProcess
from tests.support.stores import StoreProcess, start_store

SCOPE = "stores"
MB = 1024 * 1024
CONTAINERS = 4


def verdict(ok: bool, target: str) -> str:
    return f"{'meets' if ok else 'MISSES'} the target ({target})"


async def controller(work: Path, url: str) -> ServedProcess:
    return await start_served(
        work, "--db-url", url, "--no-embedded-segment-store", "--segment-store-hosts", "127.0.0.1:1",
        "--container-rebalance-delay-s", "1",
    )  # fmt: skip


async def owners(pool: Any) -> dict[int, HostAddress]:
    return {c: row.value for c, row in (await PgContainerMapStore(pool).read_container_map()).items()}


async def until(check: Any, timeout_s: float, what: str) -> float:
    started = time.monotonic()
    while not await check():
        if time.monotonic() - started > timeout_s:
            raise RuntimeError(f"not within {timeout_s}s: {what}")
        await asyncio.sleep(0.02)
    return time.monotonic() - started


def probe_segment(container: int) -> str:
    return next(
        name
        for n in range(1000)
        if container_for_segment(name := f"probe/p/{n}.#epoch.0", CONTAINERS) == container
    )


async def served_by_owner(pool: Any) -> bool:
    """Every container's owner (per the map) answers a segment request of it."""
    for container, owner in (await owners(pool)).items():
        try:
            client = await Client.connect((owner.host, owner.port))
        except OSError:
            return False
        try:
            reply = await client.call(wc.GetStreamSegmentInfo(rid(), probe_segment(container), ""))
        except (OSError, asyncio.IncompleteReadError, TimeoutError):
            return False
        finally:
            await client.close()
        if isinstance(reply, wc.WrongHost):
            return False
    return True


async def move(url: str, work: Path, args: argparse.Namespace) -> None:
    served = await controller(work, url)
    pool = await create_pool(url, min_size=1, max_size=2)
    stores: list[StoreProcess] = []
    try:
        a, b = await asyncio.gather(start_store(work, "a", url), start_store(work, "b", url))
        stores = [a, b]

        async def spread() -> bool:
            return len(set((await owners(pool)).values())) == 2

        await until(spread, 30, "both stores own containers")
        channel = Channel("127.0.0.1", served.grpc_port)
        try:
            stub = ControllerServiceStub(channel)
            await stub.createScope(pb.ScopeInfo(scope=SCOPE))
            await create_fixed_stream(stub, pb.StreamInfo(scope=SCOPE, stream="move"), 4)
        finally:
            channel.close()
        count = int(args.rate * 40) // 100 * 100  # a multiple of the progress step
        writer = await ClientProcess.start(
            "write", work, uri=served.grpc_uri, scope=SCOPE, stream="move", count=count, keys=16,
            size=args.event_size, inflight=200, progress_every=100, rate=args.rate,
        )  # fmt: skip
        acks: list[float] = []
        try:
            report = await writer.until(lambda p: p["acked"] >= count // 5, 120)
            acks.append(report["seconds"])
            await a.sigkill()
            killed = time.monotonic()
            served_s = await until(lambda: served_by_owner(pool), 60, "every container is served again")
            restarted = await start_store(work, "a2", url, "--segment-store-port", str(a.port))
            stores.append(restarted)
            restarted_s = time.monotonic() - killed

            def record(report: dict[str, Any]) -> bool:
                acks.append(report["seconds"])
                return bool(report["acked"] >= count)

            await writer.until(record, 180)
            await writer.result(30)
        finally:
            await writer.kill()
        stall = max(later - earlier for earlier, later in itertools.pairwise(acks))
        print(f"container move after a SIGKILL ({args.rate:g} events/s, 4 segments over 2 stores)")
        print(f"    every container served again {served_s:5.1f} s after the kill (expiry 10 s)")
        print(f"    a fresh store on the dead address {restarted_s:5.1f} s after the kill")
        print(f"    the writer's longest stall: {stall:5.1f} s")
        print("    " + verdict(served_s <= 15, "served again <= 15 s"))
    finally:
        await pool.close()
        for store in stores:
            await store.stop()
        await served.stop()


async def write_mbps(
    served: ServedProcess, stub: ControllerServiceStub, tag: str, args: argparse.Namespace
) -> float:
    each = args.events // 4
    for i in range(4):
        await create_fixed_stream(stub, pb.StreamInfo(scope=SCOPE, stream=f"{tag}{i}"), 4)
    writers = [
        await ClientProcess.start(
            "write",
            served_work(served),
            uri=served.grpc_uri,
            scope=SCOPE,
            stream=f"{tag}{i}",
            count=each,
            keys=16,
            size=args.event_size,
            inflight=1000,
            progress_every=each,
        )
        for i in range(4)
    ]
    results = [await w.result(600) for w in writers]
    span = max(r["t1"] for r in results) - min(r["t0"] for r in results)
    return 4 * each * args.event_size / MB / span


def served_work(served: ServedProcess) -> Path:
    return served.log_path.parent


async def throughput(url: str, work: Path, args: argparse.Namespace) -> None:
    served = await controller(work, url)
    pool = await create_pool(url, min_size=1, max_size=2)
    stores: list[StoreProcess] = []
    channel = Channel("127.0.0.1", served.grpc_port)
    try:
        stub = ControllerServiceStub(channel)
        await stub.createScope(pb.ScopeInfo(scope=SCOPE))
        stores.append(await start_store(work, "one", url))

        async def owned_by(n: int) -> bool:
            return len(set((await owners(pool)).values())) == n and await served_by_owner(pool)

        await until(lambda: owned_by(1), 30, "one store owns every container")
        one = await write_mbps(served, stub, "one", args)
        stores.append(await start_store(work, "two", url))
        await until(lambda: owned_by(2), 30, "two stores own the containers")
        two = await write_mbps(served, stub, "two", args)
        print(f"write throughput, four writers x 4 segments, {args.events} x {args.event_size} B events")
        print(f"    one store  {one:7.1f} MB/s")
        print(f"    two stores {two:7.1f} MB/s ({100 * two / one:.0f}% of one; one machine, one PostgreSQL)")
    finally:
        channel.close()
        await pool.close()
        for store in stores:
            await store.stop()
        await served.stop()


PARTS = {"move": move, "throughput": throughput}


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rate", type=float, default=2000.0, help="move: the writer's events/s")
    parser.add_argument("--events", type=int, default=40_000, help="throughput: events per run")
    parser.add_argument("--event-size", type=int, default=1024, help="bytes per event")
    parser.add_argument("--skip", default="", help="comma-separated parts to skip: " + ",".join(PARTS))
    args = parser.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    for name, part in PARTS.items():
        if name in skip:
            continue
        async with throwaway_cluster() as cluster:
            with tempfile.TemporaryDirectory() as work:
                await part(cluster.url(), Path(work), args)


if __name__ == "__main__":
    asyncio.run(main())
