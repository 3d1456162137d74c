"""The key-value table client with authentication on: its requests carry the delegation token the
controller gave it, renewed before it expires; a store refusing the token is a clear error."""

from __future__ import annotations

import asyncio

import pytest

from app.kvtclient import KeyValueTable
from app.kvtclient.errors import TableUnavailable
from app.kvtclient.model import TableKey
from app.security.tokens import Permission
from tests.kvtclient.conftest import SC, cluster

KEY = b"the key-value table tests' delegation-token signing key, 64 bytes or longer"


async def test_a_table_is_used_past_its_tokens_ttl(db_url: str) -> None:
    async with cluster(db_url, auth_enabled=True, token_signing_key=KEY, auth_token_ttl_s=1) as kvc:
        kvc.services.storage.tokens.authorize_with(lambda resource: Permission.READ_UPDATE)
        await kvc.create_table("t", partitions=2, primary=4)
        table = await kvc.open("t")
        try:
            first = table._delegation_token
            assert first.count(".") == 2, "a signed token"
            await table.put(TableKey(b"key1"), b"one")
            # Past the TTL: the client asks the controller for a new token, the store accepts it.
            await asyncio.sleep(1.1)
            await table.put(TableKey(b"key2"), b"two")
            entry = await table.get(TableKey(b"key1"))
            assert entry is not None and entry.value == b"one"
            assert table._delegation_token != first
        finally:
            await table.close()


async def test_without_a_token_the_store_refuses_the_table(db_url: str) -> None:
    async with cluster(db_url, auth_enabled=True, token_signing_key=KEY) as kvc:
        # No ACL lookup wired: the controller signs nothing and the store refuses.
        await kvc.create_table("t", partitions=1, primary=4)
        table = await KeyValueTable.open(kvc.address, SC, "t")
        try:
            with pytest.raises(TableUnavailable, match="refused the delegation token"):
                await table.put(TableKey(b"key1"), b"one")
        finally:
            await table.close()
