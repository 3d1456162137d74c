"""What one hand-off between two processes costs on this machine: a 50-byte message sent back and
forth between two processes over a loopback TCP connection and a Unix socket pair, the two on
different CPUs and on the same one (pinned), and unpinned as the scheduler places them.

    .venv/bin/python bench/handoff.py [--count 20000]

Each line: the round trip (two hand-offs, each a send that wakes the other process from its
receive), the time the sending side spent in send(), and the sending process's CPU per round
trip. An acknowledgement crosses processes twice per round trip it makes: Pravega standalone's
ack one round trip (client and JVM), serve's two (client and serve, serve and its PostgreSQL), so
this is the part of the gap between the two acks that no work inside serve can remove.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import time
from collections.abc import Callable

MESSAGE = b"x" * 50


def _tcp_pair() -> tuple[socket.socket, socket.socket]:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        near = socket.create_connection(listener.getsockname())
        far, _ = listener.accept()
    for end in (near, far):
        end.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return near, far


def _unix_pair() -> tuple[socket.socket, socket.socket]:
    return socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)


def _echo(far: socket.socket) -> None:
    while data := far.recv(len(MESSAGE)):
        far.sendall(data)


def round_trips(pair: Callable[[], tuple[socket.socket, socket.socket]], count: int,
                near_cpu: int | None, far_cpu: int | None) -> tuple[float, float, float]:  # fmt: skip
    """(median round trip, mean time in send(), the sender's CPU per round trip), in µs."""
    near, far = pair()
    child = os.fork()
    if child == 0:  # the echoing process: exits without running the parent's clean-up
        near.close()
        if far_cpu is not None:
            os.sched_setaffinity(0, {far_cpu})
        try:
            _echo(far)
        finally:
            os._exit(0)
    far.close()
    allowed = os.sched_getaffinity(0)
    try:
        if near_cpu is not None:
            os.sched_setaffinity(0, {near_cpu})
        trips: list[float] = []
        in_send = 0.0
        cpu_began = time.process_time()
        for _ in range(count):
            began = time.perf_counter()
            near.sendall(MESSAGE)
            sent = time.perf_counter()
            received = 0
            while received < len(MESSAGE):
                received += len(near.recv(len(MESSAGE)))
            trips.append(time.perf_counter() - began)
            in_send += sent - began
        cpu = time.process_time() - cpu_began
    finally:
        near.close()
        os.waitpid(child, 0)
        os.sched_setaffinity(0, allowed)
    return statistics.median(trips) * 1e6, in_send / count * 1e6, cpu / count * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--count", type=int, default=20_000, help="round trips per line")
    args = parser.parse_args()
    cpus = sorted(os.sched_getaffinity(0))
    placements: list[tuple[str, int | None, int | None]] = [("unpinned", None, None)]
    if len(cpus) > 1:
        placements.append((f"CPUs {cpus[0]} and {cpus[1]}", cpus[0], cpus[1]))
    placements.append((f"both on CPU {cpus[0]}", cpus[0], cpus[0]))
    print(f"handoff: {args.count} round trips of {len(MESSAGE)} bytes per line, {len(cpus)} CPUs")
    for transport, pair in (("loopback TCP", _tcp_pair), ("Unix socket", _unix_pair)):
        for label, near_cpu, far_cpu in placements:
            trip, in_send, cpu = round_trips(pair, args.count, near_cpu, far_cpu)
            print(f"  {transport:12} {label:16} round trip p50 {trip:6.1f} µs, in send() {in_send:5.1f} µs, "
                  f"sender's CPU {cpu:5.1f} µs per round trip", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
