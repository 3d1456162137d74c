"""The orphan sweep: transient segments left by a store that died (SIGKILL, a lost machine) are
deleted by the store that serves their container next, or by the restarted store itself.

Invariant: a transient segment is deleted only when it is provably nobody's: it belongs to a
container this store owns, was created before this store acquired that container (before this
store started, for a store with no container map), no live connection of this store created it,
and it has not changed for `grace_ms` (a previous owner still serving beside us, or paused and
resumed, is either appending to it or its writer is refused). In a group of stores behind one port
(`serve --processes N`), store i sweeps only the names tagged i (an earlier life of its own index
made them) or tagged with no member's index: the others' live transient segments are never its
to judge. A sweep that fails is logged and tried again at the next pass; it never ends the store.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence, Set
from typing import Final, Protocol

from app.ports import Clock
from app.segmentstore.server.ownership import ContainerOwnership
from app.segmentstore.server.transients import transient_tag

log = logging.getLogger("pgcontroller.segment-store.orphans")

BATCH_SIZE: Final = 64
PASS_INTERVAL_S: Final = 1.0
_FIRST_NAME: Final = ""  # every segment name sorts after it


class TransientSweep(Protocol):
    """What the sweep needs of the storage (PgSegmentStorage implements it)."""

    async def transients_created_before(
        self, after: str, created_before_ms: int, limit: int
    ) -> list[tuple[str, int]]: ...

    async def delete_transients(
        self, names: Sequence[str], created_before_ms: int, unchanged_since_ms: int
    ) -> list[str]: ...


class OrphanTransients:
    def __init__(
        self,
        storage: TransientSweep,
        clock: Clock,
        live: Callable[[], Set[str]],
        ownership: ContainerOwnership | None,
        *,
        grace_ms: int,
        batch_size: int = BATCH_SIZE,
        interval_s: float = PASS_INTERVAL_S,
        started_ms: int | None = None,
        group: tuple[int, int] | None = None,
    ) -> None:
        """`group`: (this store's index, the group's size) when it shares its port."""
        if batch_size <= 0:
            raise ValueError(f"the sweep's batch size must be positive, got {batch_size}")
        self._storage = storage
        self._clock = clock
        self._live = live
        self._ownership = ownership
        self._grace_ms = grace_ms
        self._batch_size = batch_size
        self._interval_s = interval_s
        self._started_ms = clock.now_ms() if started_ms is None else started_ms
        self._group = group
        # Containers acquired and not swept yet, with the time this store saw them acquired
        # (no earlier than the acquisition, so every transient the previous owner created
        # before it is older).
        self._unswept: dict[int, int] = {}
        self._seen: dict[int, int] = {}  # owned container -> its acquisition count last seen
        self._start_swept = False
        self.cleaned = 0  # transient segments deleted by this store's sweeps

    async def run(self) -> None:
        while True:
            await self.sweep()
            await asyncio.sleep(self._interval_s)

    async def sweep(self) -> int:
        """One pass: deletes the orphans of the containers due; returns how many."""
        try:
            return await self._sweep()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            # The database may be down or restarting: the containers stay due for the next pass.
            log.warning("sweeping orphan transient segments failed, trying again: %r", exc)
            return 0

    async def _sweep(self) -> int:
        now = self._clock.now_ms()
        if self._ownership is None:
            # One store and no map: every transient that existed before it started is an orphan.
            if self._start_swept:
                return 0
            count = await self._delete(lambda _name, _created: True, self._started_ms, self._started_ms)
            self._start_swept = True
            self._report(count, "before this store started")
            return count
        ownership = self._ownership
        seen = ownership.acquisitions()
        for container, acquisition in seen.items():
            if self._seen.get(container) != acquisition:
                self._unswept[container] = now
        for container in self._seen.keys() - seen.keys():
            self._unswept.pop(container, None)
        self._seen = seen
        due = {c: at for c, at in self._unswept.items() if now - at >= self._grace_ms}
        if not due:
            return 0

        def orphaned(name: str, created_ms: int) -> bool:
            acquired = due.get(ownership.container_of(name))
            return acquired is not None and created_ms < acquired

        count = await self._delete(orphaned, max(due.values()), now - self._grace_ms)
        for container in due:
            self._unswept.pop(container, None)
        self._report(count, f"of containers {sorted(due)}")
        return count

    async def _delete(
        self, orphaned: Callable[[str, int], bool], created_before_ms: int, unchanged_since_ms: int
    ) -> int:
        """Pages through the candidates in name order, deleting each page's orphans in one
        statement (a bounded batch)."""
        count = 0
        after = _FIRST_NAME
        while True:
            page = await self._storage.transients_created_before(after, created_before_ms, self._batch_size)
            if not page:
                return count
            after = page[-1][0]
            picked = [name for name, created in page if orphaned(name, created) and self._mine(name)]
            # Read after the page: a connection names its transient segment before creating it,
            # so any listed one a live connection of this store made is in this set.
            live = self._live()
            names = [name for name in picked if name not in live]
            if names:
                deleted = await self._storage.delete_transients(names, created_before_ms, unchanged_since_ms)
                count += len(deleted)
                self.cleaned += len(deleted)
            if len(page) < self._batch_size:
                return count

    def _mine(self, name: str) -> bool:
        if self._group is None:
            return True
        index, size = self._group
        tag = transient_tag(name)
        return tag is None or tag == index or tag >= size

    @staticmethod
    def _report(count: int, scope: str) -> None:
        if count:
            log.info("deleted %d orphan transient segments %s", count, scope)
        else:
            log.info("no orphan transient segments %s", scope)
