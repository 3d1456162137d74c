"""Runs `pgcontroller serve` as a real subprocess and waits until it reports its ports: a
`ServedProcess` is only handed out once its ready file says both listeners are up."""

from __future__ import annotations

import asyncio
import json
import os
import resource
import signal
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.wiring.supervisor import die_with_parent

# Only a bound on a start that went wrong: on a 2-core machine under a full parallel suite an
# interpreter start alone has taken over 30 s (a chaos run's segment store, at load average 8).
READY_TIMEOUT_S = 60.0
# Beyond the shutdown watchdog's budget at the default settings (5 s drain + 2 x 5 s), so a child
# that hangs on its way out is cut short by its own watchdog, which logs why, before the test
# gives up on it.
STOP_TIMEOUT_S = 20.0


class ChildProcess:
    """What every pgcontroller child a test starts offers: its output so far, and a stop by
    SIGTERM awaited for its exit code. The dataclasses using it declare the two fields."""

    process: asyncio.subprocess.Process
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    async def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> int:
        """The exit code after SIGTERM. A child still running after `timeout_s` is killed, and the
        error carries the end of its log (the shutdown watchdog's stacks, if it spoke)."""
        if self.process.returncode is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return await asyncio.wait_for(self.process.wait(), timeout=timeout_s)
        except TimeoutError:
            self.process.kill()
            await self.process.wait()
            raise AssertionError(
                f"pid {self.process.pid} did not exit {timeout_s:.0f} s after SIGTERM; its log ends:\n"
                + self.log()[-6000:]
            ) from None


@dataclass
class ServedProcess(ChildProcess):
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


async def start_ready(
    command: str,
    args: Sequence[str],
    ready: Path,
    log_path: Path,
    env: dict[str, str] | None = None,
    nofile: int | None = None,
) -> tuple[asyncio.subprocess.Process, dict[str, Any]]:
    """`pgcontroller <command> <args>` as a child writing to `log_path`, handed back with the
    contents of its ready file `ready` once it has written it (`args` must name that file);
    a child that exits first, or is not ready in READY_TIMEOUT_S (then killed), is an error.
    `nofile` lowers the child's soft RLIMIT_NOFILE (a test of descriptor exhaustion)."""
    # The ready file and the log are small local files, so they are read inline (hence the
    # ASYNC240 waivers): the poll touches them every 50 ms while the child starts.
    ready.unlink(missing_ok=True)  # noqa: ASYNC240
    log_file = open(log_path, "ab")  # noqa: SIM115, ASYNC230 - a local file, handed to the child
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "app.cli",
        command,
        *args,
        stdout=log_file,
        stderr=log_file,
        env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
        # A test or bench that dies (killed, or on a broken pipe) must not leave its servers
        # running: the kernel stops them in order (SIGTERM) when it goes.
        preexec_fn=_before_exec(die_with_parent(os.getpid()), nofile),
    )
    log_file.close()
    deadline = asyncio.get_running_loop().time() + READY_TIMEOUT_S
    while not ready.exists():  # noqa: ASYNC240
        if process.returncode is not None:
            log = log_path.read_text()  # noqa: ASYNC240
            raise RuntimeError(f"{command} exited with {process.returncode}:\n{log}")
        if asyncio.get_running_loop().time() > deadline:
            process.kill()
            await process.wait()
            log = log_path.read_text()  # noqa: ASYNC240
            raise RuntimeError(f"{command} was not ready in {READY_TIMEOUT_S}s:\n{log}")
        await asyncio.sleep(0.05)
    info: dict[str, Any] = json.loads(ready.read_text())  # noqa: ASYNC240
    return process, info


def _before_exec(die: Callable[[], None] | None, nofile: int | None) -> Callable[[], None] | None:
    if nofile is None:
        return die

    def prepare() -> None:
        if die is not None:
            die()
        _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, hard))

    return prepare


async def start_served(
    work_dir: Path, *extra_args: str, env: dict[str, str] | None = None, nofile: int | None = None
) -> ServedProcess:
    ready = work_dir / "ready.json"
    log_path = work_dir / "serve.log"
    # Later flags win in argparse: `extra_args` may name fixed ports (a restart keeps its ports).
    # One process unless `extra_args` ask for more: a test signals and reads the pid it started.
    args = (
        *("--grpc-port", "0", "--rest-port", "0", "--segment-store-port", "0"),
        *("--processes", "1", "--ready-file", str(ready)),
    )
    process, info = await start_ready("serve", (*args, *extra_args), ready, log_path, env, nofile)
    return ServedProcess(
        process, info["grpc_port"], info["rest_port"], log_path, info.get("segment_store_port")
    )
