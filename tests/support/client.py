"""Drives the real Pravega Python client (`pravega_client`) in a subprocess.

The client blocks while holding the GIL and retries retryable errors for about 61 s, so it
can only be bounded from outside: every script runs in its own interpreter under a hard
timeout, and reports what it saw as one JSON line on stdout.
"""

from __future__ import annotations

import asyncio
import json
import sys
import textwrap
from typing import Any

from tests.support.processes import output_within

PRELUDE = textwrap.dedent(
    """
    import json, sys
    import pravega_client
    from pravega_client import StreamManager, StreamScalingPolicy, StreamRetentionPolicy

    def attempt(fn, *args, **kwargs):
        try:
            return {"ok": fn(*args, **kwargs)}
        except ValueError as exc:
            return {"error": str(exc)[:500]}

    manager = StreamManager(sys.argv[1])
    """
)


async def run_client(controller_uri: str, body: str, timeout_s: float = 90.0) -> Any:
    # The script leaves by os._exit once its result is out: tearing the client's runtime down can
    # block or crash (a SIGSEGV in a reader-group scenario, once in the differential test's first
    # dozen runs), which says nothing of the server; a crash before the result still fails.
    script = (
        PRELUDE
        + textwrap.dedent(body)
        + "\nprint('RESULT ' + json.dumps(result), flush=True)\nimport os\nos._exit(0)\n"
    )
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        script,
        controller_uri,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await output_within(process, timeout_s, "pravega client")
    lines = [line for line in out.decode().splitlines() if line.startswith("RESULT ")]
    if process.returncode != 0 or not lines:
        raise AssertionError(f"client script failed ({process.returncode}):\n{err.decode()[-3000:]}")
    return json.loads(lines[-1][len("RESULT ") :])
