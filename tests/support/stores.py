"""`pgcontroller segment-store` as a real subprocess: a `StoreProcess` is handed out once its ready
file names the port it listens on (and it has registered and read the container map)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from dataclasses import dataclass
from pathlib import Path

READY_TIMEOUT_S = 30.0


@dataclass
class StoreProcess:
    process: asyncio.subprocess.Process
    port: int
    log_path: Path

    @property
    def address(self) -> tuple[str, int]:
        return ("127.0.0.1", self.port)

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    async def stop(self, timeout_s: float = 10.0) -> int:
        if self.process.returncode is None:
            self.process.send_signal(signal.SIGTERM)
        return await asyncio.wait_for(self.process.wait(), timeout=timeout_s)

    async def sigkill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        assert await asyncio.wait_for(self.process.wait(), 10) == -signal.SIGKILL


async def start_store(work_dir: Path, name: str, db_url: str, *args: str) -> StoreProcess:
    """One store on a free port of 127.0.0.1 (a fixed one when `args` names --segment-store-port)."""
    ready = work_dir / f"{name}.ready.json"
    ready.unlink(missing_ok=True)
    log_path = work_dir / f"{name}.log"
    log_file = open(log_path, "ab")  # noqa: SIM115, ASYNC230 - a local file, handed to the child
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "app.cli",
        "segment-store",
        "--db-url",
        db_url,
        "--segment-store-port",
        "0",
        "--ready-file",
        str(ready),
        *args,
        stdout=log_file,
        stderr=log_file,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    log_file.close()
    deadline = asyncio.get_running_loop().time() + READY_TIMEOUT_S
    while not ready.exists():
        if process.returncode is not None:
            raise RuntimeError(f"segment-store exited with {process.returncode}:\n{log_path.read_text()}")
        if asyncio.get_running_loop().time() > deadline:
            process.kill()
            await process.wait()
            raise RuntimeError(f"segment-store was not ready in {READY_TIMEOUT_S}s:\n{log_path.read_text()}")
        await asyncio.sleep(0.05)
    return StoreProcess(process, json.loads(ready.read_text())["segment_store_port"], log_path)
