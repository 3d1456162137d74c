"""Segment-store hosts and the container -> host map in PostgreSQL (ContainerMapStore port).

The map is replaced as a whole or not at all: every row the writer read must still carry the
version it read, so a stale leader's assignment never lands on top of a newer one.
"""

from __future__ import annotations

from app.domain.errors import NotFound, WriteConflict
from app.domain.records import Versioned
from app.ports import HostAddress, RegisteredHost
from app.store import queries
from app.store.db import Database, Row
from app.store.errors import conflict_or_missing

_SQL = queries.load("containers")


def _registered(row: Row) -> RegisteredHost:
    return RegisteredHost(
        HostAddress(row["host"], row["port"]), row["registered_at"], row["version"], row["heartbeat_at"]
    )


class PgContainerMapStore:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def register_host(self, host: HostAddress, now_ms: int, *, heartbeat: bool = False) -> bool:
        version = await self._db.fetchval(
            _SQL["register_host"], host.host, host.port, now_ms, now_ms if heartbeat else None
        )
        return version is not None

    async def heartbeat_host(self, host: HostAddress, now_ms: int, expected_version: int) -> int | None:
        version = await self._db.fetchval(
            _SQL["heartbeat_host"], host.host, host.port, now_ms, expected_version
        )
        return None if version is None else int(version)

    async def remove_hosts(self, hosts: list[tuple[HostAddress, int]]) -> list[HostAddress]:
        if not hosts:
            return []
        rows = await self._db.fetch(
            _SQL["remove_hosts"],
            [h.host for h, _ in hosts],
            [h.port for h, _ in hosts],
            [version for _, version in hosts],
        )
        return sorted(HostAddress(r["host"], r["port"]) for r in rows)

    async def get_host(self, host: HostAddress) -> RegisteredHost:
        row = await self._db.fetchrow(_SQL["get_host"], host.host, host.port)
        if row is None:
            raise NotFound(f"segment store {host} is not registered")
        return _registered(row)

    async def deregister_host(self, host: HostAddress, expected_version: int) -> None:
        async with self._db.transaction() as conn:
            gone = await conn.fetchval(_SQL["deregister_host"], host.host, host.port, expected_version)
            if gone is None:
                exists = await conn.fetchrow(_SQL["get_host"], host.host, host.port)
                raise conflict_or_missing(exists is not None, f"segment store {host}")

    async def list_hosts(self) -> list[RegisteredHost]:
        rows = await self._db.fetch(_SQL["list_hosts"])
        return [_registered(r) for r in rows]

    async def read_container_map(self) -> dict[int, Versioned[HostAddress]]:
        rows = await self._db.fetch(_SQL["read_container_map"])
        return {r["container"]: Versioned(HostAddress(r["host"], r["port"]), r["version"]) for r in rows}

    async def replace_container_map(
        self, assignment: dict[int, HostAddress], expected: dict[int, int]
    ) -> None:
        kept = sorted(c for c in assignment if c in expected)
        added = sorted(c for c in assignment if c not in expected)
        dropped = sorted(c for c in expected if c not in assignment)
        async with self._db.transaction() as conn:
            # Statements with nothing to do are skipped: each would still fire the table's
            # change notification, waking every process for nothing.
            if kept:
                rows = await conn.fetch(
                    _SQL["update_container_rows"],
                    kept,
                    [assignment[c].host for c in kept],
                    [assignment[c].port for c in kept],
                    [expected[c] for c in kept],
                )
                _require_all(len(rows), len(kept), "changed")
            if dropped:
                rows = await conn.fetch(
                    _SQL["delete_container_rows"], dropped, [expected[c] for c in dropped]
                )
                _require_all(len(rows), len(dropped), "changed")
            if added:
                rows = await conn.fetch(
                    _SQL["insert_container_rows"],
                    added,
                    [assignment[c].host for c in added],
                    [assignment[c].port for c in added],
                )
                _require_all(len(rows), len(added), "assigned")
            if await conn.fetchval(_SQL["count_unexpected_container_rows"], sorted(assignment)):
                raise WriteConflict("containers were added to the map concurrently")


def _require_all(done: int, wanted: int, how: str) -> None:
    if done != wanted:
        # Raising inside the transaction rolls back whatever part was written already.
        raise WriteConflict(f"the container map was {how} concurrently")
