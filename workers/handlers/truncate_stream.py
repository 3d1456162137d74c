"""Truncate requests (Pravega's TruncateStreamTask): ACTIVE -> TRUNCATING, truncate each
segment of the cut at its offset, delete the segments wholly before it, mark the truncation
record complete, TRUNCATING -> ACTIVE."""

from __future__ import annotations

from dataclasses import replace

from app.domain.errors import NotFound
from app.domain.ids import qualified_segment_name
from app.domain.records import StreamState
from app.domain.requests import Request, previous_truncation
from app.domain.streamcuts import completed_truncation
from workers.handlers.behind_seal import closed_by_seal
from workers.handlers.common import WorkflowDeps, log, move_state, restore_active, retry_conflicts
from workers.runner import MarkStarted


class TruncateStreamHandler:
    def __init__(self, deps: WorkflowDeps) -> None:
        self._deps = deps

    async def handle(self, request: Request, mark_started: MarkStarted) -> None:
        scope, name = request.scope, request.stream
        streams = self._deps.streams
        record = (await streams.get_truncation(scope, name)).value
        if not record.updating:
            if (await streams.get_state(scope, name)).value == StreamState.TRUNCATING:
                await move_state(streams, scope, name, StreamState.ACTIVE)
            return
        # A truncation accepted before a seal was requested is still carried out: it concerns
        # data before the cut only, so it needs no state of its own on a SEALING or SEALED stream
        # (which can never return to ACTIVE, and must not wait for it).
        closed = await closed_by_seal(streams, scope, name)
        if not closed:
            await move_state(streams, scope, name, StreamState.TRUNCATING)
        await mark_started()
        store = self._deps.segment_store
        for segment, offset in sorted(record.stream_cut.items()):
            if offset < 0:
                continue  # a future segment: nothing of it is before the cut
            try:
                await store.truncate_segment(qualified_segment_name(scope, name, segment), offset)
            except NotFound:
                log.warning(
                    "truncating %s/%s: segment %d is missing in the segment store", scope, name, segment
                )
        for segment in sorted(record.to_delete):
            await store.delete_segment(qualified_segment_name(scope, name, segment))
        await self._complete(scope, name)
        if not closed:
            await move_state(streams, scope, name, StreamState.ACTIVE)

    async def _complete(self, scope: str, name: str) -> None:
        streams = self._deps.streams

        async def step() -> None:
            current = await streams.get_truncation(scope, name)
            if current.value.updating:
                await streams.complete_truncation(
                    scope,
                    name,
                    completed_truncation(current.value),
                    current.value.to_delete,
                    self._deps.clock.now_ms(),
                    current.version,
                )

        await retry_conflicts(step, f"truncation record of {scope}/{name}")

    # --- rollback of a parked request (a final failure) -----------------------------------------

    async def rollback(self, request: Request) -> None:
        """Puts the truncation record back as it was before this request (its cut unchanged) and
        the stream back to ACTIVE. Safe to repeat: a record no longer updating is left alone."""
        scope, name = request.scope, request.stream
        streams = self._deps.streams
        previous = previous_truncation(request.payload)

        async def step() -> None:
            current = await streams.get_truncation(scope, name)
            if not current.value.updating:
                return
            # Without the record it replaced (a request of an older version), keep the segments
            # deleted so far and drop only what this truncation had yet to do.
            restored = previous or replace(current.value, to_delete=frozenset(), updating=False)
            await streams.set_truncation(scope, name, restored, current.version)

        await retry_conflicts(step, f"truncation record of {scope}/{name}")
        await restore_active(streams, scope, name, StreamState.TRUNCATING)
