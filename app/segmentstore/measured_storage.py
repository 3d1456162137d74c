"""The segment store's traffic measurement: a SegmentStorage decorator that tells an
AutoScaleMonitor what a store learns from its requests, as Pravega's request processor tells its
stats recorder: the policy a stream segment is created or updated with, its appends, the
transactions merged into it, and its seal or deletion.

Invariants: only what storage committed is counted (a failed call or a duplicate append counts
nothing); every call reaches storage unchanged and its result or error comes back unchanged, so
measuring never alters what a client sees; a transaction's or transient segment's appends count
for its parent only when merged, spread over the life it had here (Pravega's merge stats).

In a group of stores behind one port (`serve --processes N`), a segment's writers may be spread
over every store of the group, so one store judges for all: the others forward each observation
(`forward`), and the judge applies theirs (`apply`) as it applies its own. Observations are plain
lists (they cross a process boundary); one that does not make sense is dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from app.domain.segment_names import has_transaction_delimiter, has_transient_delimiter
from app.ports import Clock
from app.segmentstore import storage as st
from app.segmentstore.autoscaler import AutoScaleMonitor

log = logging.getLogger("pgcontroller.autoscaler")

# A transaction may stay open a day (the controller's longest execution bound); its tally is
# dropped if nothing touched it for longer (merged through another store after a container move).
TALLY_EXPIRY_MS: Final = 2 * 86_400_000


@dataclass
class _Tally:
    """What was appended here to a segment that will be merged (a transaction or transient one)."""

    created_at: int
    events: int = 0
    size: int = 0
    last_access: int = 0


def _mergeable(name: str) -> bool:
    return has_transaction_delimiter(name) or has_transient_delimiter(name)


Observation = list[Any]


class MeasuredStorage:
    """Wraps the store's SegmentStorage; every call it does not observe is handed straight on."""

    def __init__(
        self,
        inner: st.SegmentStorage,
        monitor: AutoScaleMonitor,
        clock: Clock,
        forward: Callable[[Observation], None] | None = None,
    ) -> None:
        self._inner = inner
        self.monitor = monitor
        self._clock = clock
        # Set in a store that does not judge: its observations go to the one that does.
        self._forward = forward
        self._tallies: dict[str, _Tally] = {}
        self._loading: set[str] = set()
        self._loads: set[asyncio.Task[None]] = set()
        self._next_sweep = 0

    async def create_segment(
        self,
        name: str,
        kind: st.SegmentKind,
        scale_type: int,
        target_rate: int,
        rollover_size_bytes: int,
    ) -> None:
        await self._inner.create_segment(name, kind, scale_type, target_rate, rollover_size_bytes)
        self._observe(["created", name, kind, scale_type, target_rate])

    def _created(self, name: str, kind: str, scale_type: int, target_rate: int) -> None:
        now = self._clock.now_ms()
        if kind == "stream":
            self.monitor.created(name, scale_type, target_rate)
        elif _mergeable(name):
            self._drop_stale_tallies(now)
            self._tallies[name] = _Tally(now, last_access=now)

    def admission(self, segment: str) -> Awaitable[None] | None:
        return self._inner.admission(segment)

    async def append(self, request: st.AppendRequest) -> st.AppendResult:
        result = await self._inner.append(request)
        if not result.duplicate:
            if self._forward is not None:
                self._forward(["appended", request.segment, request.num_events, len(request.data)])
            else:  # the hot path: no observation built
                self._count(request.segment, request.num_events, len(request.data))
        return result

    def _observe(self, observation: Observation) -> None:
        if self._forward is not None:
            self._forward(observation)
        else:
            self.apply(observation)

    def apply(self, observation: Observation) -> None:
        """Takes one observation, made here or by another store of the group."""
        match observation:
            case ["appended", str(name), int(events), int(size)]:
                self._count(name, events, size)
            case ["created", str(name), str(kind), int(scale_type), int(target_rate)]:
                self._created(name, kind, scale_type, target_rate)
            case ["merged", str(target), list(sources)] if all(isinstance(x, str) for x in sources):
                self._merged(target, sources)
            case ["sealed", str(name)]:
                self.monitor.forget(name)
            case ["deleted", str(name)]:
                self.monitor.forget(name)
                self._tallies.pop(name, None)
            case ["policy", str(name), int(scale_type), int(target_rate)]:
                self.monitor.policy_updated(name, scale_type, target_rate)
            case _:
                log.warning("dropped a traffic observation that makes no sense: %.200r", observation)

    def _count(self, name: str, events: int, size: int) -> None:
        if _mergeable(name):
            now = self._clock.now_ms()
            tally = self._tallies.setdefault(name, _Tally(now))
            tally.events += events
            tally.size += size
            tally.last_access = now
        elif not self.monitor.record(name, events, size) and self.monitor.wants_policy(name):
            self._load_policy(name)

    def _load_policy(self, name: str) -> None:
        # Pravega loads a segment's policy from its attributes on its first append after a
        # restart or a container move; that append itself is not counted.
        if name in self._loading:
            return
        self._loading.add(name)
        task = asyncio.create_task(self._load(name), name=f"autoscale-load {name}")
        self._loads.add(task)
        task.add_done_callback(self._loads.discard)

    async def _load(self, name: str) -> None:
        try:
            state = await self._inner.segment_state(name)
            if not state.sealed:
                self.monitor.loaded(name, state.scale_type, state.target_rate)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.debug("policy of %s not loaded: %s", name, exc)
        finally:
            self._loading.discard(name)

    async def merge(
        self, target: str, sources: Sequence[str], attribute_updates: Sequence[st.AttributeUpdate]
    ) -> list[int]:
        lengths = await self._inner.merge(target, sources, attribute_updates)
        self._observe(["merged", target, list(sources)])
        return lengths

    def _merged(self, target: str, sources: Sequence[str]) -> None:
        for source in sources:
            tally = self._tallies.pop(source, None)
            if tally is None:
                continue  # merged already, or its appends went to another store
            # A transient segment holds one (large) event, whatever its appends were.
            events = 1 if has_transient_delimiter(source) else tally.events
            counted = self.monitor.record_transaction(target, events, tally.size, tally.created_at)
            if not counted and self.monitor.wants_policy(target):
                self._load_policy(target)

    async def seal(self, name: str) -> int:
        try:
            length = await self._inner.seal(name)
        except st.SegmentSealed:
            self._observe(["sealed", name])  # sealed before: it takes no more traffic either
            raise
        self._observe(["sealed", name])
        return length

    async def delete(self, name: str) -> None:
        await self._inner.delete(name)
        self._observe(["deleted", name])

    async def update_policy(self, name: str, scale_type: int, target_rate: int) -> None:
        await self._inner.update_policy(name, scale_type, target_rate)
        self._observe(["policy", name, scale_type, target_rate])

    # Reads, attributes and table segments measure nothing: they reach storage as they are.

    async def segment_state(self, name: str) -> st.SegmentState:
        return await self._inner.segment_state(name)

    async def writer_event_number(self, name: str, writer_id: int) -> int:
        return await self._inner.writer_event_number(name, writer_id)

    async def read(self, name: str, offset: int, max_length: int) -> st.ReadResult:
        return await self._inner.read(name, offset, max_length)

    async def truncate(self, name: str, offset: int) -> None:
        await self._inner.truncate(name, offset)

    async def get_attribute(self, name: str, attribute_id: int) -> int:
        return await self._inner.get_attribute(name, attribute_id)

    async def update_attribute(
        self, name: str, attribute_id: int, new_value: int, expected_value: int
    ) -> bool:
        return await self._inner.update_attribute(name, attribute_id, new_value, expected_value)

    async def create_table(self, name: str, key_length: int, rollover_size_bytes: int) -> None:
        await self._inner.create_table(name, key_length, rollover_size_bytes)

    async def delete_table(self, name: str, must_be_empty: bool) -> None:
        await self._inner.delete_table(name, must_be_empty)

    async def update_table(
        self, name: str, entries: Sequence[st.TableEntry], table_segment_offset: int
    ) -> list[int]:
        return await self._inner.update_table(name, entries, table_segment_offset)

    async def remove_table_keys(
        self, name: str, keys: Sequence[tuple[bytes, int]], table_segment_offset: int
    ) -> None:
        await self._inner.remove_table_keys(name, keys, table_segment_offset)

    async def read_table(self, name: str, keys: Sequence[bytes]) -> list[st.TableEntry]:
        return await self._inner.read_table(name, keys)

    async def read_table_page(
        self, name: str, suggested_count: int, token: bytes, from_key: bytes, to_key: bytes
    ) -> st.TablePage:
        return await self._inner.read_table_page(name, suggested_count, token, from_key, to_key)

    async def read_table_delta(self, name: str, from_position: int, suggested_count: int) -> st.TableDelta:
        return await self._inner.read_table_delta(name, from_position, suggested_count)

    async def table_info(self, name: str) -> st.TableInfo:
        return await self._inner.table_info(name)

    def _drop_stale_tallies(self, now: int) -> None:
        """Forgets the tallies nothing touched for TALLY_EXPIRY_MS (looked for hourly at most)."""
        if now < self._next_sweep:
            return
        self._next_sweep = now + 3_600_000
        for name, tally in list(self._tallies.items()):
            if now - tally.last_access > TALLY_EXPIRY_MS:
                del self._tallies[name]

    def start(self) -> None:
        if self._forward is None:  # a store that forwards reports nothing itself
            self.monitor.start()

    async def close(self) -> None:
        for task in list(self._loads):
            task.cancel()
        for task in list(self._loads):
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self.monitor.close()


if TYPE_CHECKING:
    # mypy's proof that the wire server can take it in place of its storage.
    _IMPLEMENTS: type[st.SegmentStorage] = MeasuredStorage
