"""Issue 33: Pravega's Python client test `test_ReadfromTail` against `serve`: a reader group
created at a stream's tail, then two events written without a flush between them; the reader's
first slice must hold both. Pravega's client keeps one append block in flight per segment, so the
second event reaches the store only once the first is acknowledged (durably committed here);
the reader's read, parked at the tail, is woken by the first commit and lingers for the second
(`--segment-store-tail-linger-s`, tails.py). Here the linger is 10 ms, not the default 2 ms: the
suite runs three workers on two cores, and a client process that waits a few milliseconds for a
core sends its second event after 2 ms have passed (19 of 20 in one CI run). On an idle machine
the default gives 20 in 20 (`bench/beside_pravega.py --only tail-slice`, where Pravega standalone
itself gives 13-19)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from app.testing.served import ServedProcess
from tests.support.dataplane import ClientProcess, start_with_segment_store

pytestmark = [pytest.mark.interop, pytest.mark.timeout(240)]

RUNS = 20


@pytest.fixture
async def served(db_url: str, tmp_path: Path) -> AsyncIterator[ServedProcess]:
    # Parked reads left behind by each run's reader answer within 2 s: the client's calls that
    # take a reader offline wait for them (20 s with the default tail wait).
    instance = await start_with_segment_store(
        tmp_path,
        "--db-url",
        db_url,
        "--segment-store-tail-wait-s",
        "2",
        "--segment-store-tail-linger-s",
        "0.01",
    )
    try:
        yield instance
    finally:
        code = await instance.stop()
        assert code == 0, instance.log()


async def test_a_reader_at_the_tail_gets_two_events_written_together_in_its_first_slice(
    served: ServedProcess, tmp_path: Path
) -> None:
    client = await ClientProcess.start(
        "tail-slice", tmp_path, uri=served.grpc_uri, scope="tail", stream="s", group="g", count=RUNS
    )
    result = await client.result(180)
    assert result["sizes"] == [2] * RUNS, f"first slices' sizes over {RUNS} runs: {result['sizes']}"
