"""Issue 32 item 4, every listening port: with the descriptors exhausted, asyncio's failed
accept() calls are logged once per interval with a count (app/wiring/accept_errors.py) instead of
one traceback each. A real listener in a child process with a low RLIMIT_NOFILE, flooded over
loopback."""

from __future__ import annotations

import asyncio
import contextlib
import sys

# The child: a plain asyncio server that keeps every connection, with the handler installed (or
# not, argv[1] == "bare", to show what it replaces), reporting its port and then serving.
_CHILD = """
import asyncio, resource, sys
from app.wiring.accept_errors import quiet_accept_errors

async def main():
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
    if sys.argv[1] != "bare":
        quiet_accept_errors(asyncio.get_running_loop(), interval_s=10.0)
    # A bare protocol keeps each accepted connection (and its descriptor) until the end.
    server = await asyncio.get_running_loop().create_server(asyncio.Protocol, "127.0.0.1", 0)
    print(server.sockets[0].getsockname()[1], flush=True)
    await asyncio.sleep(float(sys.argv[2]))

asyncio.run(main())
"""
FLOOD = 300
RUN_S = 6.0


async def _connect(port: int) -> asyncio.StreamWriter | None:
    with contextlib.suppress(OSError, TimeoutError):
        async with asyncio.timeout(1.0):
            return (await asyncio.open_connection("127.0.0.1", port))[1]
    return None


async def _flood_and_count(mode: str) -> tuple[int, int]:
    """Lines the child wrote about failed accepts, and how many tracebacks."""
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _CHILD,
        mode,
        str(RUN_S),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert child.stdout is not None and child.stderr is not None
    port = int(await child.stdout.readline())
    # Past the listener's backlog a connect waits for ever: each is given a moment.
    opened = await asyncio.gather(*(_connect(port) for _ in range(FLOOD)))
    writers = [writer for writer in opened if writer is not None]
    stderr = (await child.stderr.read()).decode()
    assert await child.wait() == 0, stderr[-3000:]
    for writer in writers:
        writer.close()
    lines = stderr.splitlines()
    failed = [line for line in lines if "accept" in line]
    return len(failed), sum(1 for line in lines if line.startswith("Traceback"))


async def test_failed_accepts_are_logged_once_per_interval_with_a_count() -> None:
    failed, tracebacks = await _flood_and_count("quiet")
    # The first failure at once, then at most one count per 10 s interval of the run.
    assert 1 <= failed <= 2, failed
    assert tracebacks == 0


async def test_without_the_handler_asyncio_logs_a_traceback_per_failed_accept() -> None:
    """What the handler replaces, so the test above cannot pass for want of a flood."""
    failed, tracebacks = await _flood_and_count("bare")
    assert failed > 20 and tracebacks > 20, (failed, tracebacks)
