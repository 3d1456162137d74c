"""Back-pressure from the long-term tier: while a container's bytes due to move out of PostgreSQL
exceed the bound (the chunk store is down or slower than the writers), each append to a segment of
that container waits for the storage writer to bring it under the bound, at most the delay, before
it is stored: writers slow down (their acknowledgements come later, as with Pravega's throttler)
instead of PostgreSQL filling up at full speed. Never a refusal, never a queue of its own: an
append waits in its connection, which stops reading that connection's next frames meanwhile.

In a `serve --processes N` group only store 0 runs the storage writer; the others hear which
containers are over from it (app/segmentstore/server/peers.py) and forget it when it stops
telling them (store 0 gone): a stale verdict never delays appends for long."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence

from app.metrics.registry import counter
from app.waiting import wait_event


class TierThrottle:
    def __init__(self, bound_bytes: int, max_delay_s: float, container_of: Callable[[str], int]) -> None:
        self._bound = bound_bytes
        self._max_delay_s = max_delay_s
        self._container_of = container_of
        self._over: frozenset[int] = frozenset()
        self._changed = asyncio.Event()
        self.delayed = 0
        # Heard from another store: the loop time after which its verdict no longer holds.
        self._heard_until: float | None = None
        # Told each verdict this store reached itself (store 0 tells its group).
        self.on_update: Callable[[frozenset[int]], None] | None = None

    @property
    def over(self) -> frozenset[int]:
        """The containers whose appends wait now."""
        return self._over

    def update(self, due_bytes: Mapping[int, int]) -> None:
        """The storage writer's latest count of each container's bytes due to move."""
        over = frozenset(container for container, due in due_bytes.items() if due > self._bound)
        self._set(over)
        if self.on_update is not None:
            self.on_update(over)

    def heard(self, over: Sequence[int], valid_for_s: float) -> None:
        """Another store's verdict (the containers over their bound), holding for `valid_for_s`
        unless renewed."""
        self._heard_until = asyncio.get_running_loop().time() + valid_for_s
        self._set(frozenset(over))

    def admission(self, segment: str) -> Awaitable[None] | None:
        """None when an append to `segment` may go at once (the hot path's only cost while no
        container is over its bound is this set test)."""
        if not self._over or self._container_of(segment) not in self._over:
            return None
        if self._heard_until is not None and asyncio.get_running_loop().time() > self._heard_until:
            self._set(frozenset())  # its teller went quiet: no verdict holds
            return None
        return self._wait(self._container_of(segment))

    def _set(self, over: frozenset[int]) -> None:
        if over != self._over:
            self._over = over
            self._changed.set()
            self._changed = asyncio.Event()

    async def _wait(self, container: int) -> None:
        self.delayed += 1
        counter("pgcontroller_tier_appends_delayed").inc()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._max_delay_s
        while container in self._over:
            left = deadline - loop.time()
            if left <= 0:
                return
            await wait_event(self._changed, left)
