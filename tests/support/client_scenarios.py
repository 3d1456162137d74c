"""The scripts the real Pravega Python client runs in the end-to-end tests, by name: each drives
the client through one scenario and leaves what it saw in `result` (see tests/support/client.py).
The end-to-end tests run them against `serve` and check what they must; the differential test
(tests/conformance/test_python_differential.py) runs every one against `serve` and against Pravega
0.13 standalone and compares the results."""

from __future__ import annotations

# `attempt` in the prelude catches ValueError only; a closed transaction raises TxnFailedException.
ATTEMPT_ANY = """
def attempt_any(fn, *args):
    try:
        return {"ok": fn(*args)}
    except Exception as exc:
        return {"error": type(exc).__name__ + ": " + str(exc)[:300]}
"""

# Only the calls the client makes of a controller: no event is written (the end-to-end test runs
# it with no segment store to write to).
COMMIT_AND_ABORT = (
    ATTEMPT_ANY
    + """
import time

def timed(fn, *args):
    start = time.monotonic()
    value = fn(*args)
    return value, round(time.monotonic() - start, 3)

manager.create_scope("txs")
manager.create_stream("txs", "s", 2)
writer = manager.create_transaction_writer("txs", "s", 7)

committed, begin_s = timed(writer.begin_txn)
open_before_commit, is_open_s = timed(committed.is_open)
_, commit_s = timed(committed.commit)
open_after_commit, _ = timed(committed.is_open)

aborted, _ = timed(writer.begin_txn)
open_before_abort, _ = timed(aborted.is_open)
_, abort_s = timed(aborted.abort)
open_after_abort, _ = timed(aborted.is_open)

result = {
    # get_txn_id() is the 128-bit id as a Python int: (highBits << 64) | lowBits. As a
    # string, so that JSON keeps every bit whatever the reader does with big numbers.
    "committed_id": str(committed.get_txn_id()),
    "aborted_id": str(aborted.get_txn_id()),
    "open_before_commit": open_before_commit,
    "open_after_commit": open_after_commit,
    "open_before_abort": open_before_abort,
    "open_after_abort": open_after_abort,
    "closed_commit_again": attempt_any(committed.commit),
    "closed_abort_again": attempt_any(aborted.abort),
    "seconds": {"begin": begin_s, "is_open": is_open_s, "commit": commit_s, "abort": abort_s},
}
"""
)

# The README's example, with keys: the events of each key come back in the order written.
WRITE_AND_READ = """
import asyncio

manager.create_scope("rw")
manager.create_stream("rw", "orders", 3)
writer = manager.create_writer("rw", "orders", 100)
for i in range(60):
    writer.write_event(f"{i % 4}:{i}", f"customer-{i % 4}")
writer.flush()

async def read_all(expected):
    group = manager.create_reader_group("dashboard", "rw", "orders")
    reader = group.create_reader("reader-1")
    events = []
    while len(events) < expected:
        segment_slice = await reader.get_segment_slice_async()
        events.extend(event.data().decode() for event in segment_slice)
        await asyncio.sleep(0.001)  # the client's thread done with the GIL (docs/dataplane.md)
        reader.release_segment(segment_slice)
    reader.reader_offline()
    return events

events = asyncio.run(read_all(60))
per_key = {}
for text in events:
    key, index = text.split(":")
    per_key.setdefault(key, []).append(int(index))
result = {
    "count": len(events),
    "distinct": len(set(events)),
    "per_key_in_order": all(indexes == sorted(indexes) for indexes in per_key.values()),
    "keys": sorted(per_key),
}
"""

SCENARIOS: dict[str, str] = {
    "create_scope_and_list_scopes": """
result = {
    "first": manager.create_scope("alpha"),
    "again": manager.create_scope("alpha"),
    "beta": manager.create_scope("beta"),
    "invalid": attempt(manager.create_scope, "bad/name"),
    "stream": manager.create_stream("alpha", "st", 1),
}
# As Pravega's own test_tags does: the streams of the first scope listed.
scopes = [str(s) for s in manager.list_scope()]
result["scopes"] = scopes
result["first_streams"] = [str(s) for s in manager.list_stream(scopes[0])]
result["system_streams"] = [str(s) for s in manager.list_stream("_system")]
""",
    "create_stream_with_policies_and_tags": """
manager.create_scope("sc")
result = {
    "fixed": manager.create_stream_with_policy(
        "sc", "fixed", StreamScalingPolicy.fixed_scaling_policy(3),
        StreamRetentionPolicy.none(), None),
    "by_data": manager.create_stream_with_policy(
        "sc", "by-data", StreamScalingPolicy.auto_scaling_policy_by_data_rate(100, 2, 4),
        StreamRetentionPolicy.by_size(1 << 30), ["red", "blue"]),
    "by_events": manager.create_stream_with_policy(
        "sc", "by-events", StreamScalingPolicy.auto_scaling_policy_by_event_rate(500, 3, 2),
        StreamRetentionPolicy.by_time(3600000), []),
    "plain": manager.create_stream("sc", "plain", 2),
    "duplicate": manager.create_stream("sc", "plain", 2),
    "no_scope": attempt(manager.create_stream, "missing", "s", 1),
    "tags_data": manager.get_stream_tags("sc", "by-data"),
    "tags_events": manager.get_stream_tags("sc", "by-events"),
    "tags_fixed": manager.get_stream_tags("sc", "fixed"),
    "unknown_tags": attempt(manager.get_stream_tags, "sc", "nope"),
    "streams": sorted(str(s) for s in manager.list_stream("sc")),
}
""",
    "delete_scope_non_empty_then_empty": """
manager.create_scope("full")
manager.create_stream("full", "s", 1)
manager.create_scope("empty")
result = {
    "non_empty": attempt(manager.delete_scope, "full"),
    "empty": manager.delete_scope("empty"),
    "missing": manager.delete_scope("empty"),
    "scopes": sorted(manager.list_scope()),
}
""",
    "update_seal_and_delete_stream": """
manager.create_scope("life")
manager.create_stream("life", "s", 2)
result = {
    "update": manager.update_stream_with_policy(
        "life", "s", StreamScalingPolicy.fixed_scaling_policy(3),
        StreamRetentionPolicy.by_size(1 << 20), ["green"]),
    "tags": manager.get_stream_tags("life", "s"),
    "update_missing": attempt(
        manager.update_stream_with_policy, "life", "nope",
        StreamScalingPolicy.fixed_scaling_policy(1), StreamRetentionPolicy.none(), None),
    "delete_unsealed": attempt(manager.delete_stream, "life", "s"),
    "seal": manager.seal_stream("life", "s"),
    "seal_again": manager.seal_stream("life", "s"),
    "seal_missing": attempt(manager.seal_stream, "life", "nope"),
    "delete": manager.delete_stream("life", "s"),
    "delete_missing": manager.delete_stream("life", "s"),
    "streams": sorted(str(s) for s in manager.list_stream("life")),
    "delete_scope": manager.delete_scope("life"),
}
""",
    "update_scales_the_stream": """
manager.create_scope("grow")
manager.create_stream("grow", "s", 1)
result = manager.update_stream_with_policy(
    "grow", "s", StreamScalingPolicy.fixed_scaling_policy(4), StreamRetentionPolicy.none(), None)
""",
    "commit_and_abort": COMMIT_AND_ABORT,
    "write_and_read": WRITE_AND_READ,
}
