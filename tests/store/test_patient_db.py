"""The segment store's patience with its database (app/store/patient_db.py), on a PostgreSQL of
the test's own that it stops and starts: a call made while the server is away is answered once
it is back within the wait, and refused as unavailable, after the wait, when it is not."""

from __future__ import annotations

import asyncio
import time

import pytest

from app.domain.errors import StoreUnavailable
from app.store.db import open_pool
from app.store.patient_db import PatientDatabase
from tests.support.db import throwaway_cluster


async def test_a_call_made_while_the_database_restarts_is_answered_once_it_is_back() -> None:
    with throwaway_cluster() as cluster:
        pool = await open_pool(cluster.url(), min_size=1, max_size=2)
        try:
            patient = PatientDatabase(pool, wait_s=30.0)
            await patient.execute("CREATE TABLE seen (n int)")
            await asyncio.to_thread(cluster.stop)
            insert = asyncio.create_task(patient.execute("INSERT INTO seen VALUES (1)"))
            await asyncio.sleep(1.0)
            assert not insert.done(), "the call gave up while the database was away"
            await asyncio.to_thread(cluster.start)
            assert await asyncio.wait_for(insert, 30) == "INSERT 0 1"
            async with patient.transaction() as conn:
                assert await conn.fetchval("SELECT count(*) FROM seen") == 1
        finally:
            await pool.close()


async def test_a_database_away_for_longer_than_the_wait_is_unavailable_after_the_wait() -> None:
    with throwaway_cluster() as cluster:
        pool = await open_pool(cluster.url(), min_size=1, max_size=2)
        try:
            await asyncio.to_thread(cluster.stop)
            started = time.monotonic()
            with pytest.raises(StoreUnavailable):
                await PatientDatabase(pool, wait_s=1.0).fetchval("SELECT 1")
            assert 1.0 <= time.monotonic() - started < 10.0
            started = time.monotonic()
            with pytest.raises(StoreUnavailable):
                await PatientDatabase(pool, wait_s=0).fetchval("SELECT 1")
            assert time.monotonic() - started < 1.0
        finally:
            await asyncio.to_thread(cluster.start)
            await pool.close()
