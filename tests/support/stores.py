"""`pgcontroller segment-store` as a real subprocess: a `StoreProcess` is handed out once its ready
file names the port it listens on (and it has registered and read the container map)."""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from app.segmentstore.wire import commands as wc
from app.testing.served import ChildProcess, start_ready
from tests.segmentstore.server_harness import Client, rid


@dataclass
class StoreProcess(ChildProcess):
    process: asyncio.subprocess.Process
    port: int
    log_path: Path
    # The metrics listener's bound port (ready-file key `metrics_port`); None with --no-metrics.
    metrics_port: int | None = None

    @property
    def address(self) -> tuple[str, int]:
        return ("127.0.0.1", self.port)

    async def sigkill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        assert await asyncio.wait_for(self.process.wait(), 10) == -signal.SIGKILL


async def start_store(work_dir: Path, name: str, db_url: str, *args: str) -> StoreProcess:
    """One store on a free port of 127.0.0.1 (a fixed one when `args` names --segment-store-port),
    its metrics listener on another (never the fixed default: stores run side by side)."""
    ready = work_dir / f"{name}.ready.json"
    log_path = work_dir / f"{name}.log"
    args = (
        "--db-url", db_url, "--segment-store-port", "0", "--segment-store-metrics-port", "0",
        "--ready-file", str(ready), *args,
    )  # fmt: skip
    process, info = await start_ready("segment-store", args, ready, log_path)
    return StoreProcess(process, info["segment_store_port"], log_path, info.get("metrics_port"))


async def serves(store: StoreProcess, segment: str) -> bool:
    """Whether `store` owns the container of `segment` now (a store follows the container map on
    its own, by LISTEN or its poll, so a map just written is not yet its view)."""
    client = await Client.connect(store.address)
    try:
        reply = await client.call(wc.GetStreamSegmentInfo(rid(), segment, ""))
    finally:
        await client.close()
    return not isinstance(reply, wc.WrongHost)


async def eventually(check: Callable[[], Awaitable[bool]], timeout_s: float, what: str) -> float:
    """Seconds until `check` holds; fails after `timeout_s`."""
    started = time.monotonic()
    while not await check():
        assert time.monotonic() - started < timeout_s, f"not within {timeout_s}s: {what}"
        await asyncio.sleep(0.05)
    return time.monotonic() - started
