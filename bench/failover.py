"""Failover figures for several `pgcontroller serve` processes on one throwaway database.

1. SIGKILL of a process that holds half of every bucket service: time until a survivor owns all
   of its buckets (target <= 15 s), and until 1,000 requests that were in flight in it (scales
   queued in its buckets, which it never ran) are all driven to completion (target <= 30 s).
2. A process joining: time until the 100 watermark buckets (and the others) are shared fairly
   again (target <= 10 s).

Baseline, in the same run: how long PostgreSQL takes to free an advisory lock held by a bare
asyncpg client killed with SIGKILL, i.e. the floor under any lock-based takeover.

    .venv/bin/python -m bench.failover [--orphans 1000]
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import asyncpg
from grpclib.client import Channel

from app.api.grpc.proto import controller_pb2 as pb
from app.api.grpc.proto.controller_grpc import ControllerServiceStub
from app.domain.cluster import DEFAULT_COUNTS, BucketService
from app.testing.cluster import is_fair, kill, owned_by, start_member
from app.testing.scale import scale_request
from app.testing.served import ServedProcess
from bench._common import create_fixed_stream, throwaway_database

COUNTS = {service.value: DEFAULT_COUNTS.of(service) for service in BucketService}
FAST = ("--rebalance-delay-s", "2")
SCOPE = "failover"


async def until(probe_s: float, check: object, timeout_s: float) -> float:
    started = time.monotonic()
    while not await check():  # type: ignore[operator]
        if time.monotonic() - started > timeout_s:
            raise SystemExit(f"timed out after {timeout_s:.0f}s")
        await asyncio.sleep(probe_s)
    return time.monotonic() - started


async def lock_release_baseline(url: str) -> float:
    """Seconds from SIGKILL of a client holding an advisory lock to another session getting it."""
    script = (
        "import asyncio, asyncpg, sys\n"
        "async def main():\n"
        f"    conn = await asyncpg.connect({url!r})\n"
        "    await conn.fetchval('SELECT pg_advisory_lock(77, 1)')\n"
        "    print('held', flush=True)\n"
        "    await asyncio.sleep(3600)\n"
        "asyncio.run(main())\n"
    )
    holder = await asyncio.create_subprocess_exec(
        sys.executable, "-c", script, stdout=asyncio.subprocess.PIPE
    )
    assert holder.stdout is not None
    await holder.stdout.readline()
    conn = await asyncpg.connect(url)
    try:
        holder.send_signal(signal.SIGKILL)
        await holder.wait()
        killed = time.monotonic()
        while not await conn.fetchval("SELECT pg_try_advisory_lock(77, 1)"):  # noqa: ASYNC110 - polling the database
            await asyncio.sleep(0.005)
        return time.monotonic() - killed
    finally:
        await conn.close()


async def names_in_buckets(conn: asyncpg.Connection, buckets: frozenset[int], wanted: int) -> list[str]:
    rows = await conn.fetch(
        "SELECT n FROM (SELECT 'o' || g AS n FROM generate_series(0, $2 * 40) g) names "
        "WHERE pgc_request_bucket($3, n) = ANY($1::int[]) LIMIT $2",
        sorted(buckets),
        wanted,
        SCOPE,
    )
    return [r["n"] for r in rows]


async def run(orphans: int) -> None:
    async with throwaway_database() as url, aiohttp.ClientSession() as http:
        baseline_s = await lock_release_baseline(url)
        with tempfile.TemporaryDirectory() as work:
            root = Path(work)
            # The doomed process holds its buckets but its request dispatcher never runs, so every
            # request filed in its buckets stays in flight until it dies.
            doomed = await start_member(
                root, "doomed", url, *FAST, env={"PGCONTROLLER_FAILPOINTS": "dispatcher.loop"}
            )
            survivor = await start_member(root, "survivor", url, *FAST)
            members: list[ServedProcess] = [doomed, survivor]

            async def fair() -> bool:
                return is_fair(await owned_by(http, members), COUNTS)

            await until(0.05, fair, 60)
            view = (await owned_by(http, [doomed]))[0]
            assert view is not None
            conn = await asyncpg.connect(url)
            channel = Channel("127.0.0.1", survivor.grpc_port)
            try:
                stub = ControllerServiceStub(channel)
                await stub.createScope(pb.ScopeInfo(scope=SCOPE))
                names = await names_in_buckets(conn, view["requests"], orphans)
                assert len(names) == orphans, len(names)
                sem = asyncio.Semaphore(16)

                async def stream_with_scale(name: str) -> None:
                    async with sem:
                        info = pb.StreamInfo(scope=SCOPE, stream=name)
                        await create_fixed_stream(stub, info, 1)
                        started = await stub.scale(scale_request(info, [0], [(0.0, 0.5), (0.5, 1.0)]))
                        assert started.status == pb.ScaleResponse.STARTED

                began = time.monotonic()
                await asyncio.gather(*(stream_with_scale(n) for n in names))
                print(
                    f"set-up: {orphans} streams with a scale queued in the doomed process's buckets "
                    f"in {time.monotonic() - began:.1f}s"
                )
                pending = await conn.fetchval("SELECT count(*) FROM requests")
                assert pending == orphans, pending

                await kill(doomed)
                members.remove(doomed)
                owned_s = await until(0.02, fair, 60)

                async def drained() -> bool:
                    return await conn.fetchval("SELECT count(*) FROM requests") == 0

                drained_s = owned_s + await until(0.05, drained, 120)
                scaled = await conn.fetchval(
                    "SELECT count(*) FROM stream_current_epochs ce JOIN streams s ON s.id = ce.stream_id "
                    "WHERE s.scope = $1 AND ce.epoch = 1",
                    SCOPE,
                )
                assert scaled == orphans, scaled

                joined_started = time.monotonic()
                joiner = await start_member(root, "joiner", url, *FAST)
                ready_s = time.monotonic() - joined_started
                members.append(joiner)
                rebalance_s = await until(0.02, fair, 60)
            finally:
                channel.close()
                await conn.close()
                for member in members:
                    await member.stop()

        print(f"baseline: advisory lock free after SIGKILL of a bare client   {baseline_s * 1000:8.1f} ms")
        print(
            f"SIGKILL -> all buckets owned by the survivor                 {owned_s:8.2f} s "
            f"(target <= 15 s; {owned_s / baseline_s:,.0f}x baseline)"
        )
        print(
            f"SIGKILL -> {orphans} orphaned in-flight scales completed       {drained_s:8.2f} s "
            "(target <= 30 s)"
        )
        print(
            f"join -> {sum(COUNTS.values())} buckets ({COUNTS['watermarks']} watermark) shared fairly "
            f"{rebalance_s:8.2f} s after the joiner was ready ({ready_s:.2f} s to start; target <= 10 s)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--orphans", type=int, default=1000)
    args = parser.parse_args()
    asyncio.run(run(args.orphans))


if __name__ == "__main__":
    main()
