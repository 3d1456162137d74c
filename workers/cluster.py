"""This process's part in the cluster: membership, leadership and bucket claims, in one loop.

Each round (every `interval_s`, or at once on a cluster notification) runs in order:
heartbeat (re-registering if the leader removed us), leadership (try the leader lock; the
leader removes dead members, assigns buckets with the uniform balancer and runs its duties),
then each service's claims. One lock session carries the member's presence, the leader lock
and every bucket lock, so losing it means losing all of them at once: `_session_lost` stops
all bucket work immediately and ends leadership, and the next round starts a new session.
Orphaned buckets (of departed members) are reassigned at once; moving buckets between live
members waits until membership has been stable for `rebalance_delay_ms`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import replace

from app.domain.cluster import BucketCounts, BucketService, LeaderRecord, Member, balance
from app.domain.errors import StoreUnavailable
from app.ports import AdvisoryLocks, Clock, ClusterStore
from app.waiting import wait_event
from workers.buckets import BucketClaims

log = logging.getLogger("pgcontroller.cluster")
# How leadership ended: taken away (a lost session) or given up (an orderly shutdown).
_GONE = {False: "lost", True: "given up"}

LEADER_LOCK_NAMESPACE = 0x5047_4300
LEADER_LOCK_KEY = 0

LeaderDuty = Callable[[], Awaitable[None]]


class ClusterNode:
    def __init__(
        self,
        store: ClusterStore,
        locks: AdvisoryLocks,
        clock: Clock,
        member: Member,
        claims: Mapping[BucketService, BucketClaims],
        counts: BucketCounts,
        *,
        interval_s: float,
        member_ttl_ms: int,
        rebalance_delay_ms: int,
        leader_duties: Sequence[LeaderDuty] = (),
    ) -> None:
        """`leader_duties` run once per round while this process leads; `on_leadership`
        callbacks run each time it becomes leader (duties with state reset there)."""
        self._store = store
        self._locks = locks
        self._clock = clock
        self.member = member
        self.claims = dict(claims)
        self._counts = counts
        self._interval_s = interval_s
        self._member_ttl_ms = member_ttl_ms
        self._rebalance_delay_ms = rebalance_delay_ms
        self._duties = list(leader_duties)
        self._on_leadership: list[Callable[[], None]] = []
        self._member_version: int | None = None
        self._leader = False
        self._term: int | None = None
        self._live: tuple[str, ...] = ()
        self._live_since = 0
        self._session = asyncio.Lock()  # one round or the release at a time, never both
        self._released = False
        self._wake = asyncio.Event()
        self.first_round = asyncio.Event()
        self._in_session = False
        locks.on_session_lost(self._session_lost)

    @property
    def is_leader(self) -> bool:
        return self._leader

    @property
    def leader_term(self) -> int | None:
        """The term this process leads in, for duties that fence their writes on it; None
        while it does not lead."""
        return self._term if self._leader else None

    @property
    def registered(self) -> bool:
        """True while this process's member row is known to be current (its last heartbeat or
        registration succeeded); false before the first round and after a lost session."""
        return self._in_session

    def advertise(self, member: Member) -> None:
        """New endpoints: the next round registers them (a fresh row write, not a heartbeat)."""
        self.member = member
        self._member_version = None
        self._wake.set()

    def add_leader_duty(self, duty: LeaderDuty, *, on_leadership: Callable[[], None] | None = None) -> None:
        self._duties.append(duty)
        if on_leadership is not None:
            self._on_leadership.append(on_leadership)

    def wake(self, *_args: object) -> None:
        self._wake.set()

    async def run(self) -> None:
        """Returns only after `release`."""
        while True:
            async with self._session:
                if self._released:
                    return
                try:
                    await self._round()
                except StoreUnavailable as exc:
                    self._lose_everything(exc)
                    # End the session for sure, so no lock lingers that we believe we lost.
                    await self._locks.reset()
            self.first_round.set()
            self._wake.clear()
            if self._member_version is None and self._in_session:
                self._wake.set()  # advertised during the round: register now, not a round later
            await wait_event(self._wake, self._interval_s)

    async def _round(self) -> None:
        now = self._clock.now_ms()
        # The session first: the leader counts a member row live only while its session is
        # connected, and would remove a row written before it (a new member, dropped and back).
        await self._locks.open()
        await self._heartbeat(now)
        self._in_session = True
        await self._lead(now)
        for claims in self.claims.values():
            await claims.reconcile()

    async def _heartbeat(self, now: int) -> None:
        member = self.member
        version = None
        if self._member_version is not None:
            version = await self._store.heartbeat(member.id, now, self._member_version)
        if version is None:
            version = await self._store.register_member(replace(member, heartbeat_at=now))
        # New endpoints advertised while this write was on its way: keeping its version would
        # make the next round a heartbeat, and the new endpoints would never be written.
        if self.member is member:
            self._member_version = version

    async def _lead(self, now: int) -> None:
        if not self._leader:
            if not await self._locks.try_lock(LEADER_LOCK_NAMESPACE, LEADER_LOCK_KEY):
                return
            record = await self._become_leader(now)
            log.info("leading the cluster (term %d)", record.term)
        members = await self._store.members(now, self._member_ttl_ms)
        live = tuple(member.id for member, alive, _ in members if alive)
        dead = [(member.id, version) for member, alive, version in members if not alive]
        if dead:
            removed = await self._store.remove_members(dead)
            if removed:
                log.info("removed departed controllers %s", removed)
        if live != self._live:
            self._live, self._live_since = live, now
        settled = now - self._live_since >= self._rebalance_delay_ms
        for service in self.claims:
            await self._assign(service, list(live), spread=settled)
        for duty in self._duties:
            try:
                await duty()
            except StoreUnavailable:
                raise
            except Exception:
                log.exception("a leader duty failed; it runs again next round")

    async def _become_leader(self, now: int) -> LeaderRecord:
        try:
            current = await self._store.get_leader()
            record = await self._store.set_leader(
                self.member.id, now, None if current is None else current.version
            )
        except BaseException:
            await self._locks.unlock(LEADER_LOCK_NAMESPACE, LEADER_LOCK_KEY)
            raise
        for service in self.claims:
            await self._store.ensure_buckets(service, self._counts.of(service))
        self._leader = True
        self._term = record.term
        for callback in self._on_leadership:
            callback()
        # Membership is judged afresh: the previous leader's view died with it.
        self._live, self._live_since = (), now
        return record

    async def _assign(self, service: BucketService, live: list[str], *, spread: bool) -> None:
        if not live:
            return
        rows = await self._store.bucket_rows(service)
        current = {row.bucket: row.assigned_to for row in rows if row.assigned_to is not None}
        target = balance([row.bucket for row in rows], current, live, spread=spread)
        changes = [(row, target[row.bucket]) for row in rows if target.get(row.bucket) != row.assigned_to]
        if not changes:
            return
        landed = await self._store.assign_buckets(service, changes)
        if landed < len(changes):
            log.info(
                "%s: %d of %d assignments conflicted; retrying next round",
                service,
                len(changes) - landed,
                len(changes),
            )
        else:
            log.info("%s: reassigned %d buckets over %d controllers", service, landed, len(live))

    def _session_lost(self) -> None:
        self._lose_everything("lock session closed")
        self._wake.set()

    def _lose_everything(self, reason: object, *, orderly: bool = False) -> None:
        """`orderly`: given up on shutdown, which is news but no warning."""
        self._in_session = False
        if self._leader:
            log.log(
                logging.INFO if orderly else logging.WARNING, "leadership %s (%s)", _GONE[orderly], reason
            )
        self._leader = False
        for claims in self.claims.values():
            claims.lose_all(reason, orderly=orderly)

    async def release(self) -> None:
        """Orderly shutdown: give buckets and leadership back at once instead of at session end."""
        async with self._session:
            self._released = True
            self._lose_everything("shutting down", orderly=True)
            await self._locks.reset()
            if self._member_version is not None:
                # Leave at once rather than when the leader notices the closed session.
                with contextlib.suppress(StoreUnavailable):
                    await self._store.remove_members([(self.member.id, self._member_version)])
