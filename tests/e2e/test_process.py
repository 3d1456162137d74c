"""`pgcontroller serve` and `pgcontroller db …` as operators and scripts use them."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import pytest

from app.testing.served import ServedProcess, start_served


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "app.cli", *args], capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
async def test_signal_gives_an_ordered_shutdown_within_5_seconds(
    db_url: str, tmp_path: Path, sig: signal.Signals
) -> None:
    served = await start_served(tmp_path, "--db-url", db_url)
    began = time.monotonic()
    served.process.send_signal(sig)
    code = await asyncio.wait_for(served.process.wait(), timeout=10)
    assert code == 0, served.log()
    assert time.monotonic() - began < 5.0
    assert "shutdown requested" in served.log()


async def test_health_and_rest_on_a_served_instance(served: ServedProcess) -> None:
    async with aiohttp.ClientSession() as http:
        deadline = time.monotonic() + 10
        while True:
            async with http.get(f"{served.rest_base}/v1/health/readiness") as response:
                assert response.status == 200
                if await response.json() is True:
                    break
            assert time.monotonic() < deadline, "never became ready"
            await asyncio.sleep(0.2)
        async with http.post(f"{served.rest_base}/v1/scopes", json={"scopeName": "viarest"}) as response:
            assert response.status == 201
        async with http.get(f"{served.rest_base}/v1/scopes") as response:
            assert {"scopeName": "viarest"} in (await response.json())["scopes"]


async def test_db_commands_and_serve_on_the_embedded_database(tmp_path: Path) -> None:
    os.chmod(tmp_path, 0o755)
    data_dir = tmp_path / "data"
    try:
        started = await asyncio.to_thread(cli, "db", "start", "--data-dir", str(data_dir))
        assert started.returncode == 0, started.stderr
        url = started.stdout.strip().splitlines()[-1]
        assert url.startswith("postgresql://") and "127.0.0.1" in url
        again = await asyncio.to_thread(cli, "db", "url", "--data-dir", str(data_dir))
        assert again.stdout.strip().splitlines()[-1] == url

        # serve reuses the running database and, not having started it, leaves it running.
        served = await start_served(tmp_path, "--data-dir", str(data_dir))
        assert await served.stop() == 0, served.log()
        still = await asyncio.to_thread(cli, "db", "url", "--data-dir", str(data_dir))
        assert still.returncode == 0 and still.stdout.strip().splitlines()[-1] == url

        stopped = await asyncio.to_thread(cli, "db", "stop", "--data-dir", str(data_dir))
        assert stopped.returncode == 0
        gone = await asyncio.to_thread(cli, "db", "url", "--data-dir", str(data_dir))
        assert gone.returncode == 1 and "no embedded PostgreSQL is running" in gone.stderr

        # serve alone starts the embedded database, migrates it, and stops it on exit.
        served = await start_served(tmp_path, "--data-dir", str(data_dir))
        assert await served.stop() == 0, served.log()
        after = await asyncio.to_thread(cli, "db", "url", "--data-dir", str(data_dir))
        assert after.returncode == 1
    finally:
        await asyncio.to_thread(cli, "db", "stop", "--data-dir", str(data_dir))


def test_bad_flags_give_a_clear_message(tmp_path: Path) -> None:
    result = cli("serve", "--grpc-port", "70000", "--data-dir", str(tmp_path))
    assert result.returncode != 0
    assert "grpc-port must be 0..65535" in result.stderr
    hosts = cli("serve", "--segment-store-hosts", "nohostport", "--data-dir", str(tmp_path))
    assert hosts.returncode != 0 and "HOST:PORT" in hosts.stderr
    assert "Traceback" not in result.stderr + hosts.stderr


async def test_a_background_loop_that_dies_stops_the_process_with_exit_code_1(
    db_url: str, tmp_path: Path
) -> None:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "app.cli",
        "serve",
        "--db-url",
        db_url,
        "--grpc-port",
        "0",
        "--rest-port",
        "0",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env={**os.environ, "PGCONTROLLER_FAILPOINTS": "dispatcher.loop=raise"},
    )
    output, _ = await asyncio.wait_for(process.communicate(), timeout=30)
    text = output.decode()
    assert process.returncode == 1, text
    assert "background loop died" in text and "failpoint dispatcher.loop raised" in text


# One supervision policy for every task of every kind of process (app/process.py): the controller's
# loops, the probe, and the segment store's tasks, embedded in `serve` or in `segment-store`.
@pytest.mark.parametrize(
    ("command", "task"),
    [
        ("serve", "segment-store-membership"),
        ("serve", "metadata-store-probe"),
        ("segment-store", "segment-store-orphans"),
        ("segment-store", "segment-store-listener"),
    ],
)
async def test_any_task_that_dies_ends_its_process_with_exit_code_1(
    db_url: str, command: str, task: str
) -> None:
    ports = ["--segment-store-port", "0"]
    if command == "serve":
        ports += ["--grpc-port", "0", "--rest-port", "0", "--processes", "1"]
    else:
        ports += ["--segment-store-metrics-port", "0"]
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "app.cli", command, "--db-url", db_url, *ports,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        env={**os.environ, "PGCONTROLLER_FAILPOINTS": f"task.{task}=raise"},
    )  # fmt: skip
    output, _ = await asyncio.wait_for(process.communicate(), timeout=60)
    text = output.decode()
    assert process.returncode == 1, text
    assert "background loop died" in text and f"failpoint task.{task} raised" in text, text


# A script that starts a server with the test harness, names its pid, then waits to be killed.
_PARENT = """
import asyncio, sys
from pathlib import Path
from app.testing.served import start_served

async def main():
    served = await start_served(Path(sys.argv[1]), "--db-url", sys.argv[2])
    print(served.process.pid, flush=True)
    await asyncio.sleep(3600)

asyncio.run(main())
"""


async def test_a_server_the_harness_started_stops_when_its_parent_is_killed(
    db_url: str, tmp_path: Path
) -> None:
    """A test or bench that dies must not leave its servers running (they would hold ports and
    CPU for good): the kernel sends them SIGTERM when the process that started them goes."""
    parent = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _PARENT, str(tmp_path), db_url, stdout=asyncio.subprocess.PIPE
    )
    assert parent.stdout is not None
    line = await asyncio.wait_for(parent.stdout.readline(), 90)
    server = int(line)
    os.kill(server, 0)  # running
    parent.kill()
    await parent.wait()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            os.kill(server, 0)
        except ProcessLookupError:
            break
        await asyncio.sleep(0.2)
    else:
        os.kill(server, signal.SIGKILL)
        raise AssertionError(f"server {server} still running 30 s after its parent was killed")
