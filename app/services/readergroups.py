"""Reader-group use cases: create, get, update, delete with every status Pravega's gRPC
contract names, and the listing REST serves.

Each mutation writes its first metadata step and its request in one transaction (create: the
group in CREATING; update: the new configuration, generation + 1 and `updating`; delete:
DELETING), then waits for the request workers (workers/handlers/readergroups.py) to finish it,
as Pravega's API does. Generations make updates safe against each other: an update names the
generation it read, and only one update of a generation can win.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import functools
import uuid
from dataclasses import dataclass

from app.domain.errors import FinalFailure, NotFound, WriteConflict
from app.domain.names import require_present
from app.domain.readergroups import (
    DEFAULT_READER_GROUP_ID,
    ReaderGroupConfig,
    ReaderGroupRecord,
    ReaderGroupState,
    is_subscriber_transition,
    is_valid_reader_group_name,
    parse_reader_group_id,
    reader_group_stream,
    streams_to_unsubscribe,
)
from app.domain.records import ScopeState, Versioned
from app.domain.requests import NewRequest, RequestKind
from app.metrics.record import operation, outcome_is, status_is
from app.ports import Clock, ReaderGroupStore, RequestQueue, ScopeStore
from app.services.completion import RequestWatch, parked_request, wait_until

# StreamMetadataTasks.READER_GROUP_OPERATION_MAX_RETRIES: attempts of a read-then-write step.
_ATTEMPTS = 10


class CreateStatus(enum.Enum):
    SUCCESS = "SUCCESS"
    FAILURE = "FAILURE"
    SCOPE_NOT_FOUND = "SCOPE_NOT_FOUND"
    INVALID_RG_NAME = "INVALID_RG_NAME"


class UpdateStatus(enum.Enum):
    SUCCESS = "SUCCESS"
    FAILURE = "FAILURE"
    RG_NOT_FOUND = "RG_NOT_FOUND"
    INVALID_CONFIG = "INVALID_CONFIG"


class DeleteStatus(enum.Enum):
    SUCCESS = "SUCCESS"
    FAILURE = "FAILURE"
    RG_NOT_FOUND = "RG_NOT_FOUND"


@dataclass(frozen=True, slots=True)
class CreateResult:
    status: CreateStatus
    record: ReaderGroupRecord | None = None  # the stored group on SUCCESS


@dataclass(frozen=True, slots=True)
class UpdateResult:
    status: UpdateStatus
    generation: int  # the stored generation on SUCCESS, else the request's


class ReaderGroupService:
    def __init__(
        self,
        reader_groups: ReaderGroupStore,
        scopes: ScopeStore,
        clock: Clock,
        requests: RequestQueue,
        *,
        completion_timeout_s: float,
    ) -> None:
        self._groups = reader_groups
        self._scopes = scopes
        self._clock = clock
        # Where a waiting call finds its request parked (a final failure): it answers FAILURE at once.
        self._requests = requests
        self._timeout_s = completion_timeout_s

    # --- create -------------------------------------------------------------------------------

    @operation("stream", "create_reader_group", "create_reader_group_failed", status_is(CreateStatus.SUCCESS))
    async def create_reader_group(
        self,
        scope: str,
        name: str,
        config: ReaderGroupConfig,
        reader_group_id: uuid.UUID = DEFAULT_READER_GROUP_ID,
    ) -> CreateResult:
        """An existing group answers SUCCESS with its own configuration, whatever was asked
        (createReaderGroup is idempotent by name). A group being deleted is waited for, then
        created anew."""
        require_present("scope", scope)
        if not is_valid_reader_group_name(name):
            return CreateResult(CreateStatus.INVALID_RG_NAME)
        config.validate()
        if not await self._scope_active(scope):
            return CreateResult(CreateStatus.SCOPE_NOT_FOUND)
        since = self._clock.now_ms()
        for _ in range(_ATTEMPTS):
            current = await self._groups.get_reader_group(scope, name)
            if current is None:
                try:
                    current = await self._insert(scope, name, config, reader_group_id)
                except NotFound:
                    return CreateResult(CreateStatus.SCOPE_NOT_FOUND)
                except WriteConflict:
                    continue
            group = current.value
            if group.state is ReaderGroupState.DELETING:
                # A delete parked meanwhile leaves the group ACTIVE: the next round answers with it.
                with contextlib.suppress(FinalFailure):
                    await self._wait_gone(
                        scope, name, group.id, f"deletion of reader group {scope}/{name}", since_ms=since
                    )
                continue
            if group.state is ReaderGroupState.CREATING:
                await wait_until(
                    functools.partial(self._created, scope, name, group.id),
                    f"creation of reader group {scope}/{name}",
                    timeout_s=self._timeout_s,
                )
            created = await self._groups.get_reader_group(scope, name)
            if created is None or created.value.id != group.id:
                # Deleted (and perhaps re-created) while we waited: not the group we made or found.
                return CreateResult(CreateStatus.FAILURE)
            if created.value.state is not ReaderGroupState.ACTIVE:
                return CreateResult(CreateStatus.FAILURE)  # a delete overtook the creation
            return CreateResult(CreateStatus.SUCCESS, created.value)
        return CreateResult(CreateStatus.FAILURE)

    async def _insert(
        self, scope: str, name: str, config: ReaderGroupConfig, requested_id: uuid.UUID
    ) -> Versioned[ReaderGroupRecord]:
        now = self._clock.now_ms()
        # A client-chosen id is kept; the default one asks for a fresh id. Either way the stored
        # generation starts at 0.
        group_id = uuid.uuid4() if requested_id == DEFAULT_READER_GROUP_ID else requested_id
        record = ReaderGroupRecord(scope, name, group_id, 0, ReaderGroupState.CREATING, config, False, now)
        request = NewRequest(
            RequestKind.CREATE_READER_GROUP,
            scope,
            reader_group_stream(name),
            now,
            payload={"name": name, "id": str(group_id)},
        )
        return (await self._groups.create_reader_group(record, request)).record

    async def _created(self, scope: str, name: str, group_id: uuid.UUID) -> bool:
        """Done once ACTIVE, or once that incarnation left CREATING any other way."""
        current = await self._groups.get_reader_group(scope, name)
        return (
            current is None
            or current.value.id != group_id
            or current.value.state is not ReaderGroupState.CREATING
        )

    async def _scope_active(self, scope: str) -> bool:
        try:
            return await self._scopes.get_scope_state(scope) is ScopeState.ACTIVE
        except NotFound:
            return False

    # --- get and list ---------------------------------------------------------------------------

    async def get_reader_group(self, scope: str, name: str) -> ReaderGroupRecord | None:
        """The stored group in any state; None when there is none."""
        require_present("scope", scope)
        require_present("reader group", name)
        current = await self._groups.get_reader_group(scope, name)
        return None if current is None else current.value

    async def list_reader_groups(self, scope: str) -> list[str]:
        """Names in name order; NotFound for a missing scope."""
        require_present("scope", scope)
        return await self._groups.list_reader_groups(scope)

    # --- update -------------------------------------------------------------------------------

    @operation("stream", "update_reader_group", "update_reader_group_failed", status_is(UpdateStatus.SUCCESS))
    async def update_reader_group(
        self, scope: str, name: str, config: ReaderGroupConfig, reader_group_id: uuid.UUID, generation: int
    ) -> UpdateResult:
        """The checks in Java's order: missing, generation, update in progress, id."""
        require_present("scope", scope)
        require_present("reader group", name)
        config.validate()
        since = self._clock.now_ms()
        for _ in range(_ATTEMPTS):
            current = await self._groups.get_reader_group(scope, name)
            if current is None or current.value.state is ReaderGroupState.DELETING:
                return UpdateResult(UpdateStatus.RG_NOT_FOUND, generation)
            group = current.value
            if group.generation != generation:
                return UpdateResult(UpdateStatus.INVALID_CONFIG, generation)
            if group.updating:
                return UpdateResult(UpdateStatus.FAILURE, generation)
            if group.id != reader_group_id:
                return UpdateResult(UpdateStatus.INVALID_CONFIG, generation)
            updated = dataclasses.replace(group, config=config, generation=generation + 1, updating=True)
            request = NewRequest(
                RequestKind.UPDATE_READER_GROUP,
                scope,
                reader_group_stream(name),
                self._clock.now_ms(),
                payload={
                    "name": name,
                    "id": str(group.id),
                    "generation": updated.generation,
                    # Decided against the configuration being replaced, which the worker no
                    # longer sees (UpdateReaderGroupEvent's isTransition and removeStreams).
                    "transition": is_subscriber_transition(group.config, config),
                    "remove_streams": [str(s) for s in streams_to_unsubscribe(group.config, config)],
                },
            )
            try:
                await self._groups.update_reader_group(updated, current.version, request=request)
            except WriteConflict:
                continue  # another update or a delete got there first: decide again
            except NotFound:
                return UpdateResult(UpdateStatus.RG_NOT_FOUND, generation)
            try:
                await wait_until(
                    functools.partial(self._updated, scope, name, updated),
                    f"update of reader group {scope}/{name}",
                    timeout_s=self._timeout_s,
                    failed=self._watch(scope, name, RequestKind.UPDATE_READER_GROUP, since),
                )
            except FinalFailure:
                return UpdateResult(UpdateStatus.FAILURE, generation)  # parked: no longer updating
            final = await self._groups.get_reader_group(scope, name)
            stored = updated.generation if final is None else final.value.generation
            return UpdateResult(UpdateStatus.SUCCESS, stored)
        return UpdateResult(UpdateStatus.FAILURE, generation)

    async def _updated(self, scope: str, name: str, updated: ReaderGroupRecord) -> bool:
        current = await self._groups.get_reader_group(scope, name)
        if current is None or current.value.id != updated.id:
            return True
        return not current.value.updating or current.value.generation != updated.generation

    # --- delete -------------------------------------------------------------------------------

    @operation(
        "stream", "delete_reader_group", "delete_reader_group_failed", outcome_is(DeleteStatus.SUCCESS)
    )
    async def delete_reader_group(self, scope: str, name: str, reader_group_id: str) -> DeleteStatus:
        """A missing group, or one with another id, is RG_NOT_FOUND (the id is parsed only
        once the group is found, as Java does)."""
        require_present("scope", scope)
        require_present("reader group", name)
        since = self._clock.now_ms()
        for _ in range(_ATTEMPTS):
            current = await self._groups.get_reader_group(scope, name)
            if current is None:
                return DeleteStatus.RG_NOT_FOUND
            group = current.value
            if group.id != parse_reader_group_id(reader_group_id):
                return DeleteStatus.RG_NOT_FOUND
            if group.state is not ReaderGroupState.DELETING:
                request = NewRequest(
                    RequestKind.DELETE_READER_GROUP,
                    scope,
                    reader_group_stream(name),
                    self._clock.now_ms(),
                    payload={"name": name, "id": str(group.id)},
                )
                deleting = dataclasses.replace(group, state=ReaderGroupState.DELETING)
                try:
                    await self._groups.update_reader_group(deleting, current.version, request=request)
                except (WriteConflict, NotFound):
                    continue
            # Already DELETING: its request is queued; wait for it like the first caller does.
            try:
                await self._wait_gone(
                    scope, name, group.id, f"deletion of reader group {scope}/{name}", since_ms=since
                )
            except FinalFailure:
                return DeleteStatus.FAILURE  # parked: the group is ACTIVE again
            return DeleteStatus.SUCCESS
        return DeleteStatus.FAILURE

    async def _wait_gone(
        self, scope: str, name: str, group_id: uuid.UUID, what: str, *, since_ms: int
    ) -> None:
        """FinalFailure when a delete request of the group parked at or after `since_ms` (taken
        when the call began: a rollback comes before its park, so an earlier park left the
        group ACTIVE, not DELETING)."""

        async def gone() -> bool:
            current = await self._groups.get_reader_group(scope, name)
            return current is None or current.value.id != group_id

        watch = self._watch(scope, name, RequestKind.DELETE_READER_GROUP, since_ms)
        await wait_until(gone, what, timeout_s=self._timeout_s, failed=watch)

    def _watch(self, scope: str, name: str, kind: RequestKind, since_ms: int) -> RequestWatch:
        return parked_request(self._requests, scope, reader_group_stream(name), kind, since_ms)
