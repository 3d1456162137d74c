"""The real `pravega` client (0.3.8) against `serve --auth-enabled --tls-enabled`: with an
account's credentials in its documented environment variables, `auth_enabled` and `tls_enabled`,
and the dev CA as its trust store, it creates a scope and a stream, writes and reads events over
TLS, the embedded store checking the delegation tokens the controller signed for that account;
wrong credentials create nothing, and an account with READ on the stream writes nothing."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from app.security.certs import CertFiles, make_dev_certs
from app.security.passwords import hash_password
from app.store.accounts import PgAccountStore
from app.store.pool import create_pool
from app.testing.served import ServedProcess
from tests.support.tls_served import served_with_tls

pytestmark = [pytest.mark.interop, pytest.mark.timeout(120)]

EVENTS = 20
# READ on the stream (and what a reader group needs), nothing that writes to the stream.
READ_ONLY_ACL = ";".join(
    (
        "prn::/,READ",
        "prn::/scope:sec,READ",
        "prn::/scope:sec/stream:st,READ",
        "prn::/scope:sec/reader-group:*,READ_UPDATE",
    )
)

CLIENT = textwrap.dedent(
    """
    import asyncio, json, os, sys, time
    import pravega_client

    uri, role, count = sys.argv[1], sys.argv[2], int(sys.argv[3])

    def report(payload):
        print("RESULT " + json.dumps(payload), flush=True)
        os._exit(0)

    def attempt(fn, *args):
        try:
            return fn(*args)
        except BaseException as exc:  # the binding's PanicException is not an Exception
            report({"error": type(exc).__name__ + ": " + str(exc)[:300]})

    manager = pravega_client.StreamManager(uri, auth_enabled=True, tls_enabled=True)

    def read(group_name, expect, linger_s):
        group = attempt(manager.create_reader_group_with_config, group_name, "sec",
            pravega_client.StreamReaderGroupConfig(False, "sec", "st"))
        reader = attempt(group.create_reader, "r1")

        async def run():
            got, deadline = [], time.monotonic() + 30
            while time.monotonic() < deadline:
                if len(got) >= expect:
                    deadline = min(deadline, time.monotonic() + linger_s)
                try:
                    piece = await asyncio.wait_for(reader.get_segment_slice_async(), 1)
                except asyncio.TimeoutError:
                    continue
                got += [bytes(e.data()).decode() for e in piece]
                await asyncio.sleep(0.001)  # the client's thread done with the GIL (docs/dataplane.md)
                reader.release_segment(piece)
            return got

        return attempt(asyncio.run, run())

    def write(prefix):
        writer = attempt(manager.create_writer, "sec", "st")
        for i in range(count):
            attempt(writer.write_event_bytes, f"{prefix}{i}".encode(), "k")
        attempt(writer.flush)

    if role == "setup":
        made = [attempt(manager.create_scope, "sec"), attempt(manager.create_stream, "sec", "st", 1)]
        write("ev")
        report({"made": made, "read": read("g1", count, 0)})
    elif role == "scope":
        report({"created": attempt(manager.create_scope, "nope")})
    elif role == "read":
        report({"read": read("g2", count, 0)})
    elif role == "write":
        write("ro")
        report({"written": count})
    elif role == "check":
        # The administrator: "nope" must not exist yet, the stream holds only its events.
        report({"nope_was_new": attempt(manager.create_scope, "nope"), "read": read("g3", count, 2)})
    """
)


@pytest.fixture
def certs(tmp_path: Path) -> CertFiles:
    return make_dev_certs(tmp_path / "certs")


@pytest.fixture
async def served(db_url: str, tmp_path: Path, certs: CertFiles) -> AsyncIterator[ServedProcess]:
    pool = await create_pool(db_url, min_size=1, max_size=1)
    try:
        accounts = PgAccountStore(pool)
        await accounts.add("admin", hash_password("admin-pw"), "prn::*,READ_UPDATE", 1)
        await accounts.add("viewer", hash_password("viewer-pw"), READ_ONLY_ACL, 1)
    finally:
        await pool.close()
    async with served_with_tls(tmp_path, certs, "--db-url", db_url, "--auth-enabled") as instance:
        yield instance


async def run(
    served: ServedProcess, certs: CertFiles, role: str, user: str, password: str, timeout_s: float
) -> dict[str, Any] | None:
    """The role's result, or None when it was still retrying at `timeout_s` (then killed)."""
    env = {
        **os.environ,
        "pravega_client_auth_method": "Basic",
        "pravega_client_auth_username": user,
        "pravega_client_auth_password": password,
        "pravega_client_tls_cert_path": str(certs.ca_cert),
    }
    uri = f"tls://localhost:{served.grpc_port}"
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", CLIENT, uri, role, str(EVENTS), env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        out, err = await asyncio.wait_for(process.communicate(), timeout=timeout_s)
    except TimeoutError:
        process.kill()
        await process.wait()
        return None
    lines = [line for line in out.decode().splitlines() if line.startswith("RESULT ")]
    assert lines, f"client role {role} exited {process.returncode} without a result: {err.decode()[-3000:]}"
    result: dict[str, Any] = json.loads(lines[-1][len("RESULT ") :])
    # The client logs why a background task (its writer's) gave up on its stderr.
    if "error" in result:
        result["stderr"] = err.decode(errors="replace")[-4000:]
    return result


async def test_the_real_client_with_auth_and_tls(served: ServedProcess, certs: CertFiles) -> None:
    written = [f"ev{i}" for i in range(EVENTS)]
    setup = await run(served, certs, "setup", "admin", "admin-pw", 40)
    assert setup == {"made": [True, True], "read": written}, served.log()[-3000:]
    # Refusals, at once: a wrong password (UNAUTHENTICATED, which the client retries until it
    # is killed or gives up) and the READ-only account's writer (PERMISSION_DENIED on the
    # token-bearing calls a writer makes: they need READ_UPDATE on the stream).
    wrong, viewer, viewer_reads = await asyncio.gather(
        run(served, certs, "scope", "admin", "wrong-pw", 8),
        run(served, certs, "write", "viewer", "viewer-pw", 8),
        run(served, certs, "read", "viewer", "viewer-pw", 8),
    )
    assert wrong is None or "error" in wrong, wrong
    refusal = (
        'PermissionDenied, message: \\"principal viewer is not allowed READ_UPDATE access to '
        "prn::/scope:sec/stream:st"
    )
    assert viewer is not None and refusal in viewer["stderr"], viewer
    # Its reader too, as Pravega refuses it: the Rust client asks for its segments and tokens with
    # an unspecified access operation (`getSegments`/`getCurrentSegments` then sign a token good
    # for writes, so they need READ_UPDATE); only a client asking for READ tokens reads with READ.
    assert viewer_reads is not None and refusal in viewer_reads["error"], viewer_reads
    check = await run(served, certs, "check", "admin", "admin-pw", 40)
    assert check == {"nope_was_new": True, "read": written}, check
    log = served.log()
    assert "Traceback" not in log, log[-3000:]
    assert "admin-pw" not in log and "viewer-pw" not in log
