"""One entry for every process (app/process.py): the test harness's controller runs the same
components as a real `serve` on the same database: its embedded segment store registered as a
cluster member and given containers by the leader, the same health contributors with the same
background loops behind them, and the metadata-store probe."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg

from app.testing.controller import running_controller, serving
from app.testing.served import start_served

DEADLINE_S = 60.0


async def _get(http: aiohttp.ClientSession, url: str) -> tuple[int, Any]:
    async with http.get(url) as response:
        return response.status, await response.json()


async def _until(check: Any, what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not await check():
        assert time.monotonic() < deadline, f"not within {DEADLINE_S:.0f}s: {what}"
        await asyncio.sleep(0.2)


def _shape(tree: dict[str, Any]) -> dict[str, list[str]]:
    """Each contributor's name with the names in its details (the loops behind it), the values
    (ports, counts, member ids) left out: they differ between any two processes."""
    return {name: sorted(c["details"]) for name, c in tree["children"].items()}


async def test_the_harness_runs_the_components_serve_runs(db_url: str, tmp_path: Path) -> None:
    served = await start_served(tmp_path, "--db-url", db_url)
    db = await asyncpg.connect(db_url)
    try:
        async with (
            running_controller(db_url) as services,
            serving(services, services.runtime.health) as servers,
            aiohttp.ClientSession() as http,
        ):
            bases = {"serve": served.rest_base, "harness": f"http://127.0.0.1:{servers.rest_port}"}

            async def both_ready() -> bool:
                answers = [await _get(http, f"{b}/v1/health/readiness?strict=true") for b in bases.values()]
                return all(a == (200, True) for a in answers)

            await _until(both_ready, "serve and the harness ready")
            trees = {name: (await _get(http, f"{b}/v1/health"))[1] for name, b in bases.items()}
            assert _shape(trees["harness"]) == _shape(trees["serve"]), trees
            contributors = trees["harness"]["children"]
            # The probe ran: it turns metadata-store UP from STARTING.
            assert contributors["metadata-store"]["status"] == "UP", trees
            assert contributors["segment-store"]["details"]["mode"] == "embedded", trees

            # Both embedded stores are cluster members, and the leader gives each containers.
            store_ports = {served.segment_store_port, services.runtime.store.address[1]}

            async def both_stores_own_containers() -> bool:
                hosts = {r["port"] for r in await db.fetch("SELECT port FROM segment_store_hosts")}
                owners = {r["port"] for r in await db.fetch("SELECT DISTINCT port FROM container_map")}
                return store_ports <= hosts and store_ports <= owners

            await _until(both_stores_own_containers, "both stores registered and owning containers")
            # The same background tasks: every loop the controller wires, the probe, and the
            # store's membership, listener and orphan sweep, all running under one supervision.
            tasks = services.runtime.loops.tasks
            expected = {*services.controller.loops(), "metadata-store-probe"}
            expected |= {"segment-store-membership", "segment-store-listener", "segment-store-orphans"}
            if services.runtime.settings.tier != "none":  # make test-tier: both run on the tier
                expected |= {"segment-store-storage-writer", "segment-store-chunk-collector"}
            assert set(tasks) == expected
            assert all(not task.done() for task in tasks.values())
    finally:
        await db.close()
        served.process.terminate()
        assert await asyncio.wait_for(served.process.wait(), 30) == 0, served.log()
