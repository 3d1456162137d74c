"""A child process's output, awaited within a bound: a child that outlives it is killed and
reaped, and the test fails naming it, rather than hang the suite."""

from __future__ import annotations

import asyncio


async def output_within(
    process: asyncio.subprocess.Process, timeout_s: float, what: str
) -> tuple[bytes, bytes]:
    """(stdout, stderr) once `process` ends; AssertionError "`what` did not finish ..." after `timeout_s`."""
    try:
        return await asyncio.wait_for(process.communicate(), timeout=timeout_s)
    except TimeoutError:
        process.kill()
        await process.wait()
        raise AssertionError(f"{what} did not finish within {timeout_s}s") from None
