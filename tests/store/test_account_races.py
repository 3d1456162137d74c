"""Two writers of one account (`accounts`, versioned): each write names the version it read, so
of two racing writers exactly one wins and the other gets WriteConflict; nothing is half-written."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from app.domain.errors import AlreadyExists, NotFound, WriteConflict
from app.store.accounts import PgAccountStore
from app.store.pool import create_pool

NOW = 1_700_000_000_000


@pytest.fixture
async def store(db_url: str) -> AsyncIterator[PgAccountStore]:
    pool = await create_pool(db_url, min_size=2, max_size=4)
    try:
        yield PgAccountStore(pool)
    finally:
        await pool.close()


async def _outcomes(*writes: Any) -> list[object]:
    return list(await asyncio.gather(*writes, return_exceptions=True))


async def test_two_updates_at_one_version_one_wins(store: PgAccountStore) -> None:
    version = await store.add("ann", "hash-0", "prn::/scope:a,READ", NOW)
    results = await _outcomes(
        store.update("ann", version, NOW + 1, acl="prn::/scope:a,READ_UPDATE"),
        store.update("ann", version, NOW + 2, password_hash="hash-1"),
    )
    winners = [r for r in results if isinstance(r, int)]
    assert len(winners) == 1 and winners[0] == version + 1, results
    assert sum(isinstance(r, WriteConflict) for r in results) == 1, results
    account = await store.get("ann")
    assert account is not None and account.version == version + 1
    # Whichever won, the row is that writer's whole write and nothing of the loser's.
    assert (account.acl, account.password_hash) in {
        ("prn::/scope:a,READ_UPDATE", "hash-0"),
        ("prn::/scope:a,READ", "hash-1"),
    }


async def test_update_racing_remove_one_wins(store: PgAccountStore) -> None:
    version = await store.add("bob", "hash", "", NOW)
    results = await _outcomes(
        store.update("bob", version, NOW + 1, acl="prn::*,READ"), store.remove("bob", version)
    )
    if isinstance(results[0], int):
        assert isinstance(results[1], WriteConflict), results
        assert (await store.get("bob")) is not None
    else:
        assert isinstance(results[0], NotFound) and results[1] is None, results
        assert await store.get("bob") is None


async def test_two_adds_of_one_name_one_wins(store: PgAccountStore) -> None:
    results = await _outcomes(store.add("cy", "h1", "", NOW), store.add("cy", "h2", "", NOW))
    assert sorted(type(r).__name__ for r in results) == ["AlreadyExists", "int"], results
    assert any(isinstance(r, AlreadyExists) for r in results)


async def test_a_stale_version_after_a_write_conflicts(store: PgAccountStore) -> None:
    version = await store.add("dee", "h", "", NOW)
    await store.update("dee", version, NOW + 1, acl="prn::*,READ")
    with pytest.raises(WriteConflict):
        await store.update("dee", version, NOW + 2, acl="prn::*,READ_UPDATE")
    with pytest.raises(WriteConflict):
        await store.remove("dee", version)
    with pytest.raises(NotFound):
        await store.remove("nobody", 1)
