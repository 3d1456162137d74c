"""Reader-group requests (Pravega's CreateReaderGroupTask, UpdateReaderGroupTask,
DeleteReaderGroupTask), keyed by the group's `_RG<name>` stream so a group's requests run
serially, plus the deletion of every group of a scope for recursive scope deletion.

Every step is idempotent, so a crash after any of them re-runs the handler safely: adding a
subscriber that is there (with that generation) changes nothing, removing one that is gone
changes nothing, creating the state stream finishes one left in CREATING, and the final
state write is conditional on the version read. A request names the group's id (and an
update its generation); a request for another incarnation or generation is stale and is
dropped, as Java skips it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import uuid
from collections.abc import Iterable
from dataclasses import dataclass

from app.domain.errors import DomainError, NotFound
from app.domain.ids import qualified_segment_name
from app.domain.readergroups import (
    READER_GROUP_STREAM_ROLLOVER_BYTES,
    ReaderGroupRecord,
    ReaderGroupState,
    ScopedStream,
)
from app.domain.records import ScalingPolicy, StreamConfig, StreamState, Versioned
from app.domain.requests import Request, RequestKind
from app.ports import ReaderGroupStore
from app.services.retention import SubscriberService
from workers.handlers.common import (
    WorkflowDeps,
    delete_stream_and_segments,
    log,
    retry_conflicts,
    seal_segments,
)
from workers.runner import MarkStarted, RequestHandler

# createRGStream's configuration: one fixed segment, 4 MiB rollover.
STATE_STREAM_CONFIG = StreamConfig(
    ScalingPolicy.fixed(1), rollover_size_bytes=READER_GROUP_STREAM_ROLLOVER_BYTES
)


@dataclass(frozen=True, slots=True)
class ReaderGroupDeps:
    workflow: WorkflowDeps
    reader_groups: ReaderGroupStore
    subscribers: SubscriberService


def reader_group_handlers(
    deps: WorkflowDeps, reader_groups: ReaderGroupStore, subscribers: SubscriberService
) -> dict[RequestKind, RequestHandler]:
    rg = ReaderGroupDeps(deps, reader_groups, subscribers)
    return {
        RequestKind.CREATE_READER_GROUP: CreateReaderGroupHandler(rg),
        RequestKind.UPDATE_READER_GROUP: UpdateReaderGroupHandler(rg),
        RequestKind.DELETE_READER_GROUP: DeleteReaderGroupHandler(rg),
    }


async def _current(deps: ReaderGroupDeps, request: Request) -> Versioned[ReaderGroupRecord] | None:
    """The group the request is about, or None when it is gone or is another incarnation."""
    name = str(request.payload["name"])
    current = await deps.reader_groups.get_reader_group(request.scope, name)
    if current is None or current.value.id != uuid.UUID(str(request.payload["id"])):
        log.info(
            "%s request %d: reader group %s/%s is gone or re-created; skipping",
            request.kind.value,
            request.id,
            request.scope,
            name,
        )
        return None
    return current


class CreateReaderGroupHandler:
    """Subscribes a group with retention to its streams, creates its `_RG` stream, ACTIVE."""

    def __init__(self, deps: ReaderGroupDeps) -> None:
        self._deps = deps

    async def handle(self, request: Request, mark_started: MarkStarted) -> None:
        current = await _current(self._deps, request)
        if current is None or current.value.state is not ReaderGroupState.CREATING:
            return  # done already, or a delete overtook it (the delete request cleans up)
        await mark_started()
        group = current.value
        if group.config.is_subscriber:
            await _subscribe(self._deps, group, group.config.streams)
        await create_state_stream(self._deps.workflow, group.scope, group.state_stream, group.created_at)
        await _activate(self._deps, group)

    async def rollback(self, request: Request) -> None:
        """A create that failed finally: the group is removed (unsubscribed, its `_RG` stream
        dropped where the segment store lets us), so createReaderGroup answers FAILURE and the
        name is free, instead of a group CREATING for ever. Idempotent: only this incarnation,
        only while CREATING."""
        current = await _current(self._deps, request)
        if current is None or current.value.state is not ReaderGroupState.CREATING:
            return
        await _delete_group(self._deps, current.value, best_effort=True)


async def _activate(deps: ReaderGroupDeps, group: ReaderGroupRecord) -> None:
    async def step() -> None:
        current = await deps.reader_groups.get_reader_group(group.scope, group.name)
        if current is None or current.value.id != group.id:
            return
        if current.value.state is ReaderGroupState.CREATING:
            # Written as read but for the state: an update queued behind us keeps its flag.
            active = dataclasses.replace(current.value, state=ReaderGroupState.ACTIVE)
            await deps.reader_groups.update_reader_group(active, current.version)

    await retry_conflicts(step, f"reader group {group.scope}/{group.name}")


async def create_state_stream(deps: WorkflowDeps, scope: str, name: str, creation_time: int) -> None:
    """The stream-creation path of StreamService for an internal stream: metadata in CREATING
    (or what exists), its segment, ACTIVE; no mark stream and no tag index. An existing stream
    of that name is accepted as it is (Java's STREAM_EXISTS)."""
    creation = await deps.streams.create_stream_metadata(scope, name, STATE_STREAM_CONFIG, creation_time)
    if creation.state is not StreamState.CREATING:
        return
    for segment in creation.epoch_zero.segments:
        await deps.segment_store.create_segment(
            qualified_segment_name(scope, name, segment.id),
            creation.config.scaling.scale_type,
            creation.config.scaling.target_rate,
            creation.config.rollover_size_bytes,
        )

    async def activate() -> None:
        state = await deps.streams.get_state(scope, name)
        if state.value is StreamState.CREATING:
            await deps.streams.activate_created_stream(scope, name, state.version, index_tags=False)

    await retry_conflicts(activate, f"state of {scope}/{name}")


class UpdateReaderGroupHandler:
    """Unsubscribes the streams the update dropped (all of them when the group stops being a
    subscriber), (re)subscribes every configured stream with the new generation when the group
    is a subscriber, then clears `updating`."""

    def __init__(self, deps: ReaderGroupDeps) -> None:
        self._deps = deps

    async def handle(self, request: Request, mark_started: MarkStarted) -> None:
        current = await _current(self._deps, request)
        if current is None:
            return
        group = current.value
        if group.generation != int(request.payload["generation"]) or not group.updating:
            return  # a later update replaced this one, or this one completed already
        await mark_started()
        if request.payload.get("transition"):
            removed = [ScopedStream.parse(str(s)) for s in request.payload.get("remove_streams", [])]
            await _unsubscribe(self._deps, group, removed)
            if group.config.is_subscriber:
                await _subscribe(self._deps, group, group.config.streams)
        await self._complete(group)

    async def rollback(self, request: Request) -> None:
        """An update that failed finally: `updating` is cleared, so the group takes updates and
        deletes again (the caller's updateReaderGroup answers FAILURE; the configuration stays
        the one written with the update, its subscriptions possibly part done until the next
        update). Idempotent: only this generation, only while updating."""
        current = await _current(self._deps, request)
        if current is None or current.value.generation != int(request.payload["generation"]):
            return
        await self._complete(current.value)

    async def _complete(self, group: ReaderGroupRecord) -> None:
        async def step() -> None:
            current = await self._deps.reader_groups.get_reader_group(group.scope, group.name)
            if current is None or current.value.id != group.id:
                return
            if current.value.generation == group.generation and current.value.updating:
                done = dataclasses.replace(current.value, updating=False)
                await self._deps.reader_groups.update_reader_group(done, current.version)

        await retry_conflicts(step, f"reader group {group.scope}/{group.name}")


class DeleteReaderGroupHandler:
    """Unsubscribes the group, seals and deletes its `_RG` stream, removes its record."""

    def __init__(self, deps: ReaderGroupDeps) -> None:
        self._deps = deps

    async def handle(self, request: Request, mark_started: MarkStarted) -> None:
        current = await _current(self._deps, request)
        if current is None or current.value.state is not ReaderGroupState.DELETING:
            return
        await mark_started()
        await _delete_group(self._deps, current.value)

    async def rollback(self, request: Request) -> None:
        """A delete that failed finally: the group is ACTIVE again (deleteReaderGroup answers
        FAILURE and may be called again: every step of a delete is safe to repeat), not
        DELETING for ever. Idempotent: only this incarnation, only while DELETING."""
        group = await _current(self._deps, request)
        if group is None:
            return
        deps = self._deps

        async def step() -> None:
            current = await deps.reader_groups.get_reader_group(group.value.scope, group.value.name)
            if current is None or current.value.id != group.value.id:
                return
            if current.value.state is ReaderGroupState.DELETING:
                active = dataclasses.replace(current.value, state=ReaderGroupState.ACTIVE)
                await deps.reader_groups.update_reader_group(active, current.version)

        await retry_conflicts(step, f"reader group {group.value.scope}/{group.value.name}")


async def delete_reader_groups_in_scope(deps: ReaderGroupDeps, scope: str) -> int:
    """Recursive scope deletion's share (DeleteScopeTask deletes each reader group of the
    scope): every group, whatever its state, is unsubscribed, its `_RG` stream sealed and
    deleted, its record removed. Returns how many groups were removed; safe to repeat. The
    scope must already be DELETING, so no group can be created meanwhile."""
    removed = 0
    try:
        names = await deps.reader_groups.list_reader_groups(scope)
    except NotFound:
        return 0
    for name in names:
        current = await deps.reader_groups.get_reader_group(scope, name)
        if current is None:
            continue
        await _delete_group(deps, current.value)
        removed += 1
    return removed


async def _delete_group(
    deps: ReaderGroupDeps, group: ReaderGroupRecord, *, best_effort: bool = False
) -> None:
    """`best_effort` (a failed create's rollback): a segment store refusing to drop the `_RG`
    stream leaves it behind (a later create of the name takes it as it is) but not the record."""
    if group.config.is_subscriber:
        await _unsubscribe(deps, group, group.config.streams)
    try:
        await _delete_state_stream(deps.workflow, group.scope, group.state_stream)
    except DomainError as exc:
        if not best_effort:
            raise
        log.warning("reader group %s/%s: its state stream is left behind: %s", group.scope, group.name, exc)

    async def step() -> None:
        current = await deps.reader_groups.get_reader_group(group.scope, group.name)
        if current is None or current.value.id != group.id:
            return
        with contextlib.suppress(NotFound):
            await deps.reader_groups.delete_reader_group(group.scope, group.name, group.id, current.version)

    await retry_conflicts(step, f"reader group {group.scope}/{group.name}")


async def _delete_state_stream(deps: WorkflowDeps, scope: str, name: str) -> None:
    try:
        state, active = await deps.streams.get_active_epoch(scope, name)
    except NotFound:
        return  # never created, or deleted by an earlier run
    if state is not StreamState.SEALED:
        await seal_segments(deps, scope, name, [s.id for s in active.segments])
    with contextlib.suppress(NotFound):
        await delete_stream_and_segments(deps, scope, name, 0)


# --- subscriptions (consumption-based retention) ----------------------------------------------


async def _subscribe(
    deps: ReaderGroupDeps, group: ReaderGroupRecord, streams: Iterable[ScopedStream]
) -> None:
    for stream in streams:
        try:
            await deps.subscribers.add_subscriber(
                stream.scope, stream.stream, group.subscriber, group.id, group.generation
            )
        except NotFound:
            # Java's task fails for good here and the group never becomes ACTIVE; a stream that
            # does not exist has no retention to bound, so it is left out instead.
            log.warning(
                "reader group %s/%s: stream %s not found; not subscribed to it",
                group.scope,
                group.name,
                stream,
            )


async def _unsubscribe(
    deps: ReaderGroupDeps, group: ReaderGroupRecord, streams: Iterable[ScopedStream]
) -> None:
    for stream in streams:
        # A subscriber registered with a newer generation than the group's is left in place.
        with contextlib.suppress(NotFound):
            await deps.subscribers.remove_subscriber(
                stream.scope, stream.stream, group.subscriber, group.generation
            )
