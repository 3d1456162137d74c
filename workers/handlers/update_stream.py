"""Update requests (Pravega's UpdateStreamTask): ACTIVE -> UPDATING, scale when the segment
count must change, push the policy to the segment store, fix the tag index, clear the
"updating" flag, UPDATING -> ACTIVE."""

from __future__ import annotations

from app.domain.ids import qualified_segment_name
from app.domain.names import is_internal_stream
from app.domain.records import StreamState
from app.domain.requests import Request, previous_config
from app.domain.scale_rules import compute_epoch_transition, segment_count_update
from workers.handlers.behind_seal import closed_by_seal
from workers.handlers.common import (
    WorkflowDeps,
    drop_transition,
    log,
    move_state,
    restore_active,
    retry_conflicts,
)
from workers.handlers.scale_steps import run_pending_scale
from workers.runner import MarkStarted


class UpdateStreamHandler:
    def __init__(self, deps: WorkflowDeps) -> None:
        self._deps = deps

    async def handle(self, request: Request, mark_started: MarkStarted) -> None:
        scope, name = request.scope, request.stream
        streams = self._deps.streams
        config, updating = (await streams.get_config_record(scope, name)).value
        if not updating:
            if (await streams.get_state(scope, name)).value == StreamState.UPDATING:
                await move_state(streams, scope, name, StreamState.ACTIVE)
            return
        if await closed_by_seal(streams, scope, name):
            # Sealed (or being sealed) after this update was accepted: it can never run. As
            # Pravega's UpdateStreamTask, the "updating" flag is dropped so the waiting caller
            # ends (it answers STREAM_SEALED); nothing reaches the segment store.
            log.info("update of %s/%s found it sealed; the update ends unapplied", scope, name)
            await self._complete(scope, name)
            return
        await move_state(streams, scope, name, StreamState.UPDATING)
        await mark_started()
        # A transition left pending (ours from before a crash, or a manual scale queued behind
        # this update) runs to its end first, so the count below is judged on a settled epoch.
        await run_pending_scale(self._deps, scope, name, manual=True)
        _state, active = await streams.get_active_epoch(scope, name)
        ranges = segment_count_update(config, active)
        if ranges is not None:
            etr_v = await streams.get_epoch_transition(scope, name)
            etr = compute_epoch_transition(
                active, [s.id for s in active.segments], ranges, self._deps.clock.now_ms()
            )
            await streams.set_epoch_transition(scope, name, etr, etr_v.version)
            await run_pending_scale(self._deps, scope, name, manual=False)
            _state, active = await streams.get_active_epoch(scope, name)
        for segment in active.segments:
            await self._deps.segment_store.update_policy(
                qualified_segment_name(scope, name, segment.id),
                config.scaling.scale_type,
                config.scaling.target_rate,
            )
        await self._complete(scope, name)
        await move_state(streams, scope, name, StreamState.ACTIVE)

    async def _complete(self, scope: str, name: str) -> None:
        streams = self._deps.streams

        async def step() -> None:
            record = await streams.get_config_record(scope, name)
            config, updating = record.value
            if updating:
                await streams.set_config(scope, name, config, False, record.version)

        await retry_conflicts(step, f"configuration of {scope}/{name}")
        if not is_internal_stream(name):
            await streams.reindex_tags(scope, name)

    # --- rollback of a parked request (a final failure) -----------------------------------------

    async def rollback(self, request: Request) -> None:
        """Puts the configuration the update replaced back (not updating), drops a transition this
        update had yet to run, and puts the stream back to ACTIVE, so later requests run. Steps
        the update completed stay (a scale, policies pushed to segments). Safe to repeat."""
        scope, name = request.scope, request.stream
        streams = self._deps.streams

        async def step() -> None:
            record = await streams.get_config_record(scope, name)
            config, updating = record.value
            if updating:
                # Without the configuration it replaced (a request of an older version), the
                # requested one stays, no longer "updating".
                await streams.set_config(scope, name, previous or config, False, record.version)

        previous = previous_config(request.payload)
        await retry_conflicts(step, f"configuration of {scope}/{name}")
        if (await streams.get_state(scope, name)).value == StreamState.UPDATING:
            await drop_transition(streams, scope, name)
        await restore_active(streams, scope, name, StreamState.UPDATING)
