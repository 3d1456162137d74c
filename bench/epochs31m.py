"""A year of scaling once a second: the history queries on a 1,000,000-epoch and a
31,000,000-epoch stream, p50/p99 of each and their ratio (target: 31M within 1.5x of 1M).

    .venv/bin/python bench/epochs31m.py [--epochs 1000000,31000000] [--seconds 5]

For each size: a database of its own in one throwaway embedded PostgreSQL, the stream seeded by
`pgcontroller dev seed --one-stream-epochs N --span-hours 8760` (timed: the command's own
figure), VACUUM ANALYZE, then a real `pgcontroller serve` subprocess answering over gRPC and
REST: successors, isStreamCutValid, getSegments at a time (Pravega's answers the head, whatever
the time), getSegmentsBetween two cuts 100
epochs apart, the REST scaling events of a 100-epoch window, the `reporting` views an analyst
reads for that stream (its scale events and segments in a window, its row of reporting.streams),
each at a random epoch anywhere in the history, one call in flight; then one truncation to a cut
deep in the history (epoch --truncate-at), timed until the stream's truncation record is done.
Storage: pg_total_relation_size of the tables the stream grew, per epoch. The database is
dropped after each size.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import aiohttp
import asyncpg
from grpclib.client import Channel

import pgurl
from app.api.grpc.proto import controller_pb2 as pb
from app.api.grpc.proto.controller_grpc import ControllerServiceStub
from app.dev.long_history import LongStreamGrower, ReplacementHistory
from app.testing.served import start_served
from bench._common import percentile, throwaway_cluster

SCOPE, STREAM = "seed0", "stream0"
TABLES = ("epochs", "segments", "sealed_size_shards")
WINDOW = 100  # epochs between the two cuts, and in a time window
TARGET_RATIO = 1.5
YEAR_HOURS = 8760.0

Call = Callable[[int], Awaitable[None]]


@dataclass
class Size:
    epochs: int
    seed_seconds: float = 0.0
    vacuum_seconds: float = 0.0
    bytes_by_table: dict[str, int] = field(default_factory=dict)
    latencies: dict[str, list[float]] = field(default_factory=dict)
    truncation_seconds: float = 0.0

    @property
    def bytes_per_epoch(self) -> float:
        return sum(self.bytes_by_table.values()) / self.epochs


async def seed(url: str, epochs: int, chunk: int) -> float:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "app.cli", "--log-level", "WARNING", "dev", "seed", "--db-url", url,
        "--one-stream-epochs", str(epochs), "--span-hours", str(YEAR_HOURS), "--chunk-epochs", str(chunk),
        "--quiet",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"dev seed failed: {err.decode()[-2000:]}")
    return float(json.loads(out.decode().strip().splitlines()[-1])["seconds"])


async def measure(call: Call, picks: Callable[[], int], seconds: float, min_calls: int) -> list[float]:
    """Calls back to back, one in flight, for `seconds` and at least `min_calls` calls (after two
    unmeasured ones); each call at a fresh random epoch."""
    for _ in range(2):
        await call(picks())
    latencies: list[float] = []
    stop = time.perf_counter() + seconds
    while time.perf_counter() < stop or len(latencies) < min_calls:
        epoch = picks()
        began = time.perf_counter()
        await call(epoch)
        latencies.append((time.perf_counter() - began) * 1000)
    return latencies


def calls(
    stub: ControllerServiceStub,
    http: aiohttp.ClientSession,
    rest: str,
    db: asyncpg.Connection,
    h: ReplacementHistory,
) -> dict[str, Call]:
    info = pb.StreamInfo(scope=SCOPE, stream=STREAM)

    async def successors(e: int) -> None:
        reply = await stub.getSegmentsImmediatelyFollowing(
            pb.SegmentId(streamInfo=info, segmentId=h.segment(e))
        )
        assert len(reply.segments) == 1, reply

    async def cut_valid(e: int) -> None:
        reply = await stub.isStreamCutValid(pb.StreamCut(streamInfo=info, cut=dict.fromkeys(h.active(e), 0)))
        assert reply.response

    async def at_time(e: int) -> None:
        # Pravega's getSegments answers the head whatever the timestamp (here: untruncated, epoch 0).
        reply = await stub.getSegments(pb.GetSegmentsRequest(streamInfo=info, timestamp=h.time_of(e) + 1))
        assert sorted(s.segmentId.segmentId for s in reply.segments) == sorted(h.active(0)), reply

    async def between(e: int) -> None:
        cut_range = pb.StreamCutRange(
            streamInfo=info,
            **{"from": dict.fromkeys(h.active(e), 0), "to": dict.fromkeys(h.active(e + WINDOW), 0)},
        )
        reply = await stub.getSegmentsBetween(cut_range)
        assert len(reply.segments) == WINDOW + 2, len(reply.segments)

    async def scaling_events(e: int) -> None:
        query = {"from": str(h.time_of(e)), "to": str(h.time_of(e + WINDOW - 1))}
        async with http.get(f"{rest}/v1/scopes/{SCOPE}/streams/{STREAM}/scaling-events", params=query) as r:
            assert r.status == 200, await r.text()
            assert len(await r.json()) >= WINDOW

    async def report_scale_events(e: int) -> None:
        rows = await db.fetch(
            "SELECT * FROM reporting.scale_events WHERE stream_id = $1 AND event_time BETWEEN $2 AND $3",
            h.stream_id, h.time_of(e), h.time_of(e + WINDOW - 1),
        )  # fmt: skip
        assert len(rows) == WINDOW, len(rows)

    async def report_segments(e: int) -> None:
        rows = await db.fetch(
            "SELECT * FROM reporting.segments WHERE stream_id = $1 AND creation_time BETWEEN $2 AND $3",
            h.stream_id, h.time_of(e), h.time_of(e + WINDOW - 1),
        )  # fmt: skip
        assert len(rows) == WINDOW, len(rows)

    async def report_stream(e: int) -> None:
        row = await db.fetchrow(
            "SELECT current_epoch, segment_count, segments_created, sealed_bytes FROM reporting.streams"
            " WHERE stream_id = $1",
            h.stream_id,
        )
        assert row is not None and row["segment_count"] == 2

    return {
        "successors (getSegmentsImmediatelyFollowing)": successors,
        "isStreamCutValid": cut_valid,
        "getSegments (at a time: the head)": at_time,
        f"getSegmentsBetween ({WINDOW} epochs)": between,
        f"REST scaling-events ({WINDOW} epochs)": scaling_events,
        f"reporting.scale_events ({WINDOW} epochs)": report_scale_events,
        f"reporting.segments ({WINDOW} epochs)": report_segments,
        "reporting.streams (its row)": report_stream,
    }


async def truncate(
    stub: ControllerServiceStub, db: asyncpg.Connection, h: ReplacementHistory, epoch: int
) -> float:
    info = pb.StreamInfo(scope=SCOPE, stream=STREAM)
    cut = dict.fromkeys(h.active(epoch), 0)
    began = time.perf_counter()
    status = await stub.truncateStream(pb.StreamCut(streamInfo=info, cut=cut))
    assert status.status == pb.UpdateStreamStatus.SUCCESS, status
    while True:
        row = await db.fetchrow(
            "SELECT stream_cut, updating FROM stream_truncations WHERE stream_id = $1", h.stream_id
        )
        if (
            row is not None
            and not row["updating"]
            and json.loads(row["stream_cut"]) == {str(k): 0 for k in cut}
        ):
            return time.perf_counter() - began
        await asyncio.sleep(0.01)


async def one_size(admin_url: str, epochs: int, args: argparse.Namespace) -> Size:
    result = Size(epochs)
    name = f"epochs_{epochs}"
    admin = await asyncpg.connect(admin_url)
    await admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    await admin.execute(f"CREATE DATABASE {name}")
    url = pgurl.parse(admin_url).with_database(name).to_url()
    try:
        result.seed_seconds = await seed(url, epochs, args.chunk_epochs)
        db = await asyncpg.connect(url)
        try:
            began = time.perf_counter()
            for table in TABLES:
                await db.execute(f"VACUUM ANALYZE {table}")
            result.vacuum_seconds = time.perf_counter() - began
            for table in TABLES:
                result.bytes_by_table[table] = int(
                    await db.fetchval("SELECT pg_total_relation_size($1)", table)
                )
            history, current, _ = await LongStreamGrower(db).load(SCOPE, STREAM, lambda _t0: 1)
            assert current == epochs - 1
            rng = random.Random(21)

            def pick() -> int:
                return rng.randint(2, epochs - 2 - WINDOW)

            with tempfile.TemporaryDirectory() as work:
                served = await start_served(Path(work), "--db-url", url)
                channel = Channel("127.0.0.1", served.grpc_port)
                try:
                    stub = ControllerServiceStub(channel)
                    async with aiohttp.ClientSession() as http:
                        for label, call in calls(stub, http, served.rest_base, db, history).items():
                            result.latencies[label] = await measure(call, pick, args.seconds, args.min_calls)
                            print(f"  {epochs:,}: {label} done", file=sys.stderr)
                    result.truncation_seconds = await truncate(stub, db, history, args.truncate_at)
                finally:
                    channel.close()
                    await served.stop()
        finally:
            await db.close()
    finally:
        await admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        await admin.close()
    return result


def report(sizes: list[Size]) -> None:
    for s in sizes:
        per_table = ", ".join(f"{t} {b / s.epochs:,.1f}" for t, b in s.bytes_by_table.items())
        print(
            f"{s.epochs:>12,} epochs: seeded in {s.seed_seconds:,.1f} s "
            f"({s.epochs / s.seed_seconds:,.0f} epochs/s), "
            f"VACUUM ANALYZE {s.vacuum_seconds:,.1f} s, {sum(s.bytes_by_table.values()) / 2**20:,.0f} MiB = "
            f"{s.bytes_per_epoch:,.1f} bytes/epoch ({per_table}); truncation to a cut deep in the history "
            f"{s.truncation_seconds * 1000:,.0f} ms"
        )
    base, *others = sizes
    header = f"{'query':<46}" + "".join(f"{f'{s.epochs:,} p50/p99 ms':>26}" for s in sizes)
    print(header + "".join(f"{f'p99 x{s.epochs // base.epochs}':>12}" for s in others))
    for label, base_lat in base.latencies.items():
        line = f"{label:<46}"
        for s in sizes:
            lat = s.latencies[label]
            line += f"{f'{percentile(lat, 0.5):.2f} / {percentile(lat, 0.99):.2f} (n={len(lat)})':>26}"
        for s in others:
            ratio = percentile(s.latencies[label], 0.99) / percentile(base_lat, 0.99)
            verdict = "ok" if ratio <= TARGET_RATIO else "OVER"
            line += f"{f'{ratio:.2f} {verdict}':>12}"
        print(line)


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", default="1000000,31000000", help="comma-separated; the first is the base")
    parser.add_argument("--seconds", type=float, default=5.0, help="measured seconds per query")
    parser.add_argument(
        "--min-calls", type=int, default=20, help="at least this many measured calls per query"
    )
    parser.add_argument("--chunk-epochs", type=int, default=1_000_000)
    parser.add_argument(
        "--truncate-at", type=int, default=1_000, help="the epoch whose cut the stream is truncated to"
    )
    args = parser.parse_args()
    sizes: list[Size] = []
    async with throwaway_cluster() as cluster:
        for epochs in (int(v) for v in args.epochs.split(",")):
            sizes.append(await one_size(cluster.admin_url(), epochs, args))
    report(sizes)


if __name__ == "__main__":
    asyncio.run(main())
