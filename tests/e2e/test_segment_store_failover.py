"""Two segment-store processes and two controllers on one database; one store is SIGKILLed while
the real Pravega client writes and reads. Its containers move to the other store, the writer and
the reader carry on, nothing acknowledged is lost and nothing is read twice.

The real client (Rust 0.3.x under Python 0.3.8) re-asks the controller's getURI on every retry of
a read, but a writer retries its SetupAppend against the address it was last given, for ever,
until something answers there. So, as a supervisor would, the test starts a fresh store on the
dead one's address once the containers have moved: it owns nothing yet and answers WrongHost,
which sends the writer back to getURI and on to the store that owns its segment now.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from app.store.pool import create_pool
from app.testing.served import ServedProcess, start_served
from tests.e2e.test_segment_store_processes import FAST, eventually, host, owners
from tests.support.dataplane import ClientProcess, Controller, check_exactly_once_in_key_order, read_events
from tests.support.stores import start_store

pytestmark = [pytest.mark.interop, pytest.mark.timeout(180)]

EVENTS, KEYS, SEGMENTS = 4000, 16, 4


async def controller(tmp_path: Path, name: str, db_url: str) -> ServedProcess:
    return await start_served(
        tmp_path / name,
        "--db-url", db_url, "--no-embedded-segment-store", "--segment-store-hosts", "127.0.0.1:1",
        "--container-rebalance-delay-s", "1", *FAST,
    )  # fmt: skip


async def test_a_sigkilled_store_s_containers_move_and_the_client_carries_on(
    db_url: str, tmp_path: Path
) -> None:
    for name in ("c1", "c2"):
        (tmp_path / name).mkdir()
    c1, c2, a, b = await asyncio.gather(
        controller(tmp_path, "c1", db_url),
        controller(tmp_path, "c2", db_url),
        start_store(tmp_path, "a", db_url, *FAST),
        start_store(tmp_path, "b", db_url, *FAST),
    )
    stores = [a, b]
    pool = await create_pool(db_url, min_size=1, max_size=2)
    try:

        async def spread() -> bool:
            return set((await owners(pool)).values()) == {host(a), host(b)}

        await eventually(spread, 20, "the containers are spread over both stores")
        grpc = Controller(c1)
        try:
            info = await grpc.create_stream("fo", "s", SEGMENTS)
        finally:
            grpc.close()
        writer = await ClientProcess.start(
            "write", tmp_path, uri=c1.grpc_uri, scope="fo", stream="s", count=EVENTS, keys=KEYS,
            inflight=200, progress_every=500, rate=300,
        )  # fmt: skip
        out = tmp_path / "read.json"
        reader = await ClientProcess.start(
            "read", tmp_path, uri=c2.grpc_uri, scope="fo", stream="s", group="rg", readers=2,
            deadline_s=150, out=str(out), progress_every=500,
        )  # fmt: skip
        try:
            await writer.until(lambda p: p["acked"] >= 1000, 60)
            await reader.until(lambda p: p.get("read", 0) >= 500, 60)
            await a.sigkill()
            killed = time.monotonic()

            async def all_on_b() -> bool:
                return set((await owners(pool)).values()) == {host(b)}

            moved_s = await eventually(all_on_b, 15, "a's containers move to b")
            stores.append(
                await start_store(tmp_path, "a2", db_url, *FAST, "--segment-store-port", str(a.port))
            )
            done = await writer.result(120)
            wrote_s = time.monotonic() - killed
            assert done["written"] == EVENTS
            assert done["t0"] < killed < done["t1"], (done, killed)
            grpc = Controller(c2)
            try:
                await grpc.seal(info)
            finally:
                grpc.close()
            seen: dict[str, Any] = await reader.result(120)
            assert seen["ended"] is True, seen
            read_s = time.monotonic() - killed
        finally:
            await writer.kill()
            await reader.kill()
        print(
            f"after the kill: moved {moved_s:.1f} s, writer done {wrote_s:.1f} s, reader done {read_s:.1f} s"
        )
        check_exactly_once_in_key_order(read_events(out), "e", EVENTS, KEYS)
    finally:
        await pool.close()
        for store in stores:
            await store.stop()
        for served in (c1, c2):
            assert await served.stop() == 0, served.log()
