"""The leader's customized-view aggregation loop (Helix's CustomizedStateAggregation stage).

Only the leader aggregates, and each pass names the leader term it believes it holds: the
store lands a batch only under that term, so a deposed leader's late batch writes nothing and
its change-log entries stay for the new leader. A pass runs at once on `wake()` (the lead wires
it to `pgc_states` notifications: a report or a config change) and at least every `poll_s`,
because a notification can be missed. A failed pass (the database went away, or a view moved
under a batch) is logged and the next one starts at the next wake or tick; nothing half-written
is left, since every batch is one transaction.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from app.domain.errors import StoreUnavailable, WriteConflict
from app.services.state_views import AggregationSummary, ViewAggregation
from app.waiting import wait_event

log = logging.getLogger("pgcontroller.state-views")

DEFAULT_POLL_S = 0.5


class StateViewAggregator:
    def __init__(
        self,
        aggregation: ViewAggregation,
        is_leader: Callable[[], bool],
        leader_term: Callable[[], int | None],
        *,
        poll_s: float = DEFAULT_POLL_S,
    ) -> None:
        if poll_s <= 0:
            raise ValueError("the aggregation poll interval must be positive")
        self._aggregation = aggregation
        self._is_leader = is_leader
        self._leader_term = leader_term
        self._poll_s = poll_s
        self._wake = asyncio.Event()

    def wake(self, *_args: object) -> None:
        self._wake.set()

    async def run(self) -> None:
        while True:
            # Cleared before the pass: a wake during the pass runs another one right after.
            self._wake.clear()
            try:
                summary = await self.run_once()
                if summary.fenced:
                    log.info("aggregation fenced: the leader term moved on")
                elif summary.views or summary.built or summary.dropped:
                    log.debug("aggregation pass: %s", summary)
            except StoreUnavailable as exc:
                log.warning("aggregation pass failed, retrying: %s", exc)
            except WriteConflict as exc:
                # Two leaders overlapped for a moment; the next pass reads afresh.
                log.info("aggregation batch conflicted, retrying: %s", exc)
            await wait_event(self._wake, self._poll_s)

    async def run_once(self) -> AggregationSummary:
        """One pass if this process leads, else nothing."""
        term = self._leader_term()
        if not self._is_leader() or term is None:
            return AggregationSummary(skipped=True)
        return await self._aggregation.run(term)
