"""Runs a stream's pending epoch transition to its end (ScaleOperationTask from "startScale" to
emptying the transition record: new segments, new epoch, seal, sizes, epoch pointer).

Used by the scale handler and by updates that change the segment count. Crash-safe: each
step checks what is done already, so a restart after any step completes the same scale
with the same ids, and no segment is created twice.
"""

from __future__ import annotations

from app.domain.ids import qualified_segment_name
from app.domain.records import EpochRecord, EpochTransitionRecord, SegmentRecord, Versioned
from app.domain.scale_rules import migrate_transition, new_epoch_record
from workers.failpoints import failpoint
from workers.handlers.common import (
    WorkflowDeps,
    advance_pointer,
    record_sealed_sizes,
    retry_conflicts,
    seal_segments,
)


def _completed(etr: EpochTransitionRecord, active: EpochRecord) -> bool:
    return active.epoch >= etr.new_epoch and all(active.contains(sid) for sid, _, _ in etr.new_segments)


async def run_pending_scale(deps: WorkflowDeps, scope: str, name: str, *, manual: bool) -> bool:
    """True when a transition was pending and is now complete; False when there was none or it
    no longer fitted the stream and was discarded."""
    etr_v = await deps.streams.get_epoch_transition(scope, name)
    etr = etr_v.value
    if etr is None:
        return False
    _state, active = await deps.streams.get_active_epoch(scope, name)
    if not _completed(etr, active):
        fitted = await _fit_to_active(deps, scope, name, etr_v, active, manual=manual)
        if fitted is None:
            await discard_transition(deps, scope, name, etr)
            return False
        etr = fitted.value
        await _apply(deps, scope, name, etr, active)
    await discard_transition(deps, scope, name, etr)
    return True


async def _fit_to_active(
    deps: WorkflowDeps,
    scope: str,
    name: str,
    etr_v: Versioned[EpochTransitionRecord | None],
    active: EpochRecord,
    *,
    manual: bool,
) -> Versioned[EpochTransitionRecord] | None:
    etr = etr_v.value
    assert etr is not None
    if etr.active_epoch == active.epoch:
        return Versioned(etr, etr_v.version)
    submitted_on = await deps.streams.get_epoch(scope, name, etr.active_epoch)
    migrated = migrate_transition(etr, submitted_on, active, manual=manual)
    if migrated is None:
        return None
    version = await deps.streams.set_epoch_transition(scope, name, migrated, etr_v.version)
    return Versioned(migrated, version)


async def _apply(
    deps: WorkflowDeps, scope: str, name: str, etr: EpochTransitionRecord, active: EpochRecord
) -> None:
    config = (await deps.streams.get_config(scope, name)).value
    for sid, _start, _end in etr.new_segments:
        await deps.segment_store.create_segment(
            qualified_segment_name(scope, name, sid),
            config.scaling.scale_type,
            config.scaling.target_rate,
            config.rollover_size_bytes,
        )
    change = new_epoch_record(active, etr)
    created_ids = set(change.created)
    created: list[SegmentRecord] = [s for s in change.record.segments if s.id in created_ids]
    await deps.streams.add_epoch(scope, name, change.record, change.sealed, created)
    await failpoint("scale.after_new_epoch")
    sizes = await seal_segments(deps, scope, name, change.sealed)
    await record_sealed_sizes(deps.streams, scope, name, sizes)
    await advance_pointer(deps, scope, name, change.record.epoch)


async def discard_transition(deps: WorkflowDeps, scope: str, name: str, ours: EpochTransitionRecord) -> None:
    """Empties the record only while it still holds our transition."""

    async def step() -> None:
        etr_v = await deps.streams.get_epoch_transition(scope, name)
        if etr_v.value == ours:
            await deps.streams.set_epoch_transition(scope, name, None, etr_v.version)

    await retry_conflicts(step, f"epoch transition of {scope}/{name}")
