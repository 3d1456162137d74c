"""Several hosts in one URL, the first of them silent (it accepts a TCP connection and never says
a word, as a host behind a partition does not even do): the pool, a dedicated session and the
readiness probe all get past it to the live server within the per-host time, where asyncpg alone
spends its whole timeout on the silent host (the partition test's 60 s). And a connection's socket
carries the keepalive and user timeout that end it when its server vanishes without a word."""

from __future__ import annotations

import asyncio
import dataclasses
import socket
import time
from collections.abc import AsyncIterator

import pytest

from app.store import hosts
from app.store.db import connect, open_pool
from app.store.dsn import open_connection
from app.store.probe import PgProbe
from pgurl import parse

# The live server is reached after one silent host: its time, and some for a loaded machine.
WITHIN_S = hosts.PER_HOST_TIMEOUT_S + 5.0


@pytest.fixture
async def silent_port() -> AsyncIterator[int]:
    """A port whose listener accepts connections and never answers them."""
    accepted: list[asyncio.StreamWriter] = []

    async def hold(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(writer)

    server = await asyncio.start_server(hold, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()
        for writer in accepted:
            writer.close()
        await server.wait_closed()


def _behind_silent(db_url: str, silent: int, attrs: str = "read-write") -> str:
    url = parse(db_url)
    return dataclasses.replace(
        url,
        hosts=("127.0.0.1", *url.hosts),
        ports=(silent, *url.ports),
        params={**url.params, "target_session_attrs": attrs},
    ).to_url()


async def test_a_session_gets_past_a_silent_first_host_in_its_own_time(db_url: str, silent_port: int) -> None:
    began = time.monotonic()
    conn = await open_connection(_behind_silent(db_url, silent_port))
    try:
        assert await conn.fetchval("SELECT NOT pg_is_in_recovery()")
        assert time.monotonic() - began < WITHIN_S
        sock = conn._transport.get_extra_info("socket")
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT) == hosts.TCP_USER_TIMEOUT_MS
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == hosts.KEEPALIVE_IDLE_S
    finally:
        await conn.close()


async def test_a_session_and_a_pool_of_the_service_get_past_it_too(db_url: str, silent_port: int) -> None:
    url = _behind_silent(db_url, silent_port)
    session = await connect(url)
    try:
        assert await session.fetchval("SELECT 1") == 1
    finally:
        await session.close()
    began = time.monotonic()
    pool = await open_pool(url, min_size=1, max_size=2)
    try:
        async with pool.acquire() as conn:
            assert await conn.fetchval("SELECT 1") == 1
        assert time.monotonic() - began < WITHIN_S
    finally:
        await pool.close()


async def test_a_url_whose_every_host_fails_says_so_after_trying_each(db_url: str, silent_port: int) -> None:
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        refused = unused.getsockname()[1]
    url = dataclasses.replace(
        parse(db_url),
        hosts=("127.0.0.1", "127.0.0.1"),
        ports=(silent_port, refused),
        params={"connect_timeout": "2"},
    )
    began = time.monotonic()
    with pytest.raises(OSError):
        await open_connection(url.to_url())
    # Each host its own connect_timeout: the silent one 2 s, the refusing one at once.
    assert 2.0 <= time.monotonic() - began < 2.0 + 3.0


async def test_the_readiness_probe_connects_across_pings_cut_short(db_url: str, silent_port: int) -> None:
    """Each ping may wait 0.4 s (app/services/health.py); the connect goes on between them."""
    probe = PgProbe(_behind_silent(db_url, silent_port))
    deadline = time.monotonic() + WITHIN_S
    try:
        while True:
            try:
                await asyncio.wait_for(probe.ping(), timeout=0.4)
                break
            except TimeoutError:
                assert time.monotonic() < deadline, "the probe never got past the silent host"
                await asyncio.sleep(0.1)
    finally:
        await probe.close()


async def test_a_probe_closed_while_connecting_leaves_nothing_behind(db_url: str, silent_port: int) -> None:
    probe = PgProbe(_behind_silent(db_url, silent_port))
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(probe.ping(), timeout=0.4)
    await probe.close()
    assert probe._connecting is None
