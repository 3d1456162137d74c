"""Hostile HTTP/2 on the gRPC port of a real `serve`, before any authentication: rapid reset
(CVE-2023-44487: HEADERS then RST_STREAM, tens of thousands of streams as fast as the socket
takes them), a PING flood and a SETTINGS flood. Each connection must be told GOAWAY
ENHANCE_YOUR_CALM and closed, a legitimate client's calls made meanwhile must keep their latency,
and the process must not keep the attack's memory.

The attacker writes raw frames (hpack for the one header block) from a thread, so the probe's
event loop in the test runs beside it."""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest
from grpclib.client import Channel

from app.api.grpc.proto import controller_pb2 as pb
from app.api.grpc.proto.controller_grpc import ControllerServiceStub
from app.testing.served import ServedProcess
from tests.support.h2_frames import (
    ENHANCE_YOUR_CALM,
    GOAWAY,
    PING,
    PREFACE,
    SETTINGS,
    frame,
    rapid_reset_batches,
    read_frames,
)
from tests.support.hostile import rss_kb

pytestmark = pytest.mark.timeout(180)

PATH = "/io.pravega.controller.stream.api.grpc.v1.ControllerService/getControllerServerList"

# The measurement: 50,000 streams opened and cancelled on one connection in 3.8 s.
ATTACK_STREAMS = 50_000
# Most streams a server may look at on one connection before it cuts the connection off: its
# reset budget (200) plus one 16 KiB read of the attack's frames (about 600 streams) and slack.
LOOKED_AT_STREAMS = 2_000
SEND_BYTES = 256 * 1024
# How long the attacker keeps coming back.
ATTACK_S = 8.0
# Frames per sendall: large enough to go as fast as the socket allows.
BATCH_STREAMS = 500
# The process's resident memory may grow this much over the attack, and no more (issue 32).
RSS_MARGIN_KB = 100 * 1024
# Issue 32 asks p99 < 1 s for a legitimate call during an attack; this loaded 2-core machine runs
# other suites beside this one, hence a little margin.
PROBE_P99_LIMIT_S = 1.25
# A call stalled past this is counted at this latency (far above the limit, so it fails the p99).
PROBE_CALL_TIMEOUT_S = 10.0


@dataclass
class Attack:
    """One attacking connection: what the server sent back (GOAWAY code) and whether it closed."""

    goaway_code: int | None = None
    # The GOAWAY's last stream id: the highest stream the server looked at before cutting off.
    goaway_last_stream: int | None = None
    closed_by_server: bool = False
    frames_sent: int = 0
    done: threading.Event = field(default_factory=threading.Event)


def _read_until_closed(sock: socket.socket, attack: Attack) -> None:
    def seen(kind: int, _flags: int, _stream_id: int, payload: bytes) -> None:
        if kind == GOAWAY and attack.goaway_code is None:
            last_stream, attack.goaway_code = struct.unpack("!II", payload[:8])
            attack.goaway_last_stream = last_stream & 0x7FFFFFFF

    try:
        attack.closed_by_server = read_frames(sock, seen)
    finally:
        attack.done.set()


def _attack(port: int, frames: Iterator[bytes | memoryview], wait_for_close_s: float = 10.0) -> Attack:
    """Sends `frames` (each a batch of bytes) on one connection as fast as it can, reading what
    the server answers; stops when the server closes it. Blocking: run it in a thread."""
    attack = Attack()
    sock = socket.create_connection(("127.0.0.1", port))
    reader = threading.Thread(target=_read_until_closed, args=(sock, attack), daemon=True)
    reader.start()
    try:
        sock.sendall(PREFACE + frame(SETTINGS, 0, 0))
        for batch in frames:
            if attack.done.is_set():
                break
            sock.sendall(batch)
            attack.frames_sent += 1
        attack.done.wait(wait_for_close_s)
    except OSError:
        attack.done.wait(wait_for_close_s)
    finally:
        sock.close()
        reader.join(timeout=5)
    return attack


def _rapid_reset_batches(streams: int) -> Iterator[bytes]:
    return rapid_reset_batches(PATH, streams, BATCH_STREAMS)


def _control_flood(kind: int, payload: bytes, frames: int, per_batch: int = 2_000) -> Iterator[bytes]:
    one = frame(kind, 0, 0, payload)
    for start in range(0, frames, per_batch):
        yield one * min(per_batch, frames - start)


async def _probe_until(stub: ControllerServiceStub, stop: Callable[[], bool]) -> list[float]:
    latencies: list[float] = []
    while not stop():
        started = time.monotonic()
        try:
            await stub.getControllerServerList(pb.ServerRequest(), timeout=PROBE_CALL_TIMEOUT_S)
        except Exception:  # a refused or stalled call counts as slow as the timeout
            latencies.append(PROBE_CALL_TIMEOUT_S)
        else:
            latencies.append(time.monotonic() - started)
        await asyncio.sleep(0.01)
    return latencies


def _p99(latencies: list[float]) -> float:
    ordered = sorted(latencies)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


async def _warm(stub: ControllerServiceStub) -> None:
    for _ in range(20):
        await stub.getControllerServerList(pb.ServerRequest(), timeout=PROBE_CALL_TIMEOUT_S)


async def test_rapid_reset_is_cut_off_with_enhance_your_calm_and_costs_neither_latency_nor_memory(
    served: ServedProcess,
) -> None:
    channel = Channel("127.0.0.1", served.grpc_port)
    try:
        stub = ControllerServiceStub(channel)
        await _warm(stub)
        rss_before = rss_kb(served.process.pid)

        # Each connection tries 50,000 streams; the attacker comes back on a new connection each
        # time one is cut off, for ATTACK_S, so the probe runs through a sustained attack.
        attacks: list[Attack] = []
        # Built once: the attacker thread then spends its time in sendall, without the GIL, and
        # not in Python beside the probe's event loop.
        payload = memoryview(b"".join(_rapid_reset_batches(ATTACK_STREAMS)))

        def attack_for_a_while() -> None:
            until = time.monotonic() + ATTACK_S
            while time.monotonic() < until:
                chunks = (payload[i : i + SEND_BYTES] for i in range(0, len(payload), SEND_BYTES))
                attack = _attack(served.grpc_port, chunks)
                attacks.append(attack)
                if not attack.closed_by_server:
                    return

        attacker = asyncio.ensure_future(asyncio.to_thread(attack_for_a_while))
        latencies = await _probe_until(stub, attacker.done)
        await attacker

        first = attacks[0]
        assert first.goaway_code == ENHANCE_YOUR_CALM, (first, served.log()[-3000:])
        assert first.closed_by_server, first
        # Cut off early: the server looked at a few hundred of the 50,000 streams (the client's
        # stream ids are odd: id 2n-1 is its n-th stream), not at what the socket still held.
        assert all(a.goaway_code == ENHANCE_YOUR_CALM for a in attacks), attacks
        assert all((a.goaway_last_stream or 0) < 2 * LOOKED_AT_STREAMS for a in attacks), attacks
        p99 = _p99(latencies)
        print(f"rapid reset: {len(attacks)} connections, {len(latencies)} probes, p99 {p99 * 1000:.1f} ms")
        assert len(latencies) >= 10, latencies  # enough calls for the p99 to mean something
        assert p99 < PROBE_P99_LIMIT_S, (len(latencies), sorted(latencies)[-5:])

        # The attack's memory is not kept once its connections are gone.
        deadline = time.monotonic() + 20
        while (grown := rss_kb(served.process.pid) - rss_before) >= RSS_MARGIN_KB:
            assert time.monotonic() < deadline, f"RSS grew {grown} kB over the attack and stayed"
            await asyncio.sleep(0.2)
        print(f"rapid reset: RSS {rss_before} kB before, grown {grown} kB after")
        # And the server still serves.
        await stub.getControllerServerList(pb.ServerRequest(), timeout=PROBE_CALL_TIMEOUT_S)
    finally:
        channel.close()


@pytest.mark.parametrize(
    ("kind", "payload"),
    [(PING, b"12345678"), (SETTINGS, b"")],
    ids=["ping-flood", "settings-flood"],
)
async def test_control_frame_flood_is_cut_off_with_enhance_your_calm(
    served: ServedProcess, kind: int, payload: bytes
) -> None:
    channel = Channel("127.0.0.1", served.grpc_port)
    try:
        stub = ControllerServiceStub(channel)
        await _warm(stub)
        rss_before = rss_kb(served.process.pid)
        attacker = asyncio.ensure_future(
            asyncio.to_thread(_attack, served.grpc_port, _control_flood(kind, payload, 200_000))
        )
        latencies = await _probe_until(stub, attacker.done)
        attack = await attacker

        assert attack.goaway_code == ENHANCE_YOUR_CALM, (attack, served.log()[-3000:])
        assert attack.closed_by_server, attack
        assert _p99(latencies) < PROBE_P99_LIMIT_S, (len(latencies), sorted(latencies)[-5:])
        assert rss_kb(served.process.pid) - rss_before < RSS_MARGIN_KB
    finally:
        channel.close()
