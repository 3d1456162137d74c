"""What the attack tests of issue 32 (and bench/hostile.py) share: a server's resident memory, a
probe's p99, whether the server ended a connection, a gRPC channel leaving from another address,
the leadership check, and a store client once the store serves a segment."""

from __future__ import annotations

import asyncio
import socket
import statistics
import time
from pathlib import Path

import aiohttp
from grpclib.client import Channel
from grpclib.protocol import H2Protocol

from app.segmentstore.wire import commands as wc
from app.testing.served import ServedProcess
from tests.segmentstore.server_harness import Client, rid


def rss_kb(pid: int | str = "self") -> int:
    """The resident set of process `pid` (this one by default), in KiB, from /proc."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmRSS for pid {pid}")


def p99(latencies: list[float]) -> float:
    """The 99th percentile, interpolated (the one value itself when there is one)."""
    if len(latencies) < 2:
        return latencies[0]
    return statistics.quantiles(latencies, n=100, method="inclusive")[98]


def socket_ended(sock: socket.socket) -> bool:
    """Whether the server has ended a non-blocking socket: what it sent before is read past first."""
    try:
        while sock.recv(1 << 20):
            pass
    except BlockingIOError:
        return False
    except ConnectionError:
        return True
    return True


class BoundChannel(Channel):
    """A grpclib channel whose connection leaves from `local_host` (grpclib has no option): another
    loopback address is another client to a per-address limit."""

    def __init__(self, host: str, port: int, local_host: str) -> None:
        super().__init__(host, port)
        self._local_host = local_host

    async def _create_connection(self) -> H2Protocol:
        _, protocol = await self._loop.create_connection(
            self._protocol_factory, self._host, self._port, local_addr=(self._local_host, 0)
        )
        return protocol


async def reader_ended(reader: asyncio.StreamReader, timeout_s: float) -> bool:
    """Whether the server ends the connection within `timeout_s` (whatever it sent before)."""
    try:
        async with asyncio.timeout(timeout_s):
            while await reader.read(1 << 20):
                pass
    except TimeoutError:
        return False
    except ConnectionError:
        return True
    return True


async def ok_json(http: aiohttp.ClientSession, url: str) -> object:
    async with http.get(url) as response:
        assert response.status == 200, await response.text()
        return await response.json()


async def leader_and_ready(http: aiohttp.ClientSession, served: ServedProcess) -> dict[str, object] | None:
    """The process's own cluster record when it leads, owns every bucket and is ready; else None."""
    local = await ok_json(http, f"{served.rest_base}/v1/cluster/self")
    assert isinstance(local, dict)
    owned = local["owned"]
    ready = await ok_json(http, f"{served.rest_base}/v1/health/readiness")
    if not (local["leader"] and ready is True and isinstance(owned, dict)):
        return None
    # Every bucket, not some of each service: after a lost session they come back a few at a time.
    async with http.get(f"{served.rest_base}/v1/cluster/buckets") as response:
        if response.status == 503:
            # The metadata store is away for a moment (a pool recovering its sessions): not yet.
            return None
        assert response.status == 200, await response.text()
        rows = await response.json()
    assert isinstance(rows, dict)
    every: dict[str, set[int]] = {}
    for row in rows["buckets"]:
        every.setdefault(row["service"], set()).add(row["bucket"])
    if every and all(set(owned.get(service, ())) == buckets for service, buckets in every.items()):
        return local
    return None


async def until_leader_and_ready(
    http: aiohttp.ClientSession, served: ServedProcess, timeout_s: float
) -> dict[str, object]:
    deadline = time.monotonic() + timeout_s
    while (local := await leader_and_ready(http, served)) is None:
        assert time.monotonic() < deadline, (
            f"not leader and ready {timeout_s:.0f} s on: "
            + str(await ok_json(http, f"{served.rest_base}/v1/cluster/self"))
            + "\n"
            + "\n".join(line for line in served.log().splitlines() if " INFO " not in line)[-3000:]
        )
        await asyncio.sleep(0.1)
    return local


async def client_once_served(address: tuple[str, int], segment: str) -> Client:
    """A store client with `segment` created, once the store serves its container (serve maps the
    containers to its store a moment after it starts: WrongHost until then)."""
    client = await Client.connect(address)
    deadline = time.monotonic() + 30
    while True:
        reply = await client.call(wc.CreateSegment(rid(), segment, 0, 0, ""))
        if isinstance(reply, wc.SegmentCreated | wc.SegmentAlreadyExists):
            return client
        assert isinstance(reply, wc.WrongHost), reply
        assert time.monotonic() < deadline, "the store never served the segment"
        await asyncio.sleep(0.2)
