"""One role of the real Pravega Python client (`pravega_client`), run as its own process:
`python -m tests.support.pravega_worker ROLE JSON-ARGS`.

The client holds the GIL inside every blocking call and retries some failures forever, so a
thread cannot be bounded or even observed from the test's event loop; a process can be read
line by line and killed. Each role prints `PROGRESS {json}` lines while it works and one
`RESULT {json}` line at the end; bulky output (the events read) goes to the file `out`.
The process leaves with os._exit: tearing the client's runtime down can block on tasks that
still retry against a store that is gone.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import sys
import time
from typing import Any

import pravega_client  # type: ignore[import-untyped]

# How many consecutive empty acquisitions (each waits up to 1 s inside the client) before the
# reader asks the group whether any segment is left to read.
IDLE_ROUNDS_BEFORE_CHECK = 2
# sys.getrefcount of a slice future (its argument and the caller's name counted) once the client's
# runtime thread that resolved it is done with it: 2 for a slice, 3 for the empty slice that ends
# a second's wait; 4 and 8 while that thread still holds it (pravega-client 0.3.7, measured).
RESOLVED_FUTURE_REFS = 3
# The loop's idle turns (the GIL free) while that thread finishes, and how many at most (a
# second's worth): past them the caller goes on, as it did before it waited at all.
GIL_HANDOFF_S = 0.0005
GIL_HANDOFF_TURNS = 2000


def emit(kind: str, payload: dict[str, Any]) -> None:
    print(f"{kind} {json.dumps(payload)}", flush=True)


def finish(payload: dict[str, Any]) -> None:
    times = os.times()
    emit("RESULT", {**payload, "cpu_s": times.user + times.system})
    sys.stdout.flush()
    os._exit(0)


def event_payload(prefix: str, index: int, keys: int, size: int) -> tuple[bytes, str]:
    """Event `index` of a write run: key `index % keys`, per-key sequence `index // keys`,
    padded to `size` bytes; the text before the padding identifies it uniquely."""
    key = index % keys
    head = f"{prefix}{key:03d}:{index // keys:08d}|".encode()
    return head + b"x" * max(0, size - len(head)), f"k{key:03d}"


def stream_manager(args: dict[str, Any]) -> Any:
    """With `auth`, the client asks the controller for delegation tokens (and sends the
    credentials of its `pravega_client_auth_*` environment variables)."""
    return pravega_client.StreamManager(args["uri"], bool(args.get("auth", False)), False)


def write(args: dict[str, Any]) -> None:
    """Writes `count` events over `keys` routing keys with up to `inflight` unacknowledged, at
    most `rate` per second if given; flushes every `progress_every` events and reports how many
    are acknowledged so far. The result's t0/t1 bound the writing in CLOCK_MONOTONIC."""
    manager = stream_manager(args)
    writer = manager.create_writer(args["scope"], args["stream"], args.get("inflight", 1000))
    count, keys, size = args["count"], args["keys"], args.get("size", 0)
    every, prefix = args.get("progress_every", 1000), args.get("prefix", "e")
    rate = args.get("rate")  # events/s, so that a test's action lands while writes flow
    stop = args.get("stop")  # a file: once it exists, the writer stops at its next report
    started = time.monotonic()  # CLOCK_MONOTONIC: comparable across processes of this host
    for index in range(count):
        if rate and index % 100 == 0:
            time.sleep(max(0.0, started + index / rate - time.monotonic()))
        data, key = event_payload(prefix, index, keys, size)
        writer.write_event_bytes(data, key)
        if (index + 1) % every == 0:
            writer.flush()
            now = time.monotonic()  # "at": comparable with the test's own clock (same host)
            emit("PROGRESS", {"acked": index + 1, "seconds": now - started, "at": now})
            if stop and os.path.exists(stop):
                count = index + 1
                break
    writer.flush()
    ended = time.monotonic()
    finish({"written": count, "seconds": ended - started, "t0": started, "t1": ended})


async def next_slice(reader: Any) -> Any:
    """The reader's next slice, returned once the client's runtime thread that resolved its
    future is done with Python. That thread resolves it holding the GIL, lets go of the GIL to
    wake this loop, and needs it again to finish; a blocking call made before then
    (release_segment, get_streamcut: each holds the GIL inside the client's runtime) keeps it
    waiting, with whatever tasks it holds, until the client's 30 s request timeout, and again at
    the next try: chaos runs' readers stood still for minutes so (gdb: the loop's thread in
    release_segment's block_on, a runtime thread in pyo3-asyncio's set_result taking the GIL)."""
    future = reader.get_segment_slice_async()
    slice_ = await future
    for _ in range(GIL_HANDOFF_TURNS):
        if sys.getrefcount(future) <= RESOLVED_FUTURE_REFS:
            break
        await asyncio.sleep(GIL_HANDOFF_S)
    return slice_


def group_has_segments(group: Any) -> bool:
    """False once the group has no segment left to read (a sealed stream read to its end): the
    client then panics in get_streamcut ("Expected a StreamCut but none found"), the only
    signal of a stream's end that its Python API gives."""
    try:
        group.get_streamcut()
    except BaseException as exc:  # pyo3's PanicException derives from BaseException
        if "none found" in str(exc):
            return False
        raise
    return True


async def read_async(args: dict[str, Any]) -> None:
    """Reads with `readers` readers of one group, in one process so that the order in which
    events reach the test is one global order: per routing key it is the write order. Stops
    when the group has nothing left to read (`until_end`) or at `deadline_s`."""
    manager = stream_manager(args)
    config = pravega_client.StreamReaderGroupConfig(False, args["scope"], args["stream"])
    group = manager.create_reader_group_with_config(args["group"], args["scope"], config)
    readers = [group.create_reader(f"reader-{i}") for i in range(args.get("readers", 2))]
    deadline = time.monotonic() + args["deadline_s"]
    events: list[tuple[int, str]] = []
    latencies_ms: list[float] = []
    stop_after = args.get("stop_after")  # a count: stop there instead of at the stream's end
    idle_rounds, open_checks, ended = 0, 0, False
    last_report = 0

    async def one(index: int) -> int:
        slice_ = await next_slice(readers[index])
        got = 0
        for event in slice_:
            name = bytes(event.data()).split(b"|", 1)[0].decode()
            if args.get("latency"):  # the writer put its send time (monotonic ns) first
                latencies_ms.append((time.monotonic_ns() - int(name.rpartition(":")[2])) / 1e6)
            events.append((index, name))
            got += 1
        readers[index].release_segment(slice_)
        return got

    while time.monotonic() < deadline:
        # One reader at a time, each slice awaited before the next is asked for: the client has
        # hung for good with two slice futures in flight.
        got = 0
        for index in range(len(readers)):
            got += await one(index)
        idle_rounds = 0 if got else idle_rounds + 1
        if stop_after is not None and len(events) >= stop_after:
            break
        if idle_rounds >= IDLE_ROUNDS_BEFORE_CHECK and args.get("until_end", True):
            if not group_has_segments(group):
                ended = True
                break
            open_checks += 1
            idle_rounds = 0
            emit("PROGRESS", {"read": len(events), "open_checks": open_checks})
        elif len(events) - last_report >= args.get("progress_every", 10_000):
            last_report = len(events)
            emit("PROGRESS", {"read": len(events), "open_checks": open_checks})
    write_out(args["out"], events)
    summary = {"read": len(events), "ended": ended, "open_checks": open_checks}
    finish({**summary, "latencies_ms": latencies_ms} if args.get("latency") else summary)


def write_out(path: str, events: list[tuple[int, str]]) -> None:
    with open(path, "w", encoding="utf-8") as out:
        json.dump(events, out)


def read(args: dict[str, Any]) -> None:
    asyncio.run(read_async(args))


def txn(args: dict[str, Any]) -> None:
    """Writes `before` plain events, then opens two transactions on the same routing key,
    interleaving plain events with their writes; commits the first after `after` more plain
    events and aborts the second."""
    manager = pravega_client.StreamManager(args["uri"])
    scope, stream, key = args["scope"], args["stream"], "tk"
    plain = manager.create_writer(scope, stream, 100)
    writer = manager.create_transaction_writer(scope, stream, 7)
    committed, aborted = writer.begin_txn(), writer.begin_txn()
    n = 0
    for _ in range(args["before"]):
        plain.write_event(f"n:{n:04d}", key)
        n += 1
    plain.flush()
    for i in range(args["size"]):
        committed.write_event(f"c:{i:04d}", key)
        aborted.write_event(f"a:{i:04d}", key)
        plain.write_event(f"n:{n:04d}", key)
        n += 1
    for _ in range(args["after"]):
        plain.write_event(f"n:{n:04d}", key)
        n += 1
    plain.flush()
    committed.commit()
    aborted.abort()
    finish({"committed": str(committed.get_txn_id()), "aborted": str(aborted.get_txn_id()), "plain": n})


def txn_held(args: dict[str, Any]) -> None:
    """Opens a transaction and writes `size` events into it, then `before` plain events on the
    same routing key; reports the transaction and commits it only once the file `go` exists (the
    test scales the stream meanwhile, so the commit has to roll)."""
    manager = pravega_client.StreamManager(args["uri"])
    scope, stream, key = args["scope"], args["stream"], "tk"
    plain = manager.create_writer(scope, stream, 100)
    # The writer must outlive the transaction: its pinger goes with it, and commit() needs it.
    writer = manager.create_transaction_writer(scope, stream, 7)
    txn = writer.begin_txn()
    for i in range(args["size"]):
        txn.write_event(f"c:{i:04d}", key)
    for i in range(args["before"]):
        plain.write_event(f"n:{i:04d}", key)
    plain.flush()
    emit("PROGRESS", {"txn": str(txn.get_txn_id())})
    deadline = time.monotonic() + args["deadline_s"]
    while not os.path.exists(args["go"]):
        if time.monotonic() > deadline:
            raise TimeoutError("never told to commit")
        time.sleep(0.02)
    txn.commit()
    finish({"committed": str(txn.get_txn_id()), "plain": args["before"]})


def read_exactly(stream: Any, size: int, deadline: float) -> bytes:
    """readinto until `size` bytes came (a 0-byte read is an empty tail reply, not the end)."""
    buffer = bytearray()
    while len(buffer) < size:
        if time.monotonic() > deadline:
            raise TimeoutError(f"read {len(buffer)} of {size} bytes")
        chunk = bytearray(size - len(buffer))
        got = stream.readinto(chunk)
        buffer += chunk[:got]
    return bytes(buffer)


def attempt(fn: Any, *call: Any) -> dict[str, Any]:
    try:
        return {"ok": fn(*call)}
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}


def byte_stream(args: dict[str, Any]) -> None:
    """Writes `size` bytes of a known pattern, reads them back, seeks, truncates, and reports
    what each step saw; the test compares it against the pattern."""
    manager = pravega_client.StreamManager(args["uri"])
    stream = manager.create_byte_stream(args["scope"], args["stream"])
    size = args["size"]
    pattern = bytes((i * 7 + i // 251) % 256 for i in range(size))
    deadline = time.monotonic() + args["deadline_s"]
    written = 0
    for start in range(0, size, 4096):
        written += stream.write(pattern[start : start + 4096])
    stream.flush()
    result: dict[str, Any] = {"written": written, "tail": stream.current_tail_offset()}
    stream.seek(0, 0)
    result["whole_ok"] = read_exactly(stream, size, deadline) == pattern
    result["tell_after_whole"] = stream.tell()
    middle = args["middle"]
    result["seek_middle"] = stream.seek(middle, 0)
    result["middle_ok"] = read_exactly(stream, 100, deadline) == pattern[middle : middle + 100]
    result["seek_back_relative"] = stream.seek(-50, 1)
    result["relative_ok"] = read_exactly(stream, 50, deadline) == pattern[middle + 50 : middle + 100]
    result["seek_end"] = stream.seek(0, 2)
    cut = args["truncate_at"]
    stream.truncate(cut)
    result["head_after_truncate"] = stream.current_head_offset()
    result["tail_after_truncate"] = stream.current_tail_offset()
    stream.seek(cut, 0)
    result["after_cut_ok"] = read_exactly(stream, 100, deadline) == pattern[cut : cut + 100]
    stream.seek(0, 0)
    result["below_cut"] = attempt(stream.readinto, bytearray(100))
    finish(result)


def paced_write(args: dict[str, Any]) -> None:
    """Writes `rate` events/s for `seconds` on a fixed schedule (open loop), each carrying its
    send time, for a reader in another process to measure write-to-read latency."""
    manager = pravega_client.StreamManager(args["uri"])
    writer = manager.create_writer(args["scope"], args["stream"], args.get("inflight", 1000))
    rate, count, size = args["rate"], int(args["rate"] * args["seconds"]), args.get("size", 1024)
    started = time.monotonic()
    for index in range(count):
        due = started + index / rate
        pause = due - time.monotonic()
        if pause > 0:
            time.sleep(pause)
        head = f"t{index:08d}:{time.monotonic_ns()}|".encode()
        writer.write_event_bytes(head + b"x" * max(0, size - len(head)), "k")
    writer.flush()
    finish({"written": count, "seconds": time.monotonic() - started})


async def paced_read_async(args: dict[str, Any]) -> None:
    """One reader of a new group reads `stream` from its head at most `rate` events/s, reporting
    every `progress_every` events when ("at", CLOCK_MONOTONIC) it had read how many, until it has
    read `count` or the `stop` file exists: a reader of already written data, for a test to see
    how long its reads stood still."""
    manager = stream_manager(args)
    config = pravega_client.StreamReaderGroupConfig(False, args["scope"], args["stream"])
    group = manager.create_reader_group_with_config(args["group"], args["scope"], config)
    reader = group.create_reader("reader-0")
    rate, count, every = args["rate"], args["count"], args.get("progress_every", 10)
    started, read = time.monotonic(), 0
    while read < count and not _stopped(args.get("stop")):
        slice_ = await next_slice(reader)
        for _ in slice_:
            read += 1
            if read % every == 0:
                emit("PROGRESS", {"read": read, "at": time.monotonic()})
            ahead = started + read / rate - time.monotonic()
            if ahead > 0:
                await asyncio.sleep(ahead)
        reader.release_segment(slice_)
    finish({"read": read, "seconds": time.monotonic() - started})


def _stopped(stop: str | None) -> bool:
    """Whether the `stop` file (if any) exists: a stat, once a slice."""
    return bool(stop) and os.path.exists(str(stop))


def paced_read(args: dict[str, Any]) -> None:
    asyncio.run(paced_read_async(args))


def txn_load(args: dict[str, Any]) -> None:
    """Back to back for `seconds`: begin, `size` events, commit. Reports how many were committed
    (commit() returns once the controller accepted it; the merge follows in the store)."""
    manager = pravega_client.StreamManager(args["uri"])
    writer = manager.create_transaction_writer(args["scope"], args["stream"], 1)
    size, payload = args["size"], b"x" * args.get("event_size", 1024)
    started = time.monotonic()
    committed = 0
    phases = {"begin_s": 0.0, "write_s": 0.0, "commit_s": 0.0}
    cpu = os.times()
    while time.monotonic() - started < args["seconds"]:
        t0 = time.monotonic()
        txn = writer.begin_txn()
        t1 = time.monotonic()
        for _ in range(size):
            txn.write_event_bytes(payload, "k")
        t2 = time.monotonic()
        txn.commit()
        t3 = time.monotonic()
        phases["begin_s"] += t1 - t0
        phases["write_s"] += t2 - t1
        phases["commit_s"] += t3 - t2
        committed += 1
    ended = time.monotonic()
    # The CPU of the loop alone (all the client's threads), without its start-up.
    now = os.times()
    loop_cpu_s = now.user + now.system - cpu.user - cpu.system
    finish({"committed": committed, "t0": started, "t1": ended, "loop_cpu_s": loop_cpu_s, **phases})


def group_read(args: dict[str, Any]) -> None:
    """One reader `reader` of the group `group`, created by `create_reader_group` as an
    application would (from the stream's head, or from its tail if `tail`): reports
    `{"created": true}` once the group exists, then reads until `stop_after` events or, without
    it, until the group has nothing left to read (a sealed stream read to its end), and finally
    marks the reader offline, which hands its segments and positions back to the group. The
    result's `cut` is the group's stream cut after that."""
    manager = pravega_client.StreamManager(args["uri"])
    group = manager.create_reader_group(args["group"], args["scope"], args["stream"], args.get("tail", False))
    emit("PROGRESS", {"created": True})
    reader = group.create_reader(args["reader"])
    deadline = time.monotonic() + args["deadline_s"]
    stop_after = args.get("stop_after")
    events: list[tuple[int, str]] = []
    idle_rounds, ended = 0, False

    async def run() -> None:
        nonlocal idle_rounds, ended
        while time.monotonic() < deadline:
            slice_ = await next_slice(reader)
            got = 0
            for event in slice_:
                events.append((0, bytes(event.data()).split(b"|", 1)[0].decode()))
                got += 1
                if stop_after is not None and len(events) >= stop_after:
                    # Mid-slice: the released slice keeps the rest, and the reader's position
                    # (what it hands back when going offline) is right after this event.
                    break
            reader.release_segment(slice_)
            if stop_after is not None and len(events) >= stop_after:
                return
            idle_rounds = 0 if got else idle_rounds + 1
            if stop_after is None and idle_rounds >= IDLE_ROUNDS_BEFORE_CHECK:
                if not group_has_segments(group):
                    ended = True
                    return
                idle_rounds = 0

    asyncio.run(run())
    reader.reader_offline()
    write_out(args["out"], events)
    finish({"read": len(events), "ended": ended, "cut": group_cut(group)})


def group_cut(group: Any) -> dict[str, int] | None:
    """The group's stream cut once its reader handed its positions back: for each segment the
    offset after the last event read (what a Java application hands to
    updateRetentionStreamCut); None once nothing is left to read."""
    try:
        cut = group.get_streamcut()
    except BaseException as exc:  # pyo3's PanicException derives from BaseException
        if "none found" in str(exc):
            return None
        raise
    return {str(segment): int(offset) for segment, offset in cut.get_segment_offset_map().items()}


def large(args: dict[str, Any]) -> None:
    """Writes, on one routing key, a small event, one of `large_bytes` (over the client's 8 MiB
    limit for one append, so it goes through a transient segment), another small one; then tries
    `refused_bytes` with a fresh writer and reports the client's error. Then reads the stream with
    one reader of a new group until it has `expect` events (the test appends more once the first
    ones are read, so the reader waits at the tail for them), reporting the count as it goes, and
    finally each event's size and SHA-256 in the order read."""
    manager = pravega_client.StreamManager(args["uri"])
    writer = manager.create_writer(args["scope"], args["stream"], 10)
    events = [b"before|small", large_payload(args["large_bytes"]), b"after|small"]
    started = time.monotonic()
    for data in events:
        writer.write_event_bytes(data, "k")
    writer.flush()
    written = time.monotonic() - started
    refused = ""
    try:
        other = manager.create_writer(args["scope"], args["stream"], 10)
        other.write_event_bytes(large_payload(args["refused_bytes"]), "k")
        other.flush()
    except ValueError as exc:
        refused = str(exc)
    emit("PROGRESS", {"written": [describe(e) for e in events], "refused": refused, "write_s": written})
    group = manager.create_reader_group(args["group"], args["scope"], args["stream"], False)
    reader = group.create_reader("reader-0")
    deadline = time.monotonic() + args["deadline_s"]
    seen: list[dict[str, Any]] = []
    read_started = time.monotonic()

    async def run() -> None:
        while time.monotonic() < deadline and len(seen) < args["expect"]:
            slice_ = await next_slice(reader)
            got = [describe(bytes(event.data())) for event in slice_]
            reader.release_segment(slice_)
            if got:
                seen.extend(got)
                emit("PROGRESS", {"read_count": len(seen)})

    asyncio.run(run())
    finish({"read": seen, "write_s": written, "read_s": time.monotonic() - read_started})


def large_payload(size: int) -> bytes:
    """`size` bytes that are not all alike (a shifted or truncated copy would not match)."""
    return (hashlib.sha256(b"seed").digest() * (size // 32 + 1))[:size]


def describe(data: bytes) -> dict[str, Any]:
    return {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}


async def tail_slice_async(args: dict[str, Any]) -> None:
    """Pravega's Python client test `test_ReadfromTail`, `count` times on fresh streams: two
    events flushed, a reader group at the tail, two more events written without a flush, and
    the reader's first slice; reports each first slice's size (the test expects both events)."""
    manager = stream_manager(args)
    manager.create_scope(args["scope"])
    sizes: list[int] = []
    readers: list[Any] = []
    for index in range(args["count"]):
        stream = f"{args['stream']}-{index}"
        manager.create_stream(args["scope"], stream, 1)
        writer = manager.create_writer(args["scope"], stream)
        writer.write_event("test event")
        writer.write_event("test event")
        writer.flush()
        config = pravega_client.StreamReaderGroupConfig(True, args["scope"], stream)
        group_name = f"{args['group']}-{index}"
        group = manager.create_reader_group_with_config(group_name, args["scope"], config)
        reader = group.create_reader("reader-1")
        writer.write_event("test event at Tail")
        writer.write_event("test event at Tail")
        slice_ = await reader.get_segment_slice_async()
        events = [event.data() for event in slice_]
        if any(data != b"test event at Tail" for data in events):
            raise AssertionError(f"unexpected events in the first slice: {events}")
        sizes.append(len(events))
        # The reader stays (the process ends with os._exit): the client's calls that take a reader
        # offline wait behind its read parked at the tail, 30 s at times, on Pravega as here.
        readers.append((group, reader))
    finish({"both": sizes.count(2), "count": args["count"], "sizes": sizes})


def tail_slice(args: dict[str, Any]) -> None:
    asyncio.run(tail_slice_async(args))


def txn_chaos(args: dict[str, Any]) -> None:
    """For `seconds` (or until the file `stop` exists): transactions of `size` events (named
    `t{index}:{n}`), one after another, each committed; a transaction whose begin, write or
    commit fails is recorded with the error and the next one begins after a pause (under a
    database failover, say). Writes the indexes committed (commit() returned) and failed to the
    file `out`, so that a reader can tell each one's outcome."""
    manager = pravega_client.StreamManager(args["uri"])
    writer = manager.create_transaction_writer(args["scope"], args["stream"], args.get("writer_id", 11))
    started = time.monotonic()
    committed: list[int] = []
    failed: dict[int, str] = {}
    index = 0
    stop = args.get("stop")
    while time.monotonic() - started < args["seconds"] and not (stop and os.path.exists(stop)):
        try:
            txn = writer.begin_txn()
            for n in range(args["size"]):
                txn.write_event(f"t{index:05d}:{n:03d}|", "tk")
            txn.commit()
            committed.append(index)
        except Exception as exc:  # every failure is an outcome to report
            failed[index] = str(exc)[:300]
            time.sleep(0.5)
        index += 1
        if index % args.get("progress_every", 10) == 0:
            emit("PROGRESS", {"begun": index, "committed": len(committed), "failed": len(failed)})
    # The indexes go to the file `out`: a report line must stay small (the reader's line limit).
    with open(args["out"], "w", encoding="utf-8") as out:
        json.dump({"committed": committed, "failed": failed}, out)
    finish({"committed": len(committed), "failed": len(failed), "begun": index})


ROLES = {
    "write": write,
    "read": read,
    "txn": txn,
    "txn-held": txn_held,
    "bytes": byte_stream,
    "paced-write": paced_write,
    "paced-read": paced_read,
    "txn-load": txn_load,
    "group-read": group_read,
    "large": large,
    "tail-slice": tail_slice,
    "txn-chaos": txn_chaos,
}


def log_client_to(path: str) -> None:
    """The client's own log (it writes to file descriptor 1) goes to `path`; the reports keep the
    pipe the test reads, which nobody drains while a workload runs."""
    reports = os.dup(1)
    log = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(log, 1)
    os.close(log)
    sys.stdout = os.fdopen(reports, "w", buffering=1)


if __name__ == "__main__":
    role_args = json.loads(sys.argv[2])
    if role_args.get("client_log"):  # a path; RUST_LOG in the environment sets the level
        log_client_to(role_args.pop("client_log"))
    ROLES[sys.argv[1]](role_args)
