"""The chaos run's client roles, each the real Pravega Python client in its own process:
`python -m tests.support.chaos_worker ROLE JSON-ARGS`. A role reports every acknowledgement the
client gave it as it happens, so the run knows exactly which operations were promised to last.

Lines on stdout: `PROGRESS {json}` per acknowledgement, one `RESULT {json}` at the end. Every
payload carries `t`, CLOCK_MONOTONIC (comparable with the driver's, same host), so the driver can
tell when acknowledgements resumed after a fault. A role stops once the file `stop` exists.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

import pravega_client  # type: ignore[import-untyped]


def emit(kind: str, payload: dict[str, Any]) -> None:
    print(f"{kind} {json.dumps({**payload, 't': time.monotonic()})}", flush=True)


def finish(payload: dict[str, Any]) -> None:
    emit("RESULT", payload)
    sys.stdout.flush()
    # As in pravega_worker: tearing the client's runtime down can block on retrying tasks.
    os._exit(0)


def describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc)[:300]}"


def writer(args: dict[str, Any]) -> None:
    """Events `<prefix><index:08d>|...` on `keys` routing keys at about `rate` per second, flushed
    every `batch`: each flush that returns acknowledges every event before it (`acked`). The
    schedule never bursts to catch up after a stall, so a fault does not turn into a flood."""
    manager = pravega_client.StreamManager(args["uri"])
    out = manager.create_writer(args["scope"], args["stream"], args.get("inflight", 200))
    prefix, keys, rate, batch = args["prefix"], args["keys"], args["rate"], args["batch"]
    pad = b"x" * args.get("size", 64)
    started = time.monotonic()
    index = 0
    try:
        while not os.path.exists(args["stop"]):
            now = time.monotonic()
            due = started + index / rate
            if due > now:
                time.sleep(due - now)
            elif now - due > 1.0:
                started = now - index / rate
            out.write_event_bytes(f"{prefix}{index:08d}|".encode() + pad, f"k{index % keys:02d}")
            index += 1
            if index % batch == 0:
                out.flush()
                emit("PROGRESS", {"acked": index})
        out.flush()
    except BaseException as exc:  # pyo3's PanicException derives from BaseException
        if isinstance(exc, KeyboardInterrupt | SystemExit):
            raise
        finish({"written": index, "error": describe(exc)})
    finish({"acked": index, "written": index})


def txns(args: dict[str, Any]) -> None:
    """Transactions back to back until `stop`: begin, `size` events `<prefix><n:06d>-<i:02d>|`,
    then abort every third and commit the others. Each one's outcome is reported as the client
    gave it: `committed`/`aborted` once commit()/abort() returned, `failed` when the client
    raised (its outcome then is the controller's: all of its events or none)."""
    manager = pravega_client.StreamManager(args["uri"])
    out = manager.create_transaction_writer(args["scope"], args["stream"], args["writer_id"])
    prefix, size = args["prefix"], args["size"]
    n = 0
    while not os.path.exists(args["stop"]):
        txn_id: str | None = None
        report: dict[str, Any] = {"n": n}
        try:
            txn = out.begin_txn()
            txn_id = str(txn.get_txn_id())
            for i in range(size):
                txn.write_event_bytes(f"{prefix}{n:06d}-{i:02d}|".encode(), f"k{n % 4}")
            if n % 3 == 2:
                txn.abort()
                report["outcome"] = "aborted"
            else:
                txn.commit()
                report["outcome"] = "committed"
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt | SystemExit):
                raise
            report.update(outcome="failed", error=describe(exc))
        emit("PROGRESS", {**report, "txn": txn_id})
        n += 1
        time.sleep(args.get("pause_s", 0.2))
    finish({"txns": n})


ROLES = {"writer": writer, "txns": txns}

if __name__ == "__main__":
    ROLES[sys.argv[1]](json.loads(sys.argv[2]))
