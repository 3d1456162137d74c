"""What the attack tests of issue 32 (and bench/hostile.py) share: a server's resident memory, a
probe's p99, whether the server ended a socket, and a gRPC channel leaving from another address."""

from __future__ import annotations

import socket
import statistics
from pathlib import Path

from grpclib.client import Channel
from grpclib.protocol import H2Protocol


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
