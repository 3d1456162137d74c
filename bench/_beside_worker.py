"""The roles of bench/beside_pravega.py that tests/support/pravega_worker.py has not got in the shape
the bench needs, on the same Pravega Python client: `python -m bench._beside_worker ROLE JSON-ARGS`.

Each role times its own loop (CLOCK_MONOTONIC, after the client connected and before it tears down)
and reports the loop's CPU, so the bench can tell when the client, not the server, set the pace.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from typing import Any

import pravega_client  # type: ignore[import-untyped]

from tests.support.pravega_worker import event_payload, finish, stream_manager


def loop_cpu_s(before: os.times_result) -> float:
    now = os.times()
    return now.user + now.system - before.user - before.system


def wait_for_start(args: dict[str, Any]) -> float:
    """Sleeps until `start_at` (CLOCK_MONOTONIC, shared by the processes of this host), so that
    clients started one after another on a busy machine load the server together; returns how
    late this one was (0 when on time or not asked to wait)."""
    start_at = args.get("start_at")
    if start_at is None:
        return 0.0
    pause = float(start_at) - time.monotonic()
    if pause > 0:
        time.sleep(pause)
    return max(0.0, -pause)


def _random_payload(index: int, keys: int, size: int) -> tuple[bytes, str]:
    data, key = event_payload("e", index, keys, 0)
    return data + os.urandom(max(0, size - len(data))), key


def write(args: dict[str, Any]) -> None:
    """`count` events of `size` bytes over `keys` routing keys, up to `inflight` unacknowledged,
    one flush at the end (the acknowledgement of all of them)."""
    manager = stream_manager(args)
    writer = manager.create_writer(args["scope"], args["stream"], args.get("inflight", 1000))
    count, keys, size = args["count"], args["keys"], args["size"]
    # Built before the clock starts: the bench measures the client's writes, not the formatting.
    if args.get("random"):
        # A MiB of distinct random events per key: no block repeats within lz4's 64 KiB window.
        events = [_random_payload(index, keys, size) for index in range(min(count, keys * 1024))]
    else:
        events = [event_payload("e", index, keys, size) for index in range(min(count, keys * 64))]
    late_s = wait_for_start(args)
    cpu = os.times()
    started = time.monotonic()
    for index in range(count):
        data, key = events[index % len(events)]
        writer.write_event_bytes(data, key)
    writer.flush()
    ended = time.monotonic()
    finish({"written": count, "t0": started, "t1": ended, "loop_cpu_s": loop_cpu_s(cpu), "late_s": late_s})


async def catch_up_async(args: dict[str, Any]) -> None:
    """One reader of a new group reads the stream from its head until `count` events came."""
    manager = stream_manager(args)
    config = pravega_client.StreamReaderGroupConfig(False, args["scope"], args["stream"])
    group = manager.create_reader_group_with_config(args["group"], args["scope"], config)
    reader = group.create_reader("reader-0")
    count, deadline = args["count"], time.monotonic() + args["deadline_s"]
    read = read_bytes = 0
    cpu = os.times()
    started = time.monotonic()
    while read < count:
        if time.monotonic() > deadline:
            raise TimeoutError(f"read {read} of {count} events")
        slice_ = await reader.get_segment_slice_async()
        for event in slice_:
            read_bytes += len(event.data())
            read += 1
        reader.release_segment(slice_)
    ended = time.monotonic()
    finish({"read": read, "bytes": read_bytes, "t0": started, "t1": ended, "loop_cpu_s": loop_cpu_s(cpu)})


def catch_up(args: dict[str, Any]) -> None:
    asyncio.run(catch_up_async(args))


def ack(args: dict[str, Any]) -> None:
    """`count` times: write one event and flush it, timing the pair (the acknowledgement's round
    trip). The first `skip` are left out: they include the connection's set-up."""
    manager = stream_manager(args)
    writer = manager.create_writer(args["scope"], args["stream"], 10)
    data = b"a" * args["size"]
    latencies_ms: list[float] = []
    cpu = os.times()
    started = time.monotonic()
    for index in range(args["count"] + args["skip"]):
        began = time.monotonic_ns()
        writer.write_event_bytes(data, "k")
        writer.flush()
        if index >= args["skip"]:
            latencies_ms.append((time.monotonic_ns() - began) / 1e6)
    ended = time.monotonic()
    finish({"latencies_ms": latencies_ms, "t0": started, "t1": ended, "loop_cpu_s": loop_cpu_s(cpu)})


def txn(args: dict[str, Any]) -> None:
    """From `start_at` for `seconds`, back to back: begin, `size` events of `event_size` bytes,
    commit (returned: the controller accepted the commit). Reports how many were committed, and
    the last one's id (as a decimal string: a u128), whose commit the bench waits to complete."""
    manager = stream_manager(args)
    writer = manager.create_transaction_writer(args["scope"], args["stream"], args["writer_id"])
    size, payload = args["size"], b"x" * args["event_size"]
    late_s = wait_for_start(args)
    cpu = os.times()
    started = time.monotonic()
    committed = 0
    last_txn = None
    while time.monotonic() - started < args["seconds"]:
        transaction = writer.begin_txn()
        for _ in range(size):
            transaction.write_event_bytes(payload, "k")
        transaction.commit()
        committed += 1
        last_txn = transaction.get_txn_id()
    ended = time.monotonic()
    finish(
        {
            "committed": committed,
            "last_txn": None if last_txn is None else str(last_txn),
            "t0": started,
            "t1": ended,
            "loop_cpu_s": loop_cpu_s(cpu),
            "late_s": late_s,
        }
    )


ROLES = {"write": write, "catch-up": catch_up, "ack": ack, "txn": txn}

if __name__ == "__main__":
    import json

    ROLES[sys.argv[1]](json.loads(sys.argv[2]))
