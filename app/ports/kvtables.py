"""The key-value table store port: table records by incarnation, written at the version read,
and the record a deleted table leaves so a re-created one numbers its segments after it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from app.domain.kvtables import KvtRecord, KvtState
from app.domain.records import Versioned
from app.domain.requests import NewRequest


@dataclass(frozen=True, slots=True)
class KvtCreation:
    """What `create_kvt` found or wrote: `created` is False when a table of that name existed
    (then `record` is that table, and no request was queued)."""

    created: bool
    record: Versioned[KvtRecord]


class KvtStore(Protocol):
    """Key-value table records (app/store/kvtables.py). Writes name the table's incarnation
    (its id) and the version read; a lost race raises WriteConflict."""

    async def create_kvt(self, record: KvtRecord, request: NewRequest) -> KvtCreation:
        """Inserts the table in CREATING (its start number from the deleted-table record) and
        `request` in one transaction, unless the name is taken. NotFound when the scope is
        missing or being deleted."""
        ...

    async def get_kvt(self, scope: str, name: str) -> Versioned[KvtRecord]:
        """Raises NotFound."""
        ...

    async def set_kvt_state(
        self,
        scope: str,
        name: str,
        kvt_id: str,
        state: KvtState,
        expected_version: int,
        *,
        request: NewRequest | None = None,
    ) -> int:
        """Conditional on id and version; `request` is queued in the same transaction. NotFound
        when this incarnation is gone."""
        ...

    async def delete_kvt(self, scope: str, name: str, kvt_id: str, expected_version: int) -> bool:
        """Removes the row at the version read; False when this incarnation was gone already."""
        ...

    async def list_kvts(self, scope: str, after: str, limit: int) -> list[str]:
        """Names strictly after `after`, in name order, whatever their state. NotFound for a
        missing scope."""
        ...

    async def count_kvts(self, scope: str) -> int:
        """Tables in the scope in any state (deleteScope's SCOPE_NOT_EMPTY)."""
        ...

    async def get_deleted_kvt(self, scope: str, name: str) -> Versioned[int] | None:
        """The highest segment number of the last deleted table of the name."""
        ...

    async def put_deleted_kvt(
        self, scope: str, name: str, last_segment_number: int, expected_version: int | None
    ) -> int:
        """Inserts (None) or rewrites the record at its version; WriteConflict on a lost race."""
        ...
