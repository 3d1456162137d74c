"""Key-value table use cases: create, delete, segments, configuration, listing.

Create and delete are durable requests: the API writes the table's first step and its request
in one transaction, then waits for the workers (app/services/completion.py). A table is listed
and counted in every state, CREATING and DELETING included, as Java's scope table holds its
name from the create call until its deletion finished; getCurrentSegments refuses only a table
still CREATING.
"""

from __future__ import annotations

import enum
import uuid

from app.domain.errors import FinalFailure, IllegalState, NotFound, WriteConflict
from app.domain.kvtables import KvtConfig, KvtRecord, KvtState, kvt_stream_name
from app.domain.names import is_valid_user_name, require_present
from app.domain.records import SegmentRecord
from app.domain.requests import NewRequest, RequestKind
from app.metrics.record import operation, outcome_is
from app.ports import Clock, KvtStore, RequestQueue
from app.services.completion import RequestWatch, parked_request, wait_until
from app.services.paging import PAGE_LIMIT, Page, decode_token, page_of

_CONFLICT_ATTEMPTS = 20


class CreateKvtOutcome(enum.Enum):
    SUCCESS = "SUCCESS"
    FAILURE = "FAILURE"
    TABLE_EXISTS = "TABLE_EXISTS"
    SCOPE_NOT_FOUND = "SCOPE_NOT_FOUND"
    INVALID_TABLE_NAME = "INVALID_TABLE_NAME"


class DeleteKvtOutcome(enum.Enum):
    SUCCESS = "SUCCESS"
    FAILURE = "FAILURE"
    TABLE_NOT_FOUND = "TABLE_NOT_FOUND"


def create_request(record: KvtRecord, now_ms: int) -> NewRequest:
    return _table_request(RequestKind.CREATE_KVT, record, now_ms)


def delete_request(record: KvtRecord, now_ms: int) -> NewRequest:
    return _table_request(RequestKind.DELETE_KVT, record, now_ms)


def _table_request(kind: RequestKind, record: KvtRecord, now_ms: int) -> NewRequest:
    # Keyed by the table's pseudo-stream, so a table's requests run serially and never share a
    # key with a user stream; the payload names the incarnation the request is about.
    return NewRequest(
        kind,
        record.scope,
        kvt_stream_name(record.name),
        now_ms,
        payload={"kvt": record.name, "id": record.id},
    )


class KvtService:
    def __init__(
        self,
        kvts: KvtStore,
        clock: Clock,
        requests: RequestQueue,
        *,
        completion_timeout_s: float,
    ) -> None:
        self._kvts = kvts
        self._clock = clock
        # Where a waiting call finds its request parked (a final failure): it answers FAILURE at once.
        self._requests = requests
        self._timeout_s = completion_timeout_s

    @operation("kvtable", "created", "create_failed", outcome_is(CreateKvtOutcome.SUCCESS))
    async def create_kvt(
        self, scope: str, name: str, config: KvtConfig, creation_time: int | None = None
    ) -> CreateKvtOutcome:
        """Waits until the table is ACTIVE. SUCCESS only for the call that created it (Java
        compares creation timestamps; ours compares the incarnation id this call proposed,
        the same answer except that two calls within one millisecond cannot both succeed)."""
        require_present("scope", scope)
        # Java checks the configuration before the name: a bad config is an error either way.
        config.validate()
        if not is_valid_user_name(name):
            return CreateKvtOutcome.INVALID_TABLE_NAME
        timestamp = self._clock.now_ms() if creation_time is None else creation_time
        proposed = KvtRecord(scope, name, str(uuid.uuid4()), config, KvtState.CREATING, timestamp, 0)
        for _ in range(_CONFLICT_ATTEMPTS):
            try:
                creation = await self._kvts.create_kvt(proposed, create_request(proposed, timestamp))
                break
            except NotFound:
                return CreateKvtOutcome.SCOPE_NOT_FOUND
            except WriteConflict:
                continue  # the table we found went away meanwhile: try to create it again
        else:
            return CreateKvtOutcome.FAILURE
        found = creation.record.value
        if found.state == KvtState.DELETING:
            # Java would wait for an ACTIVE state that never comes (and time out); the name is
            # taken until the deletion finishes, so say so at once.
            return CreateKvtOutcome.TABLE_EXISTS
        # No parked-request watch here: a create that fails finally removes its incarnation
        # before its request is parked, and a table gone answers FAILURE below at once (as one
        # deleted meanwhile does, while its create request may still be queued).
        await wait_until(
            lambda: self._settled(scope, name, found.id),
            f"creation of key-value table {scope}/{name}",
            timeout_s=self._timeout_s,
        )
        if not creation.created:
            return CreateKvtOutcome.TABLE_EXISTS
        try:
            current = (await self._kvts.get_kvt(scope, name)).value
        except NotFound:
            return CreateKvtOutcome.FAILURE  # deleted (e.g. with its scope) before it was ready
        if current.id == proposed.id and current.state == KvtState.ACTIVE:
            return CreateKvtOutcome.SUCCESS
        return CreateKvtOutcome.FAILURE if current.id == proposed.id else CreateKvtOutcome.TABLE_EXISTS

    async def _settled(self, scope: str, name: str, kvt_id: str) -> bool:
        """Done waiting for a create: the incarnation left CREATING, or is gone."""
        try:
            current = (await self._kvts.get_kvt(scope, name)).value
        except NotFound:
            return True
        return current.id != kvt_id or current.state != KvtState.CREATING

    @operation("kvtable", "deleted", "delete_failed", outcome_is(DeleteKvtOutcome.SUCCESS))
    async def delete_kvt(self, scope: str, name: str) -> DeleteKvtOutcome:
        """Marks the table DELETING with its request, then waits until it is gone."""
        require_present("scope", scope)
        require_present("key-value table", name)
        since = self._clock.now_ms()
        for _ in range(_CONFLICT_ATTEMPTS):
            try:
                current = await self._kvts.get_kvt(scope, name)
            except NotFound:
                return DeleteKvtOutcome.TABLE_NOT_FOUND
            record = current.value
            if record.state == KvtState.DELETING:
                break  # its deletion is queued already (by a delete call or the scope's)
            try:
                await self._kvts.set_kvt_state(
                    scope,
                    name,
                    record.id,
                    KvtState.DELETING,
                    current.version,
                    request=delete_request(record, self._clock.now_ms()),
                )
                break
            except WriteConflict:
                continue
            except NotFound:
                return DeleteKvtOutcome.TABLE_NOT_FOUND
        else:
            return DeleteKvtOutcome.FAILURE
        try:
            await wait_until(
                lambda: self._gone(scope, name, record.id),
                f"deletion of key-value table {scope}/{name}",
                timeout_s=self._timeout_s,
                failed=self._watch(name, RequestKind.DELETE_KVT, scope, since),
            )
        except FinalFailure:
            return DeleteKvtOutcome.FAILURE  # parked: the table is ACTIVE again
        return DeleteKvtOutcome.SUCCESS

    def _watch(self, name: str, kind: RequestKind, scope: str, since_ms: int) -> RequestWatch:
        return parked_request(self._requests, scope, kvt_stream_name(name), kind, since_ms)

    async def _gone(self, scope: str, name: str, kvt_id: str) -> bool:
        try:
            return (await self._kvts.get_kvt(scope, name)).value.id != kvt_id
        except NotFound:
            return True

    async def current_segments(self, scope: str, name: str) -> list[SegmentRecord]:
        """In key order. NotFound when missing; IllegalState while CREATING."""
        require_present("scope", scope)
        require_present("key-value table", name)
        record = (await self._kvts.get_kvt(scope, name)).value
        if record.state == KvtState.CREATING:
            raise IllegalState(f"key-value table {scope}/{name} is still being created")
        return record.segments

    async def get_config(self, scope: str, name: str) -> KvtConfig:
        """Raises NotFound."""
        require_present("scope", scope)
        require_present("key-value table", name)
        return (await self._kvts.get_kvt(scope, name)).value.config

    async def list_kvts(self, scope: str, token: str, limit: int = PAGE_LIMIT) -> Page:
        """Raises NotFound when the scope is missing."""
        require_present("scope", scope)
        names = await self._kvts.list_kvts(scope, decode_token(token), min(limit, PAGE_LIMIT))
        return page_of(names, token)
