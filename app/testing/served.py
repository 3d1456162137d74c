"""Runs `pgcontroller serve` as a real subprocess and waits until it reports its ports: a
`ServedProcess` is only handed out once its ready file says both listeners are up."""

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
class ServedProcess:
    """One `pgcontroller serve` child: its ports (from the ready file) and where its output goes."""

    process: asyncio.subprocess.Process
    grpc_port: int
    rest_port: int
    log_path: Path
    # The embedded segment store's bound port, when this `serve` runs one (ready-file key
    # `segment_store_port`); None for a `serve` without it.
    segment_store_port: int | None = None

    @property
    def grpc_uri(self) -> str:
        return f"tcp://127.0.0.1:{self.grpc_port}"

    @property
    def rest_base(self) -> str:
        return f"http://127.0.0.1:{self.rest_port}"

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    async def stop(self, timeout_s: float = 10.0) -> int:
        if self.process.returncode is None:
            self.process.send_signal(signal.SIGTERM)
        return await asyncio.wait_for(self.process.wait(), timeout=timeout_s)


async def start_served(work_dir: Path, *extra_args: str, env: dict[str, str] | None = None) -> ServedProcess:
    ready = work_dir / "ready.json"
    # Later flags win in argparse: `extra_args` may name fixed ports (a restart keeps its ports).
    ready.unlink(missing_ok=True)
    log_path = work_dir / "serve.log"
    log_file = open(log_path, "ab")  # noqa: SIM115, ASYNC230 - a local file, handed to the child
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "app.cli",
        "serve",
        "--grpc-port",
        "0",
        "--rest-port",
        "0",
        "--segment-store-port",
        "0",
        "--ready-file",
        str(ready),
        *extra_args,
        stdout=log_file,
        stderr=log_file,
        env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
    )
    log_file.close()
    deadline = asyncio.get_running_loop().time() + READY_TIMEOUT_S
    while not ready.exists():
        if process.returncode is not None:
            raise RuntimeError(f"serve exited with {process.returncode}:\n{log_path.read_text()}")
        if asyncio.get_running_loop().time() > deadline:
            process.kill()
            await process.wait()
            raise RuntimeError(f"serve was not ready in {READY_TIMEOUT_S}s:\n{log_path.read_text()}")
        await asyncio.sleep(0.05)
    info = json.loads(ready.read_text())
    return ServedProcess(
        process, info["grpc_port"], info["rest_port"], log_path, info.get("segment_store_port")
    )
