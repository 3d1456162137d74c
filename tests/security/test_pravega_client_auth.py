"""The real `pravega` client (0.3.8) against a controller with `--auth-enabled`: with its
documented credentials (`pravega_client_auth_method/username/password` and `auth_enabled=True`)
it creates a scope and stream, writes and reads events; with a wrong password it creates nothing,
and an account without rights on the scope is refused."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import textwrap

from app.api.grpc.proto import controller_pb2 as pb
from tests.security.conftest import ADMIN, Secured

CLIENT = textwrap.dedent(
    """
    import asyncio, json, os, sys, time
    import pravega_client

    uri, scope, stream, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])

    def report(payload):
        print("RESULT " + json.dumps(payload), flush=True)
        os._exit(0)

    manager = pravega_client.StreamManager(uri, True, False)
    try:
        manager.create_scope(scope)
        manager.create_stream(scope, stream, 1)
    except Exception as exc:
        report({"error": str(exc)[:400]})
    writer = manager.create_writer(scope, stream)
    for i in range(count):
        writer.write_event_bytes(f"ev{i}".encode(), "k")
    writer.flush()
    group = manager.create_reader_group_with_config(
        "g", scope, pravega_client.StreamReaderGroupConfig(False, scope, stream))
    reader = group.create_reader("r1")

    async def read():
        got, deadline = [], time.monotonic() + 30
        while len(got) < count and time.monotonic() < deadline:
            piece = await reader.get_segment_slice_async()
            got += [bytes(e.data()).decode() for e in piece]
            await asyncio.sleep(0.001)  # the client's thread done with the GIL (docs/dataplane.md)
            reader.release_segment(piece)
        return got

    report({"read": asyncio.run(read())})
    """
)


async def _run(uri: str, user: str, password: str, scope: str, timeout_s: float) -> dict[str, object] | None:
    """The script's result, or None if it was still retrying at `timeout_s` (then killed)."""
    env = {
        **os.environ,
        "pravega_client_auth_method": "Basic",
        "pravega_client_auth_username": user,
        "pravega_client_auth_password": password,
    }
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        CLIENT,
        uri,
        scope,
        "st",
        "20",
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, _ = await asyncio.wait_for(process.communicate(), timeout=timeout_s)
    except TimeoutError:
        process.kill()
        await process.wait()
        return None
    lines = [line for line in out.decode().splitlines() if line.startswith("RESULT ")]
    assert lines, f"client exited {process.returncode} without a result"
    result: dict[str, object] = json.loads(lines[-1][len("RESULT ") :])
    return result


async def _scope_exists(secured: Secured, admin: str, scope: str) -> bool:
    answer = await secured.stub.checkScopeExists(pb.ScopeInfo(scope=scope), metadata={"authorization": admin})
    return bool(answer.exists)


async def test_real_client_with_good_credentials_writes_and_reads(secured: Secured) -> None:
    await secured.add_user(*ADMIN)
    result = await _run(f"tcp://127.0.0.1:{secured.grpc_port}", "admin", "admin-pw", "authed", 90)
    assert result == {"read": [f"ev{i}" for i in range(20)]}


async def test_real_client_with_wrong_or_insufficient_credentials_is_refused(secured: Secured) -> None:
    admin = await secured.add_user(*ADMIN)
    await secured.add_user("reader", "reader-pw", "prn::/,READ")
    uri = f"tcp://127.0.0.1:{secured.grpc_port}"
    # PERMISSION_DENIED is final for the client: it reports the refusal
    denied = await _run(uri, "reader", "reader-pw", "nope1", 60)
    assert denied is not None and "PermissionDenied" in str(denied.get("error")), denied
    # UNAUTHENTICATED is retried by the client (it re-creates its channel); whatever it does in
    # the time given, nothing is created
    wrong = await _run(uri, "admin", "wrong-pw", "nope2", 15)
    assert wrong is None or "error" in wrong
    assert not await _scope_exists(secured, admin, "nope1")
    assert not await _scope_exists(secured, admin, "nope2")
