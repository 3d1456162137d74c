"""Table segments of the embedded segment store (table table_entries): Pravega's key version
rules, all-or-nothing batches, key-ordered paging and delta reads.

Invariant: a key's version is a position in its table, taken from the table's length
(embedded_segments.length, which counts the positions handed out), so versions strictly
increase per table; every write locks the table's row first, so batches never interleave.
Updates and removals are conditional, so a COMMIT that loses its answer is looked up rather
than refused as an outage (app/store/commit_outcome.py): the caller's retry would fail its own
condition.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from app.ports import Clock
from app.segmentstore.storage import (
    MAX_TABLE_KEY_BYTES,
    MAX_TABLE_VALUE_BYTES,
    NO_VERSION,
    NOT_EXISTS,
    NoSuchSegment,
    SegmentAlreadyExists,
    SegmentTruncated,
    TableDelta,
    TableEntry,
    TableInfo,
    TableKeyBadVersion,
    TableKeyDoesNotExist,
    TablePage,
    TableSegmentNotEmpty,
    TooLarge,
    WrongSegmentKind,
)
from app.segmentstore.wire.commands import MAX_WIRECOMMAND_SIZE
from app.store import queries
from app.store.batching import Coalescer
from app.store.commit_outcome import transaction_with_known_outcome
from app.store.db import Connection, Database, Row

_SQL = queries.load("segment_data")

# The most a page of keys, entries or a delta carries, whatever the count asked for (Pravega's
# MAX_READ_SIZE), unless its one entry is larger. Pravega adds entries while a page holds less,
# so its pages may hold one more: clients page by token, and see no difference.
MAX_PAGE_BYTES = 2 * 1024 * 1024
# The wire framing of one entry of a reply, as Pravega counts it: a key's (its length twice and
# its version) and a value's (its length twice). Keys pages count it too, values and all.
ENTRY_FRAMING_BYTES = 16 + 8
# The most entries a page can hold (each takes at least one key byte): the scan's row bound.
MAX_PAGE_ENTRIES = MAX_PAGE_BYTES // (ENTRY_FRAMING_BYTES + 1) + 1
# A TableRead's framing besides its entries: request id, the name's length and the entry count.
TABLE_READ_FRAMING_BYTES = 8 + 2 + 4
# A table operation's table_segment_offset that asks for no length check.
ANY_OFFSET = -1


def check_key(name: str, key: bytes) -> None:
    if not key or len(key) > MAX_TABLE_KEY_BYTES:
        raise TooLarge(name, f"a table key must have 1 to {MAX_TABLE_KEY_BYTES} bytes, not {len(key)}")


def check_version(
    name: str,
    key: bytes,
    expected: int,
    current: int | None,
    *,
    removal: bool,
    fixed_key_length: bool = False,
) -> None:
    """Pravega's conditional rule for one key: NO_VERSION always passes; NOT_EXISTS needs the key
    absent; a version >= 0 needs the key present with exactly that version.

    A version for an absent key is `TableKeyDoesNotExist` in a hash-layout segment (the
    controller's tables, the Rust client's reader groups), but `TableKeyBadVersion` in a segment
    with a fixed key length (a key-value table's): Pravega's fixed-key layout reads an absent key
    as present with no version, so its version check fails first (the Java client then throws
    BadKeyVersionException, not NoSuchKeyException; the conformance suite compares both)."""
    if expected == NO_VERSION:
        return
    if expected == NOT_EXISTS:
        if current is not None:
            raise TableKeyBadVersion(name, f"key {key!r} exists (version {current})")
        return
    if current is None:
        if fixed_key_length:
            raise TableKeyBadVersion(name, f"key {key!r} does not exist, so it has no version {expected}")
        raise TableKeyDoesNotExist(name, f"key {key!r} does not exist")
    if current != expected:
        what = "removal" if removal else "update"
        raise TableKeyBadVersion(name, f"{what} of key {key!r} expects version {expected}, it is {current}")


def check_key_lengths(name: str, row: Row, keys: Sequence[bytes]) -> None:
    """A table segment made with a key length (a key-value table's, Pravega's fixed-key layout)
    takes keys of exactly that length; Java refuses others with an IllegalArgumentException,
    which reaches the client as ErrorMessage(ILLEGAL_ARGUMENT), as TooLarge does here."""
    length = int(row["key_length"])
    if length <= 0:
        return
    for key in keys:
        if len(key) != length:
            raise TooLarge(name, f"the keys of table segment {name} have {length} bytes, not {len(key)}")


def _table_row(name: str, row: Row | None) -> Row:
    if row is None:
        raise NoSuchSegment(name)
    if row["kind"] != "table":
        raise WrongSegmentKind(name, f"{name} is not a table segment")
    return row


class _NewSegment(NamedTuple):
    """One create, in the column order of the create statements."""

    name: str
    kind: str
    scale_type: int
    target_rate: int
    rollover: int
    key_length: int


def _entry(row: Row) -> TableEntry:
    return TableEntry(bytes(row["key"]), bytes(row["value"]), int(row["version"]))


class PgTableSegments:
    """The table half of PgSegmentStorage (app/store/segment_data.py)."""

    def __init__(self, db: Database, clock: Clock) -> None:
        self._db = db
        self._clock = clock
        # A transaction's segments are created at once, over as many connections.
        self._creates: Coalescer[_NewSegment, None] = Coalescer(self._create_one, self._create_many)

    async def create_table(self, name: str, key_length: int, rollover_size_bytes: int) -> None:
        await self._create(name, "table", 0, 0, rollover_size_bytes, key_length)

    async def _create(
        self, name: str, kind: str, scale_type: int, target_rate: int, rollover: int, key_length: int
    ) -> None:
        await self._creates(_NewSegment(name, kind, scale_type, target_rate, rollover, key_length))

    async def _create_one(self, new: _NewSegment) -> None:
        created = await self._db.fetchval(_SQL["create_segment"], *new, self._clock.now_ms())
        if created is None:
            raise SegmentAlreadyExists(new.name)

    async def _create_many(self, batch: Sequence[_NewSegment]) -> list[Exception | None]:
        """One statement; of two creates of one name, the later one finds it existing."""
        first = list({new.name: new for new in reversed(batch)}.values())
        columns = list(zip(*first, strict=True))
        created = {
            row["name"]
            for row in await self._db.fetch(
                _SQL["create_segments"], *(list(c) for c in columns), self._clock.now_ms()
            )
        }
        results: list[Exception | None] = []
        for new in batch:
            if new.name in created:
                created.discard(new.name)
                results.append(None)
            else:
                results.append(SegmentAlreadyExists(new.name))
        return results

    async def delete_table(self, name: str, must_be_empty: bool) -> None:
        async with self._db.transaction() as conn:
            _table_row(name, await conn.fetchrow(_SQL["lock_segment"], name))
            if must_be_empty and await conn.fetchval(_SQL["table_has_entries"], name):
                raise TableSegmentNotEmpty(name)
            await conn.execute(_SQL["delete_segment"], name)

    async def _lock_table(self, conn: Connection, name: str, table_segment_offset: int) -> Row:
        row = _table_row(name, await conn.fetchrow(_SQL["lock_segment"], name))
        if table_segment_offset != ANY_OFFSET and table_segment_offset != row["length"]:
            raise SegmentTruncated(
                name,
                row["start_offset"],
                f"table {name} has length {row['length']}, not {table_segment_offset}",
            )
        return row

    async def update_table(
        self, name: str, entries: Sequence[TableEntry], table_segment_offset: int
    ) -> list[int]:
        """Every item's version rule is checked against the table as it was before the batch, as
        Pravega's key index does: the Rust synchronizer names its per-map version key once per
        inserted entry, all with the same expected version. A key named more than once gets a
        version per item and keeps the last value and version."""
        for entry in entries:
            check_key(name, entry.key)
            if len(entry.value) > MAX_TABLE_VALUE_BYTES:
                raise TooLarge(name, f"a table value must have at most {MAX_TABLE_VALUE_BYTES} bytes")
        async with transaction_with_known_outcome(self._db) as conn:
            row = await self._lock_table(conn, name, table_segment_offset)
            check_key_lengths(name, row, [e.key for e in entries])
            current = await self._versions(conn, name, [e.key for e in entries])
            fixed = int(row["key_length"]) > 0
            position = int(row["length"])
            versions: list[int] = []
            latest: dict[bytes, tuple[bytes, int]] = {}
            for entry in entries:
                check_version(
                    name,
                    entry.key,
                    entry.version,
                    current.get(entry.key),
                    removal=False,
                    fixed_key_length=fixed,
                )
            for entry in entries:
                latest[entry.key] = (entry.value, position)
                versions.append(position)
                position += 1
            if latest:
                await conn.execute(
                    _SQL["put_table_entries"],
                    name,
                    list(latest),
                    [value for value, _ in latest.values()],
                    [version for _, version in latest.values()],
                )
                await conn.execute(_SQL["set_length"], name, position, self._clock.now_ms())
        return versions

    async def remove_table_keys(
        self, name: str, keys: Sequence[tuple[bytes, int]], table_segment_offset: int
    ) -> None:
        """Each removed key takes one position (the table's length grows by it), so a caller's
        table_segment_offset sees removals as changes; removing an absent key unconditionally
        changes nothing."""
        for key, _ in keys:
            check_key(name, key)
        async with transaction_with_known_outcome(self._db) as conn:
            row = await self._lock_table(conn, name, table_segment_offset)
            check_key_lengths(name, row, [k for k, _ in keys])
            current = await self._versions(conn, name, [k for k, _ in keys])
            fixed = int(row["key_length"]) > 0
            # Checked against the table before the batch, as updates are.
            for key, version in keys:
                check_version(name, key, version, current.get(key), removal=True, fixed_key_length=fixed)
            removed = [key for key in dict.fromkeys(k for k, _ in keys) if key in current]
            if removed:
                await conn.execute(_SQL["remove_table_entries"], name, removed)
                await conn.execute(
                    _SQL["set_length"], name, int(row["length"]) + len(removed), self._clock.now_ms()
                )

    async def _versions(self, conn: Connection, name: str, keys: list[bytes]) -> dict[bytes, int | None]:
        rows = await conn.fetch(_SQL["table_versions"], name, list(set(keys)))
        return {bytes(r["key"]): int(r["version"]) for r in rows}

    async def read_table(self, name: str, keys: Sequence[bytes]) -> list[TableEntry]:
        """TooLarge when the reply would not fit a frame: Pravega's store would send it anyway
        and its client would drop the connection; its client asks for 15 keys at a time, which
        always fit."""
        limit = MAX_WIRECOMMAND_SIZE - TABLE_READ_FRAMING_BYTES - len(name.encode())
        rows = await self._db.fetch(_SQL["read_table"], name, list(keys), ENTRY_FRAMING_BYTES, limit)
        row = _table_row(name, rows[0] if rows else None)
        if int(row["reply_bytes"]) > limit:
            raise TooLarge(
                name,
                f"a TableRead of {len(keys)} keys would carry {int(row['reply_bytes'])} bytes, "
                f"more than the {limit} a frame holds",
            )
        found = {bytes(r["key"]): r for r in rows if r["key"] is not None}
        result: list[TableEntry] = []
        for key in keys:
            hit = found.get(key)
            if hit is None:
                result.append(TableEntry(key, b"", NOT_EXISTS))
            else:
                result.append(_entry(hit))
        return result

    async def read_table_page(
        self, name: str, suggested_count: int, token: bytes, from_key: bytes, to_key: bytes
    ) -> TablePage:
        """The token is the last key returned (keys are never empty, so an empty token is the
        start); the next page holds the keys strictly after it as they are when it is read."""
        count = min(max(1, suggested_count), MAX_PAGE_ENTRIES)
        rows = await self._db.fetch(
            _SQL["read_table_page"],
            name,
            token,
            from_key,
            to_key,
            count,
            MAX_PAGE_BYTES,
            ENTRY_FRAMING_BYTES,
        )
        _table_row(name, rows[0] if rows else None)
        entries = [_entry(r) for r in rows if r["key"] is not None]
        return TablePage(entries, entries[-1].key if entries else b"")

    async def read_table_delta(self, name: str, from_position: int, suggested_count: int) -> TableDelta:
        """The live entries with a version at or after `from_position`, oldest first: a key updated
        several times comes once with its newest value, and a removed key not at all.
        `last_position` is one past the last version returned (from_position when none)."""
        count = min(max(1, suggested_count), MAX_PAGE_ENTRIES)
        rows = await self._db.fetch(
            _SQL["read_table_delta"], name, from_position, count + 1, MAX_PAGE_BYTES, ENTRY_FRAMING_BYTES
        )
        _table_row(name, rows[0] if rows else None)
        found = [r for r in rows if r["key"] is not None]
        entries = [_entry(r) for r in found[:count] if r["fits"]]
        last = entries[-1].version + 1 if entries else from_position
        return TableDelta(entries, last, reached_end=len(entries) == len(found))

    async def table_info(self, name: str) -> TableInfo:
        row = _table_row(name, await self._db.fetchrow(_SQL["table_info"], name))
        return TableInfo(
            start_offset=int(row["start_offset"]),
            length=int(row["length"]),
            entry_count=int(row["entry_count"]),
            key_length=int(row["key_length"]),
        )
