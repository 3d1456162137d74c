"""The reader-group store port: reader-group records by incarnation, every write conditional on
the version read."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Protocol

from app.domain.readergroups import ReaderGroupRecord
from app.domain.records import Versioned
from app.domain.requests import NewRequest


@dataclass(frozen=True, slots=True)
class ReaderGroupCreation:
    """What `create_reader_group` found or wrote: `created` is False when a group of that name
    existed (then `record` is that group, and no request was queued)."""

    created: bool
    record: Versioned[ReaderGroupRecord]


class ReaderGroupStore(Protocol):
    """Reader-group records (app/store/readergroups.py). Every write is conditional on the
    version read (a lost race raises WriteConflict, a vanished group NotFound)."""

    async def create_reader_group(
        self, record: ReaderGroupRecord, request: NewRequest
    ) -> ReaderGroupCreation:
        """Inserts the group and `request` in one transaction unless the name is taken. NotFound
        when the scope is missing or being deleted."""
        ...

    async def get_reader_group(self, scope: str, name: str) -> Versioned[ReaderGroupRecord] | None: ...

    async def update_reader_group(
        self, record: ReaderGroupRecord, expected_version: int, *, request: NewRequest | None = None
    ) -> int:
        """Writes generation, state, configuration and the updating flag of the group with
        `record`'s id; `request` is queued in the same transaction. Returns the new version."""
        ...

    async def delete_reader_group(
        self, scope: str, name: str, reader_group_id: uuid.UUID, expected_version: int
    ) -> None:
        """Removes that incarnation of the group at the version read."""
        ...

    async def list_reader_groups(self, scope: str) -> list[str]:
        """Names in name order, whatever their state. NotFound for a missing scope."""
        ...

    async def count_reader_groups(self, scope: str) -> int:
        """Groups in the scope in any state (deleteScope's SCOPE_NOT_EMPTY)."""
        ...
