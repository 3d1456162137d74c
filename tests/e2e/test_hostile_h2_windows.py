"""Hostile HTTP/2 flow control and header blocks on the gRPC port of a real `serve`: clients that
ask for large replies and never take them, header blocks that never end, and an HPACK bomb.

- Zero window: the client advertises SETTINGS_INITIAL_WINDOW_SIZE 0 and never sends a
  WINDOW_UPDATE, on many streams of many connections; every reply stays in the server's memory.
- Unread socket (CVE-2019-9517, internal data buffering): the client opens every window wide and
  then never reads its socket; the replies pile up in the server's write buffer.

The server must bound the bytes it holds unsent per connection and in all, cutting off a
connection past its budget (GOAWAY ENHANCE_YOUR_CALM, closed), and reset a stream that has not
been able to send for its stall deadline; a legitimate client's calls keep their latency and the
process's memory stays bounded and comes back.

- CONTINUATION flood (CVE-2024-27316 class): HEADERS without END_HEADERS, then CONTINUATION frames
  of 16 KiB that never end the block, on many connections; h2 alone buffers 64 of them each.
- HPACK bomb: one 4 KiB header entered in the dynamic table, then referenced with one byte each.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from grpclib.client import Channel
from hpack import Encoder

from app.api.grpc.proto import controller_pb2 as pb
from app.api.grpc.proto.controller_grpc import ControllerServiceStub
from app.testing.served import ServedProcess, start_served
from tests.e2e.test_hostile_h2 import (
    PATH,
    PROBE_P99_LIMIT_S,
    RSS_MARGIN_KB,
    Attack,
    _attack,
    _p99,
    _probe_until,
    _warm,
)
from tests.support.h2_frames import (
    CONTINUATION,
    DATA,
    END_HEADERS,
    END_STREAM,
    ENHANCE_YOUR_CALM,
    GOAWAY,
    HEADERS,
    PREFACE,
    RST_STREAM,
    SETTINGS,
    WINDOW_UPDATE,
    frame,
    goaway_code,
    read_frames,
    unary_calls,
)
from tests.support.hostile import rss_kb

pytestmark = pytest.mark.timeout(180)

CANCEL = 0x8
REFUSED_STREAM_CODE = 0x7
SETTINGS_INITIAL_WINDOW_SIZE = 0x4
MAX_WINDOW = 2**31 - 1
LIST_SCOPES = "/io.pravega.controller.stream.api.grpc.v1.ControllerService/listScopes"

# A full page of scopes with the longest names: each listScopes reply is about 250 KiB.
SCOPES = 1_000
SCOPE_NAME_BYTES = 255
# Streams each attacking connection opens (the server runs 100 at once per connection) and the
# connections: together far more reply bytes than the 100 MB margin. They are opened a few
# at a time, so what piles up is replies not taken, not requests being worked on at once.
STREAMS_PER_CONNECTION = 100
STREAMS_PER_BATCH = 10
BATCH_INTERVAL_S = 0.5
# Zero window: each connection runs only its first few calls (--grpc-max-calls-before-first-reply,
# 4 by default), about 1 MB of replies; sixteen hold twice the process's 8 MiB budget, so some are
# cut off and come back, again and again. An unread socket takes its first replies, so it has all
# its calls run until its socket backs up: six are enough.
CONNECTIONS = {"zero-window": 16, "unread-socket": 6}
CALLS_BEFORE_FIRST_REPLY = 4
# How long the attacker holds on, each connection opening its streams again when cut off.
ATTACK_S = 12.0
# While the connections churn, the process's peak: each reply held or being built costs several
# times its bytes, and a cut-off connection's are freed as its handlers end. Measured on this
# 2-core machine, idle: zero window +83 to +101 MB with each connection's first ten calls run, +68
# to +74 MB (and +35 to +40 MB after) with four run and sixteen connections; unread socket +29 to
# +35 MB (new calls refused); +490 MB without any of the limits.
PEAK_RSS_MARGIN_KB = RSS_MARGIN_KB
# The calls a new client sends at once on its fresh connection during the attack.
FRESH_BURST = 20
# The stall test's deadline: short, so the test waits for it and not the 20 s default.
STALL_S = 2.0
# CONTINUATION flood: connections, and frames each sends of the 63 h2 would buffer before its own
# limit (CONTINUATION_BACKLOG 64), 16 KiB each (the default SETTINGS_MAX_FRAME_SIZE): about 1 MiB
# per connection and 150 MiB in all without a limit on the block.
CONTINUATION_CONNECTIONS = 150
CONTINUATION_FRAMES = 63


@dataclass
class Holder:
    """One attacking connection that asks for replies and does not take them."""

    replies_started: int = 0
    data_bytes: int = 0
    resets: dict[int, int] = field(default_factory=dict)
    goaway_code: int | None = None
    closed_by_server: bool = False
    done: threading.Event = field(default_factory=threading.Event)


def _request_batches(streams: int, path: str = LIST_SCOPES) -> Iterator[bytes]:
    encoder = Encoder()
    for first in range(0, streams, STREAMS_PER_BATCH):
        batch = range(first, min(streams, first + STREAMS_PER_BATCH))
        yield unary_calls(path, (2 * n + 1 for n in batch), encoder)


def _send_paced(sock: socket.socket, streams: int, stop: threading.Event, path: str = LIST_SCOPES) -> None:
    for batch in _request_batches(streams, path):
        if stop.is_set():
            return
        sock.sendall(batch)
        stop.wait(BATCH_INTERVAL_S)


def _read_frames(sock: socket.socket, holder: Holder) -> None:
    def seen(kind: int, _flags: int, stream_id: int, payload: bytes) -> None:
        if kind == HEADERS and stream_id:
            holder.replies_started += 1
        elif kind == DATA:
            holder.data_bytes += len(payload)
        elif kind == RST_STREAM:
            holder.resets[stream_id] = struct.unpack("!I", payload)[0]
        elif kind == GOAWAY and holder.goaway_code is None:
            holder.goaway_code = goaway_code(payload)

    try:
        holder.closed_by_server = read_frames(sock, seen)
    except TimeoutError:
        return  # still open: the unread-socket holder's read timed out
    finally:
        holder.done.set()


def _hold_zero_window(port: int, streams: int, until: float, path: str = LIST_SCOPES) -> Holder:
    """Asks for `streams` replies with every stream window zero and reads what comes (no
    WINDOW_UPDATE ever), until the server closes the connection or `until` passes."""
    holder = Holder()
    sock = socket.create_connection(("127.0.0.1", port))
    reader = threading.Thread(target=_read_frames, args=(sock, holder), daemon=True)
    reader.start()
    try:
        zero_window = struct.pack("!HI", SETTINGS_INITIAL_WINDOW_SIZE, 0)
        sock.sendall(PREFACE + frame(SETTINGS, 0, 0, zero_window))
        _send_paced(sock, streams, holder.done, path)
        holder.done.wait(max(0.0, until - time.monotonic()))
    except OSError:
        pass
    finally:
        sock.close()
        reader.join(timeout=5)
    return holder


def _hold_unread(port: int, streams: int, until: float) -> Holder:
    """Opens every window wide, asks for `streams` replies and never reads its socket until
    `until`; then reads, to learn whether the server closed the connection meanwhile."""
    holder = Holder()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    # A small receive buffer: the replies wait in the server, not in this socket.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    try:
        wide = struct.pack("!HI", SETTINGS_INITIAL_WINDOW_SIZE, MAX_WINDOW)
        grow_connection = frame(WINDOW_UPDATE, 0, 0, struct.pack("!I", MAX_WINDOW - 65_535))
        sock.sendall(PREFACE + frame(SETTINGS, 0, 0, wide) + grow_connection)
        _send_paced(sock, streams, threading.Event())
        time.sleep(max(0.0, until - time.monotonic()))
        sock.settimeout(10)
        _read_frames(sock, holder)
    except OSError:
        holder.closed_by_server = True
    finally:
        sock.close()
    return holder


async def _create_scopes(stub: ControllerServiceStub) -> None:
    names = [f"s{n:04d}".ljust(SCOPE_NAME_BYTES, "x") for n in range(SCOPES)]
    for start in range(0, SCOPES, 50):
        replies = await asyncio.gather(
            *(stub.createScope(pb.ScopeInfo(scope=name), timeout=30) for name in names[start : start + 50])
        )
        assert all(r.status == pb.CreateScopeStatus.SUCCESS for r in replies), replies
    page = await stub.listScopes(pb.ScopesRequest(), timeout=30)
    assert len(page.scopes) >= SCOPES, len(page.scopes)


def _join_all(threads: list[threading.Thread]) -> None:
    for thread in threads:
        thread.join()


async def _fresh_bursts_until(port: int, stop: asyncio.Future[object]) -> list[float]:
    """A new client's first burst, again and again: a fresh connection and FRESH_BURST calls at
    once; each burst's time to its last reply. Its calls past the first few wait their turn (while
    the attacker's connections, which take no reply, hold theirs) but none is refused."""
    took: list[float] = []
    while not stop.done():
        channel = Channel("127.0.0.1", port)
        try:
            stub = ControllerServiceStub(channel)
            started = time.monotonic()
            await asyncio.gather(
                *(stub.getControllerServerList(pb.ServerRequest(), timeout=10) for _ in range(FRESH_BURST))
            )
            took.append(time.monotonic() - started)
        finally:
            channel.close()
        await asyncio.sleep(0.2)
    return took


async def _peak_rss_until(pid: int, stop: asyncio.Future[object]) -> int:
    peak = rss_kb(pid)
    while not stop.done():
        peak = max(peak, rss_kb(pid))
        await asyncio.sleep(0.1)
    return peak


@pytest.mark.parametrize("mode", ["zero-window", "unread-socket"])
async def test_replies_a_client_never_takes_are_bounded_and_cut_off(served: ServedProcess, mode: str) -> None:
    channel = Channel("127.0.0.1", served.grpc_port)
    try:
        stub = ControllerServiceStub(channel)
        await _create_scopes(stub)
        await _warm(stub)
        pid = served.process.pid
        rss_before = rss_kb(pid)
        hold = _hold_zero_window if mode == "zero-window" else _hold_unread
        holders: list[Holder] = []
        until = time.monotonic() + ATTACK_S

        def one_connection() -> None:
            # A connection cut off comes back, for as long as the attack lasts.
            while time.monotonic() < until:
                holder = hold(served.grpc_port, STREAMS_PER_CONNECTION, until)
                holders.append(holder)
                if not holder.closed_by_server:
                    return

        # Threads of their own: the default executor has too few workers for all of them.
        threads = [threading.Thread(target=one_connection, daemon=True) for _ in range(CONNECTIONS[mode])]
        for thread in threads:
            thread.start()
        attackers = asyncio.ensure_future(asyncio.to_thread(_join_all, threads))
        peak = asyncio.ensure_future(_peak_rss_until(pid, attackers))
        bursts = asyncio.ensure_future(_fresh_bursts_until(served.grpc_port, attackers))
        latencies = await _probe_until(stub, attackers.done)
        await attackers
        grown_peak = await peak - rss_before
        p99 = _p99(latencies)
        burst_times = await bursts
        print(
            f"{mode}: {len(holders)} connections, {sum(h.replies_started for h in holders)} replies started, "
            f"RSS {rss_before} kB before, peak +{grown_peak} kB, probe p99 {p99 * 1000:.1f} ms, "
            f"{len(burst_times)} fresh bursts of {FRESH_BURST}, slowest {max(burst_times) * 1000:.0f} ms"
        )
        assert burst_times and max(burst_times) < PROBE_P99_LIMIT_S, burst_times
        assert sum(h.replies_started for h in holders) >= STREAMS_PER_CONNECTION, holders[:3]
        cut_off = [h for h in holders if h.closed_by_server]
        if mode == "zero-window":
            # No connection had more than its first calls run (their replies never taken), and past
            # the process's budget connections were cut off (GOAWAY ENHANCE_YOUR_CALM).
            assert all(h.replies_started <= CALLS_BEFORE_FIRST_REPLY for h in holders), [
                h.replies_started for h in holders
            ]
            assert cut_off and all(h.goaway_code == ENHANCE_YOUR_CALM for h in cut_off), [
                h.goaway_code for h in cut_off
            ]
        else:
            # Each connection's new calls were refused once its socket backed up, or it was cut off.
            contained = [h for h in holders if h.closed_by_server or REFUSED_STREAM_CODE in h.resets.values()]
            assert len(contained) == len(holders), [
                (h.replies_started, h.goaway_code, h.resets) for h in holders
            ]
        assert grown_peak < PEAK_RSS_MARGIN_KB, f"RSS grew {grown_peak} kB during the attack"
        assert p99 < PROBE_P99_LIMIT_S, f"a legitimate call's p99 was {p99:.3f} s during the attack"
        # Given back once the attack ends (malloc_trim after the dropped replies are collected).
        deadline = time.monotonic() + 10
        while (after := rss_kb(pid) - rss_before) >= RSS_MARGIN_KB:
            assert time.monotonic() < deadline, f"RSS still +{after} kB 10 s after the attack"
            await asyncio.sleep(0.2)
        print(f"{mode}: RSS +{after} kB after")
        page = await stub.listScopes(pb.ScopesRequest(), timeout=10)
        assert len(page.scopes) >= SCOPES
    finally:
        channel.close()


async def test_a_reply_stalled_by_a_zero_window_is_reset_after_the_stall_deadline(
    db_url: str, tmp_path: Path
) -> None:
    served = await start_served(tmp_path, "--db-url", db_url, "--grpc-send-stall-s", str(STALL_S))
    try:
        started = time.monotonic()
        streams = 3
        holder = await asyncio.to_thread(
            _hold_zero_window, served.grpc_port, streams, time.monotonic() + 5 * STALL_S + 5, PATH
        )
        waited = time.monotonic() - started
        # Every stream told CANCEL after the deadline: the client holding its window closed keeps
        # no reply in the server for longer.
        assert holder.resets == {2 * n + 1: CANCEL for n in range(streams)}, (holder, served.log()[-3000:])
        assert waited >= STALL_S, waited
        assert holder.data_bytes == 0, holder
    finally:
        assert await served.stop() == 0, served.log()


def _endless_header_block(frames: int) -> Iterator[bytes]:
    encoder = Encoder()
    block = encoder.encode([(":method", "POST"), (":scheme", "http"), (":path", PATH)])
    yield frame(HEADERS, 0, 1, block)
    for _ in range(frames):
        yield frame(CONTINUATION, 0, 1, b"\x00" * 16_384)


async def test_a_continuation_flood_is_cut_off_past_the_header_block_limit(served: ServedProcess) -> None:
    pid = served.process.pid
    channel = Channel("127.0.0.1", served.grpc_port)
    try:
        stub = ControllerServiceStub(channel)
        await _warm(stub)
        rss_before = rss_kb(pid)
        attacks: list[Attack] = []

        def one_connection() -> None:
            attacks.append(_attack(served.grpc_port, _endless_header_block(CONTINUATION_FRAMES), 5.0))

        threads = [
            threading.Thread(target=one_connection, daemon=True) for _ in range(CONTINUATION_CONNECTIONS)
        ]
        for thread in threads:
            thread.start()
        attackers = asyncio.ensure_future(asyncio.to_thread(_join_all, threads))
        peak = asyncio.ensure_future(_peak_rss_until(pid, attackers))
        latencies = await _probe_until(stub, attackers.done)
        await attackers
        grown_peak = await peak - rss_before
        print(
            f"continuation: {len(attacks)} connections, peak +{grown_peak} kB, "
            f"p99 {_p99(latencies) * 1000:.1f} ms"
        )
        assert len(attacks) == CONTINUATION_CONNECTIONS
        # Cut off after the first CONTINUATION (the 8 KiB list's block may reach 10 KiB), not the 63rd.
        assert all(a.goaway_code == ENHANCE_YOUR_CALM and a.closed_by_server for a in attacks), [
            (a.goaway_code, a.closed_by_server) for a in attacks[:5]
        ]
        assert grown_peak < RSS_MARGIN_KB, f"RSS grew {grown_peak} kB during the attack"
        assert _p99(latencies) < PROBE_P99_LIMIT_S, (len(latencies), sorted(latencies)[-5:])
    finally:
        channel.close()


def _hpack_bomb() -> bytes:
    # A literal with incremental indexing (0x40, new name) enters the dynamic table as entry 62;
    # each one-byte indexed reference (0x80 | 62) then decodes to the whole 4 KiB header again.
    encoder = Encoder()
    request = encoder.encode(
        [(":method", "POST"), (":scheme", "http"), (":path", PATH), (":authority", "127.0.0.1")]
    )
    name, value = b"x-bomb", b"v" * 4_000
    literal = b"\x40" + bytes([len(name)]) + name + b"\x7f" + _hpack_integer(len(value) - 127) + value
    # The encoder's own entries come first in the table: the bomb is the newest, index 62.
    return request + literal + bytes([0x80 | 62]) * 14


def _hpack_integer(rest: int) -> bytes:
    out = b""
    while rest >= 128:
        out += bytes([rest % 128 + 128])
        rest //= 128
    return out + bytes([rest])


async def test_an_hpack_bomb_is_refused_with_enhance_your_calm(served: ServedProcess) -> None:
    bomb = frame(HEADERS, END_HEADERS | END_STREAM, 1, _hpack_bomb())
    attack = await asyncio.to_thread(_attack, served.grpc_port, iter([bomb]), 10.0)
    assert attack.goaway_code == ENHANCE_YOUR_CALM, (attack, served.log()[-3000:])
    assert attack.closed_by_server, attack


async def test_a_new_connection_runs_its_first_calls_only_until_a_reply_is_taken(
    served: ServedProcess,
) -> None:
    """Until one of its replies is taken, a connection runs four calls at once; the rest wait (a
    waiting call the client resets never runs), and all run once a reply is taken."""
    started: list[int] = []
    ended: list[int] = []
    refused: list[int] = []

    def seen(kind: int, flags: int, stream_id: int, payload: bytes) -> None:
        if kind == HEADERS and stream_id and stream_id not in started:
            started.append(stream_id)
        if kind == HEADERS and flags & END_STREAM:
            ended.append(stream_id)
        if kind == RST_STREAM:
            refused.append(stream_id)

    def exchange() -> None:
        sock = socket.create_connection(("127.0.0.1", served.grpc_port))
        sock.settimeout(3)
        encoder = Encoder()
        try:
            zero_window = struct.pack("!HI", SETTINGS_INITIAL_WINDOW_SIZE, 0)
            calls = unary_calls(PATH, [1, 3, 5, 7, 9, 11, 13, 15], encoder)
            sock.sendall(PREFACE + frame(SETTINGS, 0, 0, zero_window) + calls)
            _read_for(sock, seen, 1.5)
            assert sorted(started) == [1, 3, 5, 7], (started, ended, refused)
            # Streams 9 and 11 reset while waiting; then the window of stream 1 opens.
            sock.sendall(
                frame(RST_STREAM, 0, 9, struct.pack("!I", CANCEL))
                + frame(RST_STREAM, 0, 11, struct.pack("!I", CANCEL))
            )
            sock.sendall(
                b"".join(frame(WINDOW_UPDATE, 0, n, struct.pack("!I", 65_535)) for n in (1, 3, 5, 7, 13, 15))
            )
            _read_for(sock, seen, 1.5)
        finally:
            sock.close()

    await asyncio.to_thread(exchange)
    assert sorted(started) == [1, 3, 5, 7, 13, 15], (started, ended, refused)
    assert sorted(ended) == [1, 3, 5, 7, 13, 15], (started, ended, refused)
    assert refused == [], refused


def _read_for(sock: socket.socket, on_frame: Callable[[int, int, int, bytes], None], seconds: float) -> None:
    """Hands `on_frame` what arrives for `seconds`."""
    buffered = b""
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        sock.settimeout(left)
        try:
            chunk = sock.recv(65_536)
        except TimeoutError:
            break
        if not chunk:
            break
        buffered += chunk
        while len(buffered) >= 9:
            length = int.from_bytes(buffered[:3], "big")
            if len(buffered) < 9 + length:
                break
            kind, flags, stream_id = (
                buffered[3],
                buffered[4],
                struct.unpack("!I", buffered[5:9])[0] & 0x7FFFFFFF,
            )
            on_frame(kind, flags, stream_id, buffered[9 : 9 + length])
            buffered = buffered[9 + length :]
