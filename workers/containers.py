"""The leader's container-balancing duty (Pravega's SegmentMonitorLeader).

Runs only while this process leads: the lead's leader loop calls `run_once` (or runs `run`
and cancels it when leadership goes). Each pass first removes the segment stores whose
heartbeats stopped (older than the expiry). Its one piece of memory is the host set it last saw
and when that set last changed; a rebalance waits until the set has been stable for the
rebalance delay, so a burst of joins (a cluster starting, a rolling restart) moves containers
once, except when hosts only left: their containers are served by nobody, so they move at once.
A lost database or a concurrent map write costs one pass, never the duty.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from enum import StrEnum

from app.domain.errors import StoreUnavailable, WriteConflict
from app.metrics.registry import counter
from app.ports import Clock, HostAddress
from app.services.containers import ContainerMapService, RebalanceAction

log = logging.getLogger("pgcontroller.containers")
_HOST_FAILURES = counter("pravega_controller_hosts_failures")
_FAILOVERS = counter("pravega_controller_container_failovers")


class PassOutcome(StrEnum):
    WAITING = "waiting"  # the host set changed less than the delay ago
    KEPT = "kept"  # the stored map fits the host set
    REBALANCED = "rebalanced"  # a new map was written
    CONFLICT = "conflict"  # the map changed under us; the next pass reads it again
    UNAVAILABLE = "unavailable"  # the database could not be reached


@dataclass(frozen=True, slots=True)
class BalancerPass:
    outcome: PassOutcome
    hosts: tuple[HostAddress, ...] = ()
    wait_ms: int = 0  # WAITING: how much longer the host set must stay as it is
    moved: tuple[int, ...] = ()  # REBALANCED: containers whose host changed


class ContainerBalancerDuty:
    def __init__(
        self,
        service: ContainerMapService,
        clock: Clock,
        *,
        rebalance_delay_s: float,
        tick_s: float = 1.0,
        host_expiry_s: float | None = None,
    ) -> None:
        """`host_expiry_s`: remove heartbeating hosts silent this long (None: never)."""
        if rebalance_delay_s < 0:
            raise ValueError(f"the rebalance delay must not be negative, got {rebalance_delay_s}")
        self._service = service
        self._clock = clock
        self._delay_ms = round(rebalance_delay_s * 1000)
        self._tick_s = tick_s
        self._expiry_ms = None if host_expiry_s is None else round(host_expiry_s * 1000)
        self._seen: frozenset[HostAddress] | None = None
        self._changed_at = 0
        self._departed = False  # the last change removed a host: rebalance without delay

    def reset(self) -> None:
        """Forgets the host set; call when leadership is (re)gained. The first pass then counts
        as a change and waits the delay, as Pravega's leader does on taking leadership: the
        previous leader may have seen changes this process never did."""
        self._seen = None
        self._departed = False

    async def run(self) -> None:
        """One pass per tick until cancelled; run it only while this process leads."""
        self.reset()
        while True:
            await self.run_once()
            await asyncio.sleep(self._tick_s)

    async def run_once(self) -> BalancerPass:
        now = self._clock.now_ms()
        try:
            if self._expiry_ms is not None:
                expired = await self._service.expire_hosts(self._expiry_ms)
                if expired:
                    _HOST_FAILURES.inc(len(expired))
                    log.warning(
                        "removed segment stores without a heartbeat for %d ms: %s",
                        self._expiry_ms,
                        ", ".join(map(str, expired)),
                    )
            registered = await self._service.hosts()
        except StoreUnavailable as exc:
            log.warning("cannot read the segment-store hosts: %s", exc)
            return BalancerPass(PassOutcome.UNAVAILABLE)
        hosts = tuple(sorted(h.address for h in registered))
        observed = frozenset(hosts)
        if observed != self._seen:
            if self._seen is not None:
                log.info("segment-store hosts changed to [%s]", ", ".join(map(str, hosts)))
            # A host left: its containers are served by nobody until they move, so no delay
            # (hosts that joined meanwhile get their share in the same rebalance).
            self._departed = self._seen is not None and not observed >= self._seen
            self._seen = observed
            self._changed_at = now
        remaining = 0 if self._departed else self._changed_at + self._delay_ms - now
        if remaining > 0:
            return BalancerPass(PassOutcome.WAITING, hosts, wait_ms=remaining)
        try:
            result = await self._service.rebalance(hosts)
        except WriteConflict as exc:
            log.info("container map changed concurrently, trying again next pass: %s", exc)
            return BalancerPass(PassOutcome.CONFLICT, hosts)
        except StoreUnavailable as exc:
            log.warning("cannot rebalance the segment containers: %s", exc)
            return BalancerPass(PassOutcome.UNAVAILABLE, hosts)
        if result.action == RebalanceAction.KEPT:
            return BalancerPass(PassOutcome.KEPT, hosts)
        if self._departed:
            # Containers taken from a host that left: Pravega's failovers.
            _FAILOVERS.inc(len(result.moved))
        log.info(
            "segment containers rebalanced over [%s]; moved %s",
            ", ".join(map(str, hosts)) or "the static hosts",
            list(result.moved),
        )
        return BalancerPass(PassOutcome.REBALANCED, hosts, moved=result.moved)
