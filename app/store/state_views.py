"""Customized state views in PostgreSQL (StateViewStore port): participants' states, the
aggregation config, and the views the leader writes.

A participant's record moves its version before any of its partition rows change, in the same
transaction, so two reports (or a report and a removal) read at one version cannot both land.
The aggregator's batch lands whole or not at all: under the leader term it was computed for
(the leader row is share-locked until commit), every view it moves at the version it read.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from app.domain.errors import IllegalState, NotFound, WriteConflict
from app.domain.state_views import (
    AggregationBatch,
    CustomizedView,
    ParticipantSummary,
    ResourceStates,
    StateChange,
    StatesWrite,
    StateViewConfig,
    ViewChange,
    ViewKey,
    ViewSummary,
)
from app.store import queries
from app.store.db import Connection, Database, Row

_SQL = queries.load("state_views")


def _columns(rows: Iterable[Sequence[Any]], width: int) -> list[list[Any]]:
    """Rows -> one list per column, the shape unnest($1::t[], $2::t[], ...) takes."""
    columns: list[list[Any]] = [[] for _ in range(width)]
    for row in rows:
        for column, value in zip(columns, row, strict=True):
            column.append(value)
    return columns


def _keys(rows: Iterable[Row]) -> set[ViewKey]:
    return {(r["state_name"], r["resource"]) for r in rows}


def _grouped(rows: Iterable[Row], key: Callable[[Row], ViewKey]) -> dict[ViewKey, dict[str, str]]:
    views: dict[ViewKey, dict[str, str]] = {}
    for r in rows:
        views.setdefault(key(r), {})[r["partition"]] = r["states"]
    return views


class PgStateViewStore:
    def __init__(self, db: Database) -> None:
        self._db = db

    # --- participants' states ---------------------------------------------------------------

    async def resource_version(self, participant: str, state_name: str, resource: str) -> int | None:
        version = await self._db.fetchval(_SQL["resource_version"], participant, state_name, resource)
        return None if version is None else int(version)

    async def write_states(
        self,
        participant: str,
        state_name: str,
        resource: str,
        partitions: Mapping[str, str | None],
        *,
        replace: bool,
        expected_version: int | None,
        now_ms: int,
    ) -> StatesWrite:
        """`replace`: `partitions` is the whole new map; else a merge where None removes."""
        key = (participant, state_name, resource)
        names = list(partitions)
        states = [partitions[p] for p in names]
        kept = [(p, s) for p, s in zip(names, states, strict=True) if s is not None]
        async with self._db.transaction() as conn:
            if expected_version is None:
                version = await conn.fetchval(_SQL["create_resource"], *key, now_ms)
            else:
                version = await conn.fetchval(_SQL["touch_resource"], *key, now_ms, expected_version)
            if version is None:
                raise WriteConflict(
                    f"the states of {participant} for {state_name}/{resource} changed concurrently"
                )
            # The record moved first: a concurrent writer at the same version now waits on
            # its row lock and then fails, so the partition rows below are ours alone.
            if replace:
                removed = await conn.fetch(_SQL["delete_replaced_states"], *key, names, states)
            else:
                removed = await conn.fetch(_SQL["delete_patched_states"], *key, names, states)
            added: list[Row] = []
            if kept:
                new_names, new_states = _columns(kept, 2)
                added = await conn.fetch(_SQL["insert_states"], *key, new_names, new_states, now_ms)
            count = int(await conn.fetchval(_SQL["count_states"], *key))
            changed = len({r["partition"] for r in removed} | {r["partition"] for r in added})
            if count == 0:
                await conn.fetchval(_SQL["delete_resource"], *key, version)
                return StatesWrite(None, 0, changed, now_ms)
            return StatesWrite(int(version), count, changed, now_ms)

    async def participant_states(
        self, participant: str, state_name: str | None = None, resource: str | None = None
    ) -> list[ResourceStates]:
        rows = await self._db.fetch(_SQL["participant_states"], participant, state_name, resource)
        return [
            ResourceStates(
                participant,
                r["state_name"],
                r["resource"],
                dict(zip(r["partitions"], r["states"], strict=True)),
                r["version"],
                r["updated_at"],
            )
            for r in rows
        ]

    async def participants(self) -> list[ParticipantSummary]:
        rows = await self._db.fetch(_SQL["participants"])
        return [
            ParticipantSummary(r["participant"], r["resources"], r["partitions"], r["last_report_at"])
            for r in rows
        ]

    async def participant_versions(self, participant: str) -> dict[ViewKey, int]:
        rows = await self._db.fetch(_SQL["participant_versions"], participant)
        return {(r["state_name"], r["resource"]): r["version"] for r in rows}

    async def remove_participant(self, participant: str, expected: Mapping[ViewKey, int]) -> int:
        """Removes every record of the participant at the versions read; WriteConflict when one
        moved or a new one appeared meanwhile. Returns how many records were removed."""
        keys = sorted(expected)
        state_names, resources = _columns(keys, 2)
        versions = [expected[k] for k in keys]
        async with self._db.transaction() as conn:
            gone = await conn.fetch(
                _SQL["remove_participant_resources"], participant, state_names, resources, versions
            )
            if len(gone) != len(keys) or await conn.fetchval(
                _SQL["count_participant_resources"], participant
            ):
                raise WriteConflict(f"the states of {participant} changed concurrently")
            await conn.execute(_SQL["remove_participant_states"], participant, state_names, resources)
        return len(keys)

    # --- the config -------------------------------------------------------------------------

    async def get_config(self) -> StateViewConfig:
        row = await self._db.fetchrow(_SQL["get_config"])
        if row is None:
            raise IllegalState("the state view config row is missing: is the schema migrated?")
        return StateViewConfig(tuple(row["state_names"]), row["version"], row["updated_at"])

    async def set_config(self, state_names: Sequence[str], expected_version: int, now_ms: int) -> int:
        version = await self._db.fetchval(_SQL["set_config"], list(state_names), expected_version, now_ms)
        if version is None:
            raise WriteConflict(f"the state view config is no longer at version {expected_version}")
        return int(version)

    # --- views ------------------------------------------------------------------------------

    async def list_views(self, state_name: str | None = None) -> list[ViewSummary]:
        rows = await self._db.fetch(_SQL["list_views"], state_name)
        return [
            ViewSummary(r["state_name"], r["resource"], r["version"], r["updated_at"], r["partition_count"])
            for r in rows
        ]

    async def get_view(self, state_name: str, resource: str) -> CustomizedView:
        rows = await self._db.fetch(_SQL["get_view"], state_name, resource)
        if not rows:
            raise NotFound(f"customized view {state_name}/{resource} not found")
        partitions = {r["partition"]: r["states"] for r in rows if r["partition"] is not None}
        return CustomizedView(state_name, resource, rows[0]["version"], rows[0]["updated_at"], partitions)

    async def view_version(self, state_name: str, resource: str) -> int | None:
        version = await self._db.fetchval(_SQL["view_version"], state_name, resource)
        return None if version is None else int(version)

    # --- the aggregator ---------------------------------------------------------------------

    async def built_names(self) -> frozenset[str]:
        rows = await self._db.fetch(_SQL["built_names"])
        return frozenset(r["state_name"] for r in rows)

    async def take_changes(self, limit: int) -> list[StateChange]:
        """The oldest `limit` log entries, grouped by partition."""
        rows = await self._db.fetch(_SQL["take_changes"], limit)
        return [StateChange(r["state_name"], r["resource"], r["partition"], tuple(r["seqs"])) for r in rows]

    async def partition_states(self, keys: Iterable[tuple[str, str, str]]) -> dict[ViewKey, dict[str, str]]:
        state_names, resources, partitions = _columns(keys, 3)
        if not state_names:
            return {}
        rows = await self._db.fetch(_SQL["partition_states"], state_names, resources, partitions)
        return _grouped(rows, lambda r: (r["state_name"], r["resource"]))

    async def name_states(self, state_name: str) -> dict[ViewKey, dict[str, str]]:
        rows = await self._db.fetch(_SQL["name_states"], state_name)
        return _grouped(rows, lambda r: (state_name, r["resource"]))

    async def view_versions(self, keys: Iterable[ViewKey]) -> dict[ViewKey, int]:
        state_names, resources = _columns(sorted(set(keys)), 2)
        if not state_names:
            return {}
        rows = await self._db.fetch(_SQL["view_versions"], state_names, resources)
        return {(r["state_name"], r["resource"]): r["version"] for r in rows}

    async def views_of_names(self, state_names: Sequence[str]) -> dict[ViewKey, int]:
        rows = await self._db.fetch(_SQL["views_of_names"], list(state_names))
        return {(r["state_name"], r["resource"]): r["version"] for r in rows}

    async def apply_aggregation(
        self, term: int, batch: AggregationBatch, now_ms: int
    ) -> list[ViewChange] | None:
        """Writes the batch under `term`; None (nothing written) when the term is not the
        leader's any more. WriteConflict (nothing written) when a view moved since read."""
        known = {k: v for k, v in batch.expected.items() if v is not None}
        # Views to create: read as absent, and given at least one partition.
        create = sorted(
            {(u.state_name, u.resource) for u in batch.updates if any(u.partitions.values())} - set(known)
        )
        partition_rows = [
            (u.state_name, u.resource, p, states) for u in batch.updates for p, states in u.partitions.items()
        ]
        changes: list[ViewChange] = []
        async with self._db.transaction() as conn:
            if await conn.fetchval(_SQL["hold_leader_term"], term) is None:
                return None
            # Every view the batch may touch is locked (or created) at the version read
            # before any partition row moves: a concurrent batch read at the same versions
            # waits here and then fails instead of writing over this one.
            if known:
                locked = await conn.fetch(_SQL["lock_views"], *_columns(_triples(known), 3))
                _require_all(len(locked), len(known))
            if create:
                rows = await conn.fetch(_SQL["insert_views"], *_columns(create, 2), now_ms)
                _require_all(len(rows), len(create))
                changes += [ViewChange(r["state_name"], r["resource"], r["version"]) for r in rows]
            touched: set[ViewKey] = set()
            if batch.dropped:
                touched |= _keys(await conn.fetch(_SQL["drop_view_partitions"], list(batch.dropped)))
                touched |= {k for k in known if k[0] in batch.dropped}
            if partition_rows:
                columns = _columns(partition_rows, 4)
                touched |= _keys(await conn.fetch(_SQL["delete_view_partitions"], *columns))
                touched |= _keys(await conn.fetch(_SQL["insert_view_partitions"], *columns, now_ms))
            for state_name in sorted({u.state_name for u in batch.updates if u.complete}):
                listed = [
                    (u.resource, p)
                    for u in batch.updates
                    if u.complete and u.state_name == state_name
                    for p, states in u.partitions.items()
                    if states
                ]
                stale = await conn.fetch(
                    _SQL["delete_unlisted_view_partitions"], state_name, *_columns(listed, 2)
                )
                touched |= _keys(stale)
            changes += await self._settle_views(conn, touched - set(create), known, now_ms)
            if batch.dropped and await conn.fetchval(_SQL["count_views_of_names"], list(batch.dropped)):
                raise WriteConflict("views of a dropped state name were written concurrently")
            if batch.consumed:
                await conn.execute(_SQL["consume_changes"], list(batch.consumed))
            if batch.built:
                await conn.execute(_SQL["mark_built"], list(batch.built), now_ms)
            if batch.dropped:
                await conn.execute(_SQL["unmark_built"], list(batch.dropped))
        return sorted(changes, key=lambda c: (c.state_name, c.resource))

    async def _settle_views(
        self, conn: Connection, touched: set[ViewKey], known: Mapping[ViewKey, int], now_ms: int
    ) -> list[ViewChange]:
        """Views (locked above) whose partitions changed get a new version, or go when no
        partition is left; views whose partitions did not change keep theirs."""
        if not touched:
            return []
        if not touched <= set(known):
            # A partition of a view the batch did not read moved: its view of the world is stale.
            raise WriteConflict("a customized view the aggregator did not read has partitions")
        keys = sorted(touched)
        present = _keys(await conn.fetch(_SQL["views_with_partitions"], *_columns(keys, 2)))
        bump = [k for k in keys if k in present]
        delete = [k for k in keys if k not in present]
        changes: list[ViewChange] = []
        if bump:
            rows = await conn.fetch(_SQL["bump_views"], *_columns(_triples(known, bump), 3), now_ms)
            _require_all(len(rows), len(bump))
            changes += [ViewChange(r["state_name"], r["resource"], r["version"]) for r in rows]
        if delete:
            rows = await conn.fetch(_SQL["delete_views"], *_columns(_triples(known, delete), 3))
            _require_all(len(rows), len(delete))
            changes += [ViewChange(r["state_name"], r["resource"], None) for r in rows]
        return changes


def _triples(
    versions: Mapping[ViewKey, int], keys: Iterable[ViewKey] | None = None
) -> list[tuple[str, str, int]]:
    return [(s, r, versions[(s, r)]) for s, r in sorted(versions if keys is None else keys)]


def _require_all(done: int, wanted: int) -> None:
    if done != wanted:
        # Raising inside the transaction rolls back whatever part of the batch was written.
        raise WriteConflict("a customized view changed since the aggregator read it")
