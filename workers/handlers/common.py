"""Steps shared by the request handlers: state moves, sealing segments, sealed sizes.

Each step is idempotent: a state already reached is success, sealing a sealed segment
returns its length again, and sizes merge into their shard under a version check.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import TypeVar

from app.domain.errors import NotFound, WriteConflict
from app.domain.ids import epoch_of, qualified_segment_name
from app.domain.names import mark_stream_name
from app.domain.records import SEALED_SIZE_SHARD_EPOCHS, StreamState
from app.domain.states import check_transition
from app.ports import Clock, ScopeStore, SegmentStore, StreamStore, TxnStore

log = logging.getLogger("pgcontroller.workflows")

_CONFLICT_ATTEMPTS = 20
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class WorkflowDeps:
    streams: StreamStore
    scopes: ScopeStore
    segment_store: SegmentStore
    clock: Clock
    txns: TxnStore


async def retry_conflicts(step: Callable[[], Awaitable[T]], what: str) -> T:
    """Runs a read-then-conditional-write step again from a fresh read when it lost a race."""
    for _ in range(_CONFLICT_ATTEMPTS):
        try:
            return await step()
        except WriteConflict:
            continue
    raise WriteConflict(f"{what} kept changing")


async def move_state(streams: StreamStore, scope: str, name: str, target: StreamState) -> StreamState:
    """Moves the stream to `target` (a no-op when it is there); returns the state it left.
    OperationNotAllowed when the state machine forbids the move now."""

    async def step() -> StreamState:
        current = await streams.get_state(scope, name)
        if current.value != target:
            check_transition(current.value, target)
            await streams.set_state(scope, name, target, current.version)
        return current.value

    return await retry_conflicts(step, f"state of {scope}/{name}")


async def restore_active(streams: StreamStore, scope: str, name: str, working: StreamState) -> None:
    """Rollback of a parked request: the stream leaves `working` (the state its workflow put it
    in) for ACTIVE. Written directly, not through the state machine, which has no way back from
    some working states (SEALING); any other state is left alone, so it is safe to repeat."""

    async def step() -> None:
        current = await streams.get_state(scope, name)
        if current.value == working:
            await streams.set_state(scope, name, StreamState.ACTIVE, current.version)

    await retry_conflicts(step, f"state of {scope}/{name}")


async def drop_transition(streams: StreamStore, scope: str, name: str) -> None:
    """Rollback of a parked scale: empties the epoch transition record (safe to repeat)."""

    async def step() -> None:
        etr_v = await streams.get_epoch_transition(scope, name)
        if etr_v.value is not None:
            await streams.set_epoch_transition(scope, name, None, etr_v.version)

    await retry_conflicts(step, f"epoch transition of {scope}/{name}")


async def advance_pointer(deps: WorkflowDeps, scope: str, name: str, epoch: int) -> None:
    """Moves the current-epoch pointer forward to `epoch` (never back)."""

    async def step() -> None:
        pointer = await deps.streams.get_current_epoch_pointer(scope, name)
        if pointer.value < epoch:
            await deps.streams.set_current_epoch_pointer(scope, name, epoch, pointer.version)

    await retry_conflicts(step, f"current epoch of {scope}/{name}")


async def seal_segments(deps: WorkflowDeps, scope: str, name: str, segments: Iterable[int]) -> dict[int, int]:
    """Seals each segment in the segment store and returns the final lengths."""
    sizes: dict[int, int] = {}
    for segment in segments:
        try:
            sizes[segment] = await deps.segment_store.seal_segment(
                qualified_segment_name(scope, name, segment)
            )
        except NotFound:
            # Never created or already deleted: nothing is readable from it, so its size is 0.
            log.warning("sealing %s/%s segment %d: the segment store does not have it", scope, name, segment)
            sizes[segment] = 0
    return sizes


async def record_sealed_sizes(streams: StreamStore, scope: str, name: str, sizes: dict[int, int]) -> None:
    by_shard: dict[int, dict[int, int]] = {}
    for segment, size in sizes.items():
        by_shard.setdefault(epoch_of(segment) // SEALED_SIZE_SHARD_EPOCHS, {})[segment] = size
    for shard, shard_sizes in by_shard.items():
        for _ in range(_CONFLICT_ATTEMPTS):
            current = await streams.get_sealed_size_shard(scope, name, shard)
            existing = {} if current is None else current.value
            if all(existing.get(k) == v for k, v in shard_sizes.items()):
                break
            try:
                await streams.put_sealed_size_shard(
                    scope,
                    name,
                    shard,
                    {**existing, **shard_sizes},
                    None if current is None else current.version,
                )
                break
            except WriteConflict:
                continue
        else:
            raise WriteConflict(f"sealed-size shard {shard} of {scope}/{name} kept changing")


async def delete_stream_and_segments(deps: WorkflowDeps, scope: str, name: str, creation_time: int) -> None:
    """Deletes the mark stream, every segment, then the metadata. Safe to repeat."""
    mark = mark_stream_name(name)
    with contextlib.suppress(NotFound):
        await _delete_segments_and_metadata(deps, scope, mark, 0)
    await _delete_segments_and_metadata(deps, scope, name, creation_time)


async def _delete_segments_and_metadata(
    deps: WorkflowDeps, scope: str, name: str, creation_time: int
) -> None:
    truncation = await deps.streams.get_truncation(scope, name)
    already_deleted = truncation.value.deleted_segments | truncation.value.to_delete
    for segment in await deps.streams.all_segment_ids(scope, name):
        if segment not in already_deleted:
            await deps.segment_store.delete_segment(qualified_segment_name(scope, name, segment))
    await deps.streams.delete_stream(scope, name, creation_time)
