"""A rolling transaction (as Pravega rolls one): commits a batch whose epoch E is older than the
active epoch A by writing two duplicate epochs, A+1 (E's segments, holding the commits) and
A+2 (A's segments, the new active epoch).

Crash-safe: every step checks what is done. A duplicate of E that is already sealed has had
every merge (it is sealed only after them), segment creation and epoch writes are
idempotent, and the pointer only moves forward. The caller fixes A in the batch record
before the first step, so a resumed batch rolls over the same epochs.
"""

from __future__ import annotations

import asyncio

from app.domain.errors import NotFound
from app.domain.ids import qualified_segment_name
from app.domain.records import EpochRecord, ScaleType, SegmentRecord
from app.domain.txns import rolling_epochs, txn_parent_id
from app.metrics.record import Stopwatch
from app.ports import CommitBatch
from workers.failpoints import failpoint
from workers.handlers.common import WorkflowDeps, advance_pointer, record_sealed_sizes, seal_segments

# The commit's merge of a batch, here into the copies of the transactions' epoch (the copies'
# creation and seal included, as they happen segment by segment with the merges).
_COMMITTED_SEGMENTS = Stopwatch("pravega_controller_transactions_committed_segments_latency_seconds")


async def roll_transactions(
    deps: WorkflowDeps, scope: str, name: str, active: EpochRecord, txn_epoch: EpochRecord, batch: CommitBatch
) -> None:
    plan = rolling_epochs(active, txn_epoch, deps.clock.now_ms())
    config = (await deps.streams.get_config(scope, name)).value
    start = _COMMITTED_SEGMENTS.start()
    copy_sizes = dict(
        await asyncio.gather(
            *(
                _fill_txn_copy(deps, scope, name, segment, batch, config.rollover_size_bytes)
                for segment in plan.txn_copy.segments
            )
        )
    )
    _COMMITTED_SEGMENTS.done(start)
    for segment in plan.active_copy.segments:
        await deps.segment_store.create_segment(
            qualified_segment_name(scope, name, segment.id),
            config.scaling.scale_type,
            config.scaling.target_rate,
            config.rollover_size_bytes,
        )
    await deps.streams.add_epoch(
        scope, name, plan.txn_copy, [s.id for s in active.segments], plan.txn_copy.segments, duplicate=True
    )
    await deps.streams.add_epoch(
        scope,
        name,
        plan.active_copy,
        [s.id for s in plan.txn_copy.segments],
        plan.active_copy.segments,
        duplicate=True,
    )
    await failpoint("commit.rolling.after_epochs")
    sizes = await seal_segments(deps, scope, name, [s.id for s in active.segments])
    await record_sealed_sizes(deps.streams, scope, name, {**copy_sizes, **sizes})
    await advance_pointer(deps, scope, name, plan.active_copy.epoch)


async def _fill_txn_copy(
    deps: WorkflowDeps,
    scope: str,
    name: str,
    segment: SegmentRecord,
    batch: CommitBatch,
    rollover_size_bytes: int,
) -> tuple[int, int]:
    """Creates the copy of a txn-epoch segment, merges the batch into it in commit order and
    seals it; returns (segment id, sealed length)."""
    store = deps.segment_store
    target = qualified_segment_name(scope, name, segment.id)
    try:
        info = await store.get_segment_info(target)
        if info.sealed:
            return segment.id, info.length
    except NotFound:
        # The copy has a fixed policy: it never takes writes of its own, only the merges.
        await store.create_segment(target, ScaleType.FIXED_NUM_SEGMENTS, 0, rollover_size_bytes)
    parent = qualified_segment_name(scope, name, txn_parent_id(segment.id, batch.epoch))
    await store.merge_transaction_segments(target, [(t.high, t.low) for t in batch.txns], txn_parent=parent)
    return segment.id, await store.seal_segment(target)
