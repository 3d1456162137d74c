"""CREATE_KVT and DELETE_KVT requests (Pravega's CreateTableTask, DeleteTableTask) and the
deletion of a scope's tables for the recursive scope deletion.

Every step is idempotent (creating an existing table segment or deleting a missing one
succeeds; state moves and the row's removal are conditional on the incarnation and version
read), so a request re-run after a crash at any point finishes the work exactly once. A create
that finds its table gone or DELETING once its segments exist removes them again: a deletion
running concurrently (the scope's, under another request key) may have passed them already.
"""

from __future__ import annotations

import logging

from app.domain.errors import DomainError, NotFound
from app.domain.kvtables import KvtRecord, KvtState, check_kvt_transition
from app.domain.records import ScopeState, Versioned
from app.domain.requests import Request, RequestKind
from app.ports import KvtStore
from app.services.paging import PAGE_LIMIT
from workers.failpoints import failpoint
from workers.handlers.common import WorkflowDeps, retry_conflicts
from workers.runner import MarkStarted, RequestHandler

log = logging.getLogger("pgcontroller.workflows")


def _target(request: Request) -> tuple[str, str, str]:
    return request.scope, str(request.payload["kvt"]), str(request.payload["id"])


async def _read(kvts: KvtStore, scope: str, name: str, kvt_id: str) -> Versioned[KvtRecord] | None:
    """This incarnation as stored now; None once it is gone (or the name holds a newer one)."""
    try:
        current = await kvts.get_kvt(scope, name)
    except NotFound:
        return None
    return current if current.value.id == kvt_id else None


async def _delete_segments(deps: WorkflowDeps, record: KvtRecord) -> None:
    for i, name in enumerate(record.segment_names):
        await deps.segment_store.delete_table_segment(name, must_be_empty=False)
        if i == 0:
            await failpoint("kvt_delete.after_first_segment")


class _KvtHandler:
    """What a table's create and delete handlers share: the workflow's dependencies and the
    table store."""

    def __init__(self, deps: WorkflowDeps, kvts: KvtStore) -> None:
        self._deps = deps
        self._kvts = kvts


class CreateKvtHandler(_KvtHandler):
    async def handle(self, request: Request, mark_started: MarkStarted) -> None:
        scope, name, kvt_id = _target(request)
        current = await _read(self._kvts, scope, name, kvt_id)
        if current is None or current.value.state != KvtState.CREATING:
            return  # created already, being deleted, or gone: nothing left to create
        if (await self._deps.scopes.get_scope(scope)).value == ScopeState.DELETING:
            # The scope's deletion removes this table; segments made now would only race it.
            return
        await mark_started()
        record = current.value
        for i, segment in enumerate(record.segment_names):
            await self._deps.segment_store.create_table_segment(
                segment, record.config.key_length, record.config.rollover_size_bytes
            )
            if i == 0:
                await failpoint("kvt_create.after_first_segment")
        await failpoint("kvt_create.after_segments")
        if not await self._activate(scope, name, kvt_id):
            log.info(
                "key-value table %s/%s went away while being created; removing its segments", scope, name
            )
            await _delete_segments(self._deps, record)

    async def rollback(self, request: Request) -> None:
        """A create that failed finally: this incarnation is removed (its segments where the
        segment store lets us, its last segment number recorded for the name's next table), so
        the name is free for a new create instead of CREATING for ever. Idempotent: an
        incarnation gone or past CREATING is left alone."""
        scope, name, kvt_id = _target(request)
        current = await _read(self._kvts, scope, name, kvt_id)
        if current is None or current.value.state != KvtState.CREATING:
            return
        try:
            await _delete_segments(self._deps, current.value)
        except DomainError as exc:
            log.warning("failed create of key-value table %s/%s left segments: %s", scope, name, exc)
        await _forget(self._kvts, current.value)

    async def _activate(self, scope: str, name: str, kvt_id: str) -> bool:
        """CREATING -> ACTIVE; False when this incarnation is gone or being deleted."""

        async def step() -> bool:
            current = await _read(self._kvts, scope, name, kvt_id)
            if current is None or current.value.state == KvtState.DELETING:
                return False
            if current.value.state == KvtState.CREATING:
                check_kvt_transition(current.value.state, KvtState.ACTIVE)
                try:
                    await self._kvts.set_kvt_state(scope, name, kvt_id, KvtState.ACTIVE, current.version)
                except NotFound:
                    return False
            return True

        return await retry_conflicts(step, f"state of key-value table {scope}/{name}")


class DeleteKvtHandler(_KvtHandler):
    async def handle(self, request: Request, mark_started: MarkStarted) -> None:
        scope, name, kvt_id = _target(request)
        current = await _read(self._kvts, scope, name, kvt_id)
        if current is None:
            return
        if current.value.state != KvtState.DELETING:
            # The delete API writes DELETING with this request; anything else is not ours to undo.
            log.warning(
                "delete request for key-value table %s/%s found it %s", scope, name, current.value.state
            )
            return
        await mark_started()
        await delete_table(self._deps, self._kvts, current.value)

    async def rollback(self, request: Request) -> None:
        """A delete that failed finally: the table is ACTIVE again (the caller's deleteKeyValueTable
        answers FAILURE and may be called again: deleting segments already gone succeeds), not
        DELETING for ever with nothing left to run it. Idempotent: only this incarnation, only
        while DELETING."""
        scope, name, kvt_id = _target(request)

        async def step() -> None:
            current = await _read(self._kvts, scope, name, kvt_id)
            if current is None or current.value.state != KvtState.DELETING:
                return
            try:
                await self._kvts.set_kvt_state(scope, name, kvt_id, KvtState.ACTIVE, current.version)
            except NotFound:
                return

        await retry_conflicts(step, f"state of key-value table {scope}/{name}")


async def delete_table(deps: WorkflowDeps, kvts: KvtStore, record: KvtRecord) -> None:
    """Deletes a DELETING table's segments, records its last segment number, removes its row."""
    await _delete_segments(deps, record)
    await failpoint("kvt_delete.after_segments")
    await _forget(kvts, record)


async def _forget(kvts: KvtStore, record: KvtRecord) -> None:
    """Records the incarnation's last segment number (a later table of the name starts after
    it), then removes its row."""
    scope, name = record.scope, record.name

    async def record_last() -> None:
        existing = await kvts.get_deleted_kvt(scope, name)
        if existing is not None and existing.value >= record.last_segment_number:
            return
        await kvts.put_deleted_kvt(
            scope, name, record.last_segment_number, None if existing is None else existing.version
        )

    await retry_conflicts(record_last, f"deleted-table record of {scope}/{name}")
    await failpoint("kvt_delete.after_record")

    async def remove() -> None:
        current = await _read(kvts, scope, name, record.id)
        if current is not None:
            await kvts.delete_kvt(scope, name, record.id, current.version)

    await retry_conflicts(remove, f"key-value table {scope}/{name}")


async def _mark_deleting(kvts: KvtStore, scope: str, name: str) -> KvtRecord | None:
    async def step() -> KvtRecord | None:
        try:
            current = await kvts.get_kvt(scope, name)
        except NotFound:
            return None
        record = current.value
        if record.state != KvtState.DELETING:
            check_kvt_transition(record.state, KvtState.DELETING)
            try:
                await kvts.set_kvt_state(scope, name, record.id, KvtState.DELETING, current.version)
            except NotFound:
                return None
        return record

    return await retry_conflicts(step, f"state of key-value table {scope}/{name}")


async def delete_kvts_in_scope(deps: WorkflowDeps, kvts: KvtStore, scope: str) -> None:
    """Deletes every table of the scope, whatever its state (segments, then metadata), for the
    recursive scope deletion. Safe to repeat, and to run beside the tables' own requests: a
    table is marked DELETING before its segments go, which stops a create in flight."""
    after = ""
    while True:
        try:
            names = await kvts.list_kvts(scope, after, PAGE_LIMIT)
        except NotFound:
            return
        if not names:
            return
        for name in names:
            record = await _mark_deleting(kvts, scope, name)
            if record is not None:
                await delete_table(deps, kvts, record)
        after = names[-1]


def kvt_handlers(deps: WorkflowDeps, kvts: KvtStore) -> dict[RequestKind, RequestHandler]:
    return {
        RequestKind.CREATE_KVT: CreateKvtHandler(deps, kvts),
        RequestKind.DELETE_KVT: DeleteKvtHandler(deps, kvts),
    }
