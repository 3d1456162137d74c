"""Which process holds the server side of a TCP connection, from the kernel's socket table
(/proc/net/tcp*) and each process's descriptors: with SO_REUSEPORT the kernel picks the listener,
and this is how a test knows which child it reached."""

from __future__ import annotations

import os
from collections.abc import Iterable

_ESTABLISHED = "01"


def _rows() -> Iterable[list[str]]:
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table, encoding="ascii") as rows:
            next(rows)
            for row in rows:
                yield row.split()


def _port(address: str) -> int:
    return int(address.rsplit(":", 1)[1], 16)


def _holders(pids: Iterable[int], inodes: set[str]) -> dict[int, int]:
    counts: dict[int, int] = {}
    for pid in pids:
        fd_dir = f"/proc/{pid}/fd"
        held = 0
        for fd in os.listdir(fd_dir):
            try:
                held += os.readlink(f"{fd_dir}/{fd}") in inodes
            except OSError:
                continue  # closed while we looked
        counts[pid] = held
    return counts


def established_by_pid(pids: Iterable[int], port: int) -> dict[int, int]:
    """How many established TCP connections on local `port` each process holds."""
    inodes = {f"socket:[{f[9]}]" for f in _rows() if f[3] == _ESTABLISHED and _port(f[1]) == port}
    return _holders(pids, inodes)


def holder_of(pids: Iterable[int], server_port: int, client_port: int) -> int | None:
    """The process among `pids` holding the server side of the connection from local port
    `client_port` to `server_port` (None when none of them does, or it is not established)."""
    inodes = {
        f"socket:[{f[9]}]"
        for f in _rows()
        if f[3] == _ESTABLISHED and _port(f[1]) == server_port and _port(f[2]) == client_port
    }
    held = [pid for pid, count in _holders(pids, inodes).items() if count]
    return held[0] if len(held) == 1 else None
