"""Requests that need no per-connection state: segment administration, attributes, merges and
table segments, each turned into one storage call and one reply (the connection's dispatch table,
connection.ROUTES, names the method for each command type).

Invariant: a reply is built only from what the storage call returned (so from committed state),
or is a refusal of the request's own values made before any storage call (nothing is stored);
every change that can end a parked tail read wakes that segment's readers.
"""

from __future__ import annotations

from typing import Final

from app.domain.records import ScaleType
from app.domain.segment_names import has_transaction_delimiter
from app.segmentstore import storage as st
from app.segmentstore.server.refusals import illegal_argument
from app.segmentstore.server.tails import Tails
from app.segmentstore.wire import commands as wc

# The wire's scale type byte: NoScaling, Throughput (KB/s), EventRate (Java's ScaleType).
_SCALE_TYPES: Final = frozenset(int(scale_type) for scale_type in ScaleType)


def _entries(entries: list[st.TableEntry]) -> tuple[tuple[wc.TableKey, wc.TableValue], ...]:
    return tuple((wc.TableKey(e.key, e.version), wc.TableValue(e.value)) for e in entries)


def _policy_refusal(request_id: int, segment: str, scale_type: int, target_rate: int) -> wc.Command | None:
    """ErrorMessage(ILLEGAL_ARGUMENT) for a policy no store can act on. Java's store stores any
    byte and rate and replies success, and then its auto-scaler's ScaleType.fromValue throws
    IllegalArgumentException, out of the client's sight; refused here, nothing of it is stored.
    No controller sends either (Java's ScalingPolicy wants a positive rate to scale by)."""
    if scale_type not in _SCALE_TYPES:
        return illegal_argument(request_id, segment, f"unsupported scale type {scale_type}")
    if target_rate < 0:
        return illegal_argument(request_id, segment, f"target rate {target_rate} is negative")
    return None


def _name_refusal(request_id: int, segment: str) -> wc.Command | None:
    # Java's segment metadata refuses an empty name (IllegalArgumentException).
    return illegal_argument(request_id, segment, "a segment name must not be empty") if not segment else None


class Handlers:
    def __init__(self, storage: st.SegmentStorage, tails: Tails) -> None:
        self._storage = storage
        self._tails = tails

    # --- stream segments ------------------------------------------------------------------------

    async def create_segment(self, cmd: wc.CreateSegment) -> wc.Command:
        refused = _name_refusal(cmd.request_id, cmd.segment) or _policy_refusal(
            cmd.request_id, cmd.segment, cmd.scale_type, cmd.target_rate
        )
        if refused is not None:
            return refused
        kind: st.SegmentKind = "transaction" if has_transaction_delimiter(cmd.segment) else "stream"
        # A negative rollover size is Java's default (0), as its store takes it.
        await self._storage.create_segment(
            cmd.segment, kind, cmd.scale_type, cmd.target_rate, max(0, cmd.rollover_size_bytes)
        )
        return wc.SegmentCreated(cmd.request_id, cmd.segment)

    async def seal_segment(self, cmd: wc.SealSegment) -> wc.Command:
        try:
            await self._storage.seal(cmd.segment)
        finally:
            self._tails.notify(cmd.segment)
        return wc.SegmentSealed(cmd.request_id, cmd.segment)

    async def delete_segment(self, cmd: wc.DeleteSegment) -> wc.Command:
        try:
            await self._storage.delete(cmd.segment)
        finally:
            self._tails.notify(cmd.segment)
        return wc.SegmentDeleted(cmd.request_id, cmd.segment)

    async def truncate_segment(self, cmd: wc.TruncateSegment) -> wc.Command:
        try:
            await self._storage.truncate(cmd.segment, cmd.truncation_offset)
        except BaseException:
            # Refused, or its outcome unknown: what the read index holds may be stale.
            self._tails.drop_cached(cmd.segment)
            raise
        self._tails.notify(cmd.segment)
        return wc.SegmentTruncated(cmd.request_id, cmd.segment)

    async def update_segment_policy(self, cmd: wc.UpdateSegmentPolicy) -> wc.Command:
        refused = _policy_refusal(cmd.request_id, cmd.segment, cmd.scale_type, cmd.target_rate)
        if refused is not None:
            return refused
        await self._storage.update_policy(cmd.segment, cmd.scale_type, cmd.target_rate)
        return wc.SegmentPolicyUpdated(cmd.request_id, cmd.segment)

    async def get_stream_segment_info(self, cmd: wc.GetStreamSegmentInfo) -> wc.Command:
        # An unknown segment is NoSuchSegment (the storage's refusal), never exists=false: that is
        # what Java answers and what the controller's callers expect.
        state = await self._storage.segment_state(cmd.segment_name)
        return wc.StreamSegmentInfo(
            cmd.request_id,
            cmd.segment_name,
            True,
            state.sealed,
            False,
            state.last_modified_ms,
            state.length,
            state.start_offset,
        )

    async def get_segment_attribute(self, cmd: wc.GetSegmentAttribute) -> wc.Command:
        value = await self._storage.get_attribute(cmd.segment_name, cmd.attribute_id)
        return wc.SegmentAttribute(cmd.request_id, value)

    async def update_segment_attribute(self, cmd: wc.UpdateSegmentAttribute) -> wc.Command:
        ok = await self._storage.update_attribute(
            cmd.segment_name, cmd.attribute_id, cmd.new_value, cmd.expected_value
        )
        return wc.SegmentAttributeUpdated(cmd.request_id, ok)

    async def merge_segments(self, cmd: wc.MergeSegments) -> wc.Command:
        updates = [
            st.AttributeUpdate(u.attribute_id, u.attribute_update_type, u.new_value, u.old_value)
            for u in cmd.attribute_updates
        ]
        try:
            offsets = await self._storage.merge(cmd.target, [cmd.source], updates)
        finally:
            self._tails.notify(cmd.target)
            self._tails.notify(cmd.source)
        return wc.SegmentsMerged(cmd.request_id, cmd.target, cmd.source, offsets[-1])

    async def merge_segments_batch(self, cmd: wc.MergeSegmentsBatch) -> wc.Command:
        try:
            offsets = await self._storage.merge(cmd.target, list(cmd.sources), [])
        finally:
            self._tails.notify(cmd.target)
            for source in cmd.sources:
                self._tails.notify(source)
        return wc.SegmentsBatchMerged(cmd.request_id, cmd.target, cmd.sources, tuple(offsets))

    # --- table segments -------------------------------------------------------------------------

    async def create_table_segment(self, cmd: wc.CreateTableSegment) -> wc.Command:
        refused = _name_refusal(cmd.request_id, cmd.segment)
        if refused is not None:
            return refused
        # As Java's store: a key length that is not positive makes a table without a fixed key
        # length (0), and a negative rollover size is the default (0).
        await self._storage.create_table(cmd.segment, max(0, cmd.key_length), max(0, cmd.rollover_size_bytes))
        return wc.SegmentCreated(cmd.request_id, cmd.segment)

    async def delete_table_segment(self, cmd: wc.DeleteTableSegment) -> wc.Command:
        await self._storage.delete_table(cmd.segment, cmd.must_be_empty)
        return wc.SegmentDeleted(cmd.request_id, cmd.segment)

    async def get_table_segment_info(self, cmd: wc.GetTableSegmentInfo) -> wc.Command:
        info = await self._storage.table_info(cmd.segment_name)
        return wc.TableSegmentInfo(
            cmd.request_id,
            cmd.segment_name,
            info.start_offset,
            info.length,
            info.entry_count,
            info.key_length,
        )

    async def update_table_entries(self, cmd: wc.UpdateTableEntries) -> wc.Command:
        entries = [st.TableEntry(key.data, value.data, key.key_version) for key, value in cmd.entries]
        versions = await self._storage.update_table(cmd.segment, entries, cmd.table_segment_offset)
        return wc.TableEntriesUpdated(cmd.request_id, tuple(versions))

    async def remove_table_keys(self, cmd: wc.RemoveTableKeys) -> wc.Command:
        keys = [(key.data, key.key_version) for key in cmd.keys]
        await self._storage.remove_table_keys(cmd.segment, keys, cmd.table_segment_offset)
        return wc.TableKeysRemoved(cmd.request_id, cmd.segment)

    async def read_table(self, cmd: wc.ReadTable) -> wc.Command:
        # One entry per requested key (absent ones with version -1 and an empty value): a Rust
        # client panics on a TableRead without entries.
        entries = await self._storage.read_table(cmd.segment, [key.data for key in cmd.keys])
        return wc.TableRead(cmd.request_id, cmd.segment, _entries(entries))

    async def read_table_keys(self, cmd: wc.ReadTableKeys) -> wc.Command:
        page = await self._storage.read_table_page(
            cmd.segment, cmd.suggested_count, cmd.continuation_token, cmd.from_key, cmd.to_key
        )
        keys = tuple(wc.TableKey(e.key, e.version) for e in page.entries)
        return wc.TableKeysRead(cmd.request_id, cmd.segment, keys, page.token)

    async def read_table_entries(self, cmd: wc.ReadTableEntries) -> wc.Command:
        page = await self._storage.read_table_page(
            cmd.segment, cmd.suggested_count, cmd.continuation_token, cmd.from_key, cmd.to_key
        )
        return wc.TableEntriesRead(cmd.request_id, cmd.segment, _entries(page.entries), page.token)

    async def read_table_entries_delta(self, cmd: wc.ReadTableEntriesDelta) -> wc.Command:
        delta = await self._storage.read_table_delta(
            cmd.segment, cmd.from_position, cmd.suggested_entry_count
        )
        # should_clear stays false: nothing compacts a table's history here.
        return wc.TableEntriesDeltaRead(
            cmd.request_id,
            cmd.segment,
            _entries(delta.entries),
            False,
            delta.reached_end,
            delta.last_position,
        )
