"""`pgcontroller segment-store` as a real subprocess: a `StoreProcess` is handed out once its ready
file names the port it listens on (and it has registered and read the container map)."""

from __future__ import annotations

import asyncio
import signal
from dataclasses import dataclass
from pathlib import Path

from app.testing.served import ChildProcess, start_ready


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
