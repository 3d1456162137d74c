"""Issue 35: Patroni stopped on the primary (SIGSTOP for 45 s: a hung agent, its PostgreSQL running
on, unmanaged), under the real client's writes through `serve` on every node's shared address.

The synchronous standby is promoted once the leader key expires; the old primary stays writable
meanwhile, so `serve` may stay with it (a multi-host URL cannot tell two writable nodes apart) and
its writes then wait. What must hold: every event the client was told was written is read back
exactly once and in key order, and once Patroni resumes, the old primary is demoted and rewound
into a standby of the new one. With Debian's Patroni 3.0.2 it was not: resumed, it took the leader
key back and the promoted standby was rewound, discarding what it had committed (docs/ha.md);
`dev ha` runs 3.0.4, which has the fix.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import time
from pathlib import Path

import aiohttp
import pytest

from app.dev import ha
from app.store.migrate import upgrade_to_head
from tests.support.dataplane import (
    ClientProcess,
    Controller,
    read_back_exactly_once,
    start_with_segment_store,
)
from tests.support.hostile import until_leader_and_ready

pytestmark = [pytest.mark.interop, pytest.mark.timeout(600)]

SCOPE, STREAM, KEYS, PREFIX = "frozen", "events", 4, "f"
RATE, COUNT = 40, 3200
FROZEN_S = 45.0


async def test_a_frozen_patroni_on_the_primary_loses_no_acknowledged_event(
    tmp_path: Path, ha_cluster: ha.HaState
) -> None:
    cluster = ha_cluster
    old = await asyncio.to_thread(ha.leader, cluster)
    assert old is not None
    await asyncio.to_thread(upgrade_to_head, cluster.service_url())
    served = await start_with_segment_store(tmp_path, "--db-url", cluster.service_url())
    clients: list[ClientProcess] = []
    frozen = False
    try:
        async with aiohttp.ClientSession() as http:
            await until_leader_and_ready(http, served, 60)
        controller = Controller(served)
        try:
            await controller.create_stream(SCOPE, STREAM, 2)
        finally:
            controller.close()
        uri = f"tcp://127.0.0.1:{served.grpc_port}"
        writer = await ClientProcess.start(
            "write", tmp_path, uri=uri, scope=SCOPE, stream=STREAM, count=COUNT, keys=KEYS,
            prefix=PREFIX, rate=RATE, progress_every=10,
        )  # fmt: skip
        clients.append(writer)
        await writer.until(lambda r: r["acked"] >= 200, timeout_s=90)
        os.kill(cluster.pids[old.name], signal.SIGSTOP)
        frozen, frozen_at = True, time.monotonic()
        new_at = await asyncio.to_thread(ha.wait_new_leader, cluster, old)
        await asyncio.sleep(max(0.0, frozen_at + FROZEN_S - time.monotonic()))
        os.kill(cluster.pids[old.name], signal.SIGCONT)
        frozen = False
        # The writer's reports, every 10 acknowledgements, from the freeze to its end: the longest
        # wait between two is how long writes stood still.
        reported_at = [frozen_at]

        def noted(report: dict[str, float]) -> bool:
            if report["at"] > frozen_at:
                reported_at.append(report["at"])
            return report["acked"] >= COUNT

        await writer.until(noted, timeout_s=300)
        assert (await writer.result(timeout_s=60))["written"] == COUNT
        stall_s = max(later - earlier for earlier, later in itertools.pairwise(reported_at))
        print(
            f"frozen patroni ({old.name}, first of the URL's hosts: {old == cluster.nodes[0]}): new leader "
            f"{new_at - frozen_at:.2f} s after the freeze, writes stood still {stall_s:.2f} s at most"
        )
        await read_back_exactly_once(uri, tmp_path, SCOPE, STREAM, COUNT, PREFIX, KEYS)
        # Thawed, the old leader's Patroni finds its key taken, demotes and rewinds its PostgreSQL.
        await asyncio.to_thread(ha.wait_ready, cluster, 180)
        roles = {m["name"]: m["role"] for m in await asyncio.to_thread(ha.members, cluster)}
        assert roles[old.name] in ("sync_standby", "replica"), roles
    finally:
        if frozen:
            os.kill(cluster.pids[old.name], signal.SIGCONT)
        for client in clients:
            await client.kill()
        await served.stop()
