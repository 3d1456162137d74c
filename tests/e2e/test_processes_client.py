"""The real Pravega Python client against `serve --processes 2`: its controller connections and its
segment connections land on either child (the kernel spreads them; each child runs a store behind
the shared port), and a reader group of two reads back exactly the events written, in per-key
order, across a scale made while they are written; with authentication and TLS, its tokens from
either child are accepted by either store."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from app.security.certs import CertFiles, make_dev_certs
from app.security.passwords import hash_password
from app.security.signing_key import KEY_ENV
from app.store.accounts import PgAccountStore
from app.store.pool import create_pool
from app.testing.served import ServedProcess
from tests.e2e.test_pravega_client_secured import EVENTS as SECURED_EVENTS
from tests.e2e.test_pravega_client_secured import run
from tests.support.dataplane import (
    ClientProcess,
    Controller,
    check_exactly_once_in_key_order,
    read_events,
    start_with_segment_store,
)
from tests.support.tls_served import served_with_tls

pytestmark = [pytest.mark.interop, pytest.mark.timeout(600)]

EVENTS = 20_000
KEYS = 20
WRITE_RATE = 4_000  # paced, so the scale lands while events flow
TIMEOUT_S = 120.0


@pytest.fixture
async def served(db_url: str, tmp_path: Path) -> AsyncIterator[ServedProcess]:
    instance = await start_with_segment_store(tmp_path, "--db-url", db_url, "--processes", "2")
    try:
        yield instance
    finally:
        assert await instance.stop() == 0, instance.log()


async def test_the_client_writes_and_reads_exactly_once_through_two_processes(
    served: ServedProcess, tmp_path: Path
) -> None:
    controller = Controller(served)
    try:
        info = await controller.create_stream("procs", "s", 2)
        out = tmp_path / "read.json"
        reader = await ClientProcess.start(
            "read", tmp_path, uri=served.grpc_uri, scope="procs", stream="s", group="rg", readers=2,
            deadline_s=TIMEOUT_S * 2, out=str(out),
        )  # fmt: skip
        writer = await ClientProcess.start(
            "write", tmp_path, uri=served.grpc_uri, scope="procs", stream="s", count=EVENTS, keys=KEYS,
            inflight=1000, progress_every=2000, rate=WRITE_RATE,
        )  # fmt: skip
        try:
            await writer.until(lambda p: p["acked"] >= EVENTS // 3, TIMEOUT_S)
            # Through whichever child this channel reached; the client's own connections see it too.
            split = await controller.scale(info, [0], [(0.0, 0.25), (0.25, 0.5)])
            assert len(split) == 3, split
            written = await writer.result(TIMEOUT_S)
            assert written["written"] == EVENTS
            await reader.until(lambda p: p["read"] >= EVENTS, TIMEOUT_S)
            await controller.seal(info)
            seen = await reader.result(TIMEOUT_S)
        finally:
            await writer.kill()
            await reader.kill()
        assert seen["ended"] is True, seen
        check_exactly_once_in_key_order(read_events(out), "e", EVENTS, KEYS)
    finally:
        controller.close()


async def test_the_client_with_auth_and_tls_uses_tokens_any_child_signed(db_url: str, tmp_path: Path) -> None:
    """The run's signing key is made once, by the supervisor, and reaches every child in its
    environment (never argv): a token signed by either child is accepted by child 0's store."""
    certs: CertFiles = make_dev_certs(tmp_path / "certs")
    pool = await create_pool(db_url, min_size=1, max_size=1)
    try:
        await PgAccountStore(pool).add("admin", hash_password("admin-pw"), "prn::*,READ_UPDATE", 1)
    finally:
        await pool.close()
    async with served_with_tls(
        tmp_path, certs, "--db-url", db_url, "--auth-enabled", "--processes", "2"
    ) as served:
        children = json.loads((tmp_path / "ready.json").read_text())["processes"]
        keys = {environment(pid).get(KEY_ENV) for pid in children}
        assert len(keys) == 1 and None not in keys, "the children do not share one signing key"
        assert not any(
            KEY_ENV.encode() in arg or b"--auth-token" in arg for pid in children for arg in argv(pid)
        )
        written = [f"ev{i}" for i in range(SECURED_EVENTS)]
        setup = await run(served, certs, "setup", "admin", "admin-pw", 40)
        assert setup == {"made": [True, True], "read": written}, served.log()[-3000:]
        check = await run(served, certs, "check", "admin", "admin-pw", 40)
        assert check == {"nope_was_new": True, "read": written}, check
        assert "admin-pw" not in served.log()


def environment(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    pairs = (item.decode(errors="replace").partition("=") for item in raw if item)
    return {name: value for name, _, value in pairs}


def argv(pid: int) -> list[bytes]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
