"""The cost of delegation-token checks in the segment store, per append block and per read: the
same appends and reads over loopback TCP (Pravega's wire protocol, one connection) to two stores
on one throwaway PostgreSQL, one with authentication off and one on, interleaved in one run; and
the check alone, in process (a writer's expiry re-check per block, a cached and a first-time
verification of a request's token).

    .venv/bin/python bench/tokens.py [--blocks 2000] [--event-bytes 100] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.clock import SystemClock
from app.security.tokens import Permission, TokenSigner, TokenVerifier, stream_resource
from app.segmentstore.server import SegmentStoreServer
from app.segmentstore.server.tokens import TokenGate
from app.segmentstore.wire import commands as wc
from app.segmentstore.wire.codec import encode, read_command
from app.store.pool import create_pool
from app.store.segment_data import PgSegmentStorage
from bench._common import throwaway_database

KEY = os.urandom(64)
_ids = iter(range(1, 1 << 62))


class Wire:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, address: tuple[str, int]) -> Wire:
        reader, writer = await asyncio.open_connection(*address)
        wire = cls(reader, writer)
        await wire.call(wc.Hello(wc.WIRE_VERSION, wc.OLDEST_COMPATIBLE_VERSION))
        return wire

    async def call(self, cmd: wc.Command) -> wc.Command:
        self.writer.write(encode(cmd))
        await self.writer.drain()
        return await read_command(self.reader)

    async def close(self) -> None:
        self.writer.close()
        await self.writer.wait_closed()


async def appends(
    address: tuple[str, int], segment: str, token: str, blocks: int, event: bytes
) -> list[float]:
    wire = await Wire.open(address)
    writer = uuid.uuid4().int
    setup = await wire.call(wc.SetupAppend(next(_ids), writer, segment, token))
    assert isinstance(setup, wc.AppendSetup), setup
    framed = encode(wc.Event(event))
    took = []
    for n in range(1, blocks + 1):
        start = time.perf_counter()
        reply = await wire.call(wc.AppendBlockEnd(writer, len(framed), framed, 1, n, next(_ids)))
        took.append(time.perf_counter() - start)
        assert isinstance(reply, wc.DataAppended), reply
    await wire.close()
    return took


async def reads(address: tuple[str, int], segment: str, token: str, count: int) -> list[float]:
    wire = await Wire.open(address)
    took = []
    for _ in range(count):
        start = time.perf_counter()
        reply = await wire.call(wc.ReadSegment(segment, 0, 1024, token, next(_ids)))
        took.append(time.perf_counter() - start)
        assert isinstance(reply, wc.SegmentRead), reply
    await wire.close()
    return took


def line(label: str, seconds: list[float]) -> str:
    us = sorted(s * 1e6 for s in seconds)
    return (
        f"{label:<34} mean {statistics.fmean(us):8.1f} us  p50 {us[len(us) // 2]:8.1f} us  "
        f"p99 {us[int(len(us) * 0.99)]:8.1f} us"
    )


def per_call_us(fn: Callable[[], object], n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - start) / n * 1e6


def in_process() -> None:
    signer = TokenSigner(KEY)
    gate = TokenGate(TokenVerifier(KEY))
    token = signer.issue(stream_resource("b", "s"), Permission.READ_UPDATE)
    read = wc.ReadSegment("b/s/0.#epoch.0", 0, 1024, token, 1)
    verdict = gate.check(read)
    assert verdict is not None and verdict.ok
    fresh = [signer.issue(stream_resource("b", f"s{i}"), Permission.READ) for i in range(2000)]
    reads_of = [wc.ReadSegment(f"b/s{i}/0.#epoch.0", 0, 1024, t, 1) for i, t in enumerate(fresh)]
    it = iter(reads_of)
    claim = stream_resource("b", "s")
    rows = [
        ("append block: writer's expiry re-check", per_call_us(lambda: gate.still_valid(verdict), 200_000)),
        ("request with a token seen before", per_call_us(lambda: gate.check(read), 100_000)),
        ("request with a new token (HS512 verify)", per_call_us(lambda: gate.check(next(it)), 2000)),
        ("signing one token (controller)", per_call_us(lambda: signer.issue(claim, Permission.READ), 2000)),
    ]
    print("in process, per call:")
    for label, us in rows:
        print(f"  {label:<42} {us:7.2f} us")


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--blocks", type=int, default=2000)
    parser.add_argument("--event-bytes", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    in_process()
    event = os.urandom(args.event_bytes)
    token = TokenSigner(KEY).issue(stream_resource("b", "s"), Permission.READ_UPDATE)
    async with throwaway_database() as url:
        pool = await create_pool(url, min_size=2, max_size=4)
        storage = PgSegmentStorage(pool, SystemClock())
        off = await SegmentStoreServer.start(storage, "127.0.0.1", 0)
        gate = TokenGate(TokenVerifier(KEY))
        on = await SegmentStoreServer.start(storage, "127.0.0.1", 0, tokens=gate)
        try:
            for name in ("off", "on", "warm"):
                await storage.create_segment(f"b/s/{name}.#epoch.0", "stream", 0, 0, 0)
            await appends(off.address, "b/s/warm.#epoch.0", "", 200, event)
            results: dict[str, list[float]] = {"off": [], "on": [], "read off": [], "read on": []}
            for _ in range(args.rounds):  # interleaved, so drift hits both alike
                results["off"] += await appends(off.address, "b/s/off.#epoch.0", "", args.blocks, event)
                results["on"] += await appends(on.address, "b/s/on.#epoch.0", token, args.blocks, event)
                results["read off"] += await reads(off.address, "b/s/off.#epoch.0", "", args.blocks)
                results["read on"] += await reads(on.address, "b/s/on.#epoch.0", token, args.blocks)
            print(f"over loopback, {args.rounds} x {args.blocks} requests each, {args.event_bytes} B events:")
            print(line("append block, auth off", results["off"]))
            print(line("append block, auth on", results["on"]))
            print(line("read (1 KiB), auth off", results["read off"]))
            print(line("read (1 KiB), auth on", results["read on"]))
        finally:
            await on.close()
            await off.close()
            await pool.close()


if __name__ == "__main__":
    asyncio.run(main())
