"""The reading role of bench/tier.py, on Pravega's Python client: `python -m bench._tier_worker
verify-read JSON-ARGS`. One reader of a new group reads `count` events from the stream's head
and checks, event by event, that each routing key's sequence numbers (written by
tests/support/pravega_worker.py `write`) come exactly once and in order."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from typing import Any

import pravega_client  # type: ignore[import-untyped]

from bench._beside_worker import loop_cpu_s
from tests.support.pravega_worker import finish, stream_manager


async def verify_read_async(args: dict[str, Any]) -> None:
    manager = stream_manager(args)
    config = pravega_client.StreamReaderGroupConfig(False, args["scope"], args["stream"])
    group = manager.create_reader_group_with_config(args["group"], args["scope"], config)
    reader = group.create_reader("reader-0")
    count, keys, prefix = args["count"], args["keys"], args.get("prefix", "e").encode()
    deadline = time.monotonic() + args["deadline_s"]
    expected = [0] * keys
    read = read_bytes = wrong = 0
    cpu = os.times()
    started = time.monotonic()
    while read < count:
        if time.monotonic() > deadline:
            raise TimeoutError(f"read {read} of {count} events")
        slice_ = await reader.get_segment_slice_async()
        for event in slice_:
            data = event.data()
            read += 1
            read_bytes += len(data)
            # b"e007:00001234|xxx": key 7, its 1234th event.
            key, _, seq = data[len(prefix) : data.index(b"|")].partition(b":")
            k, s = int(key), int(seq)
            if s != expected[k]:
                wrong += 1
            expected[k] = s + 1
        reader.release_segment(slice_)
    ended = time.monotonic()
    finish(
        {
            "read": read,
            "bytes": read_bytes,
            "out_of_order_or_duplicate": wrong,
            "complete": sum(expected) == count,
            "t0": started,
            "t1": ended,
            "loop_cpu_s": loop_cpu_s(cpu),
        }
    )


if __name__ == "__main__":
    import json

    if sys.argv[1] != "verify-read":
        raise SystemExit(f"unknown role {sys.argv[1]}")
    asyncio.run(verify_read_async(json.loads(sys.argv[2])))
