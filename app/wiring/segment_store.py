"""The data plane's seam: the embedded segment store `serve` starts (a TCP server in Pravega's wire
protocol over PostgreSQL), and the controller's client of segment stores.

Invariant: the controller reaches every segment store, the embedded one included, only through
`WireSegmentStore` over TCP, at the host the container map names; nothing else in the process names
the concrete store.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, replace
from typing import Any

from app.domain.hosts import HostAddress
from app.ports import Clock, SegmentStoreLocator
from app.security.authn import caller_permission
from app.security.delegation import DelegationTokens
from app.security.tls import client_context, server_context
from app.security.tokens import TokenSigner, TokenVerifier
from app.segmentstore.client import WireSegmentStore
from app.segmentstore.server import SegmentStoreServer
from app.segmentstore.server.limits import ConnectionLimits
from app.segmentstore.server.membership import StoreMembership
from app.segmentstore.server.orphans import OrphanTransients
from app.segmentstore.server.ownership import ContainerOwnership
from app.segmentstore.server.peers import StorePeers
from app.segmentstore.server.read_index import ReadIndex
from app.segmentstore.server.tokens import TokenGate
from app.settings import Settings
from app.store.append_fence import AppendFence
from app.store.cache import RecordCache
from app.store.containers import PgContainerMapStore
from app.store.db import Database
from app.store.notifications import PgListener
from app.store.patient_db import PatientDatabase
from app.store.segment_data import PgSegmentStorage
from app.store.tier_throttle import TierThrottle
from app.wiring.autoscale import measured_storage
from app.wiring.connection_cap import ConnectionCap, descriptor_ceiling, reserving_listeners
from app.wiring.loops import BackgroundLoops
from app.wiring.resources import Contribution, Resources
from app.wiring.tier import Tier, open_tier
from workers.failpoints import failpoint_hook

_ANY_INTERFACE = ("", "0.0.0.0", "::")
log = logging.getLogger("pgcontroller.segment-store")


@dataclass(frozen=True)
class SegmentStorage:
    store: WireSegmentStore
    client: WireSegmentStore
    contribution: Contribution
    # The tokens the controller's answers carry ("" with authentication off).
    tokens: DelegationTokens


def wire_segment_store(
    settings: Settings, resources: Resources, locator: SegmentStoreLocator
) -> SegmentStorage:
    signer = _signer(settings)
    # The controller's own calls carry its master token (Pravega's retrieveMasterToken).
    master = signer.master() if signer is not None else ""
    client = WireSegmentStore(
        locator,
        request_timeout_s=settings.segment_store_timeout_s,
        token=lambda: master,
        tls=client_context(settings),
    )
    # Each token is capped at the ACL of the call's principal, which the gRPC guard sets.
    tokens = DelegationTokens(signer, caller_permission if signer is not None else None)
    return SegmentStorage(client, client, Contribution(), tokens)


def _signer(settings: Settings) -> TokenSigner | None:
    if not settings.auth_enabled:
        return None
    return TokenSigner(_key(settings), settings.auth_token_ttl_s)


def _token_gate(settings: Settings) -> TokenGate | None:
    """The store's token check: with authentication on, every request carrying a token."""
    if not settings.auth_enabled:
        return None
    return TokenGate(TokenVerifier(_key(settings)))


def _key(settings: Settings) -> bytes:
    if settings.token_signing_key is None:
        raise ValueError("authentication is on but no delegation-token signing key was resolved")
    return settings.token_signing_key


def _connection_limits(settings: Settings) -> ConnectionLimits:
    return ConnectionLimits(
        untrusted_frame_bytes=settings.segment_store_untrusted_frame_bytes,
        frame_budget_bytes=settings.segment_store_frame_budget_bytes,
        frame_deadline_s=settings.segment_store_frame_deadline_s,
        hello_timeout_s=settings.segment_store_hello_timeout_s,
        idle_timeout_s=settings.segment_store_idle_timeout_s,
        reply_budget_bytes=settings.segment_store_reply_budget_bytes,
        max_connections=settings.segment_store_max_connections,
        reads_at_once=settings.segment_store_reads_at_once,
    )


def _peers(settings: Settings) -> StorePeers | None:
    group = settings.segment_store_group
    if group is None:
        return None
    return StorePeers(group.directory, group.index, group.size)


def _share_throttle(throttle: TierThrottle, peers: StorePeers | None, settings: Settings) -> None:
    """In a group, only store 0's writer knows the backlog: it tells the others its verdicts,
    which hold for ten of its passes (it tells them after every pass)."""
    if peers is None:
        return
    if peers.judges:
        throttle.on_update = peers.throttled
        return
    valid_for_s = max(10.0, 10 * settings.tier_flush_interval_s)
    peers.on_throttled(lambda over: throttle.heard(over, valid_for_s))


async def _start_measured_server(
    settings: Settings,
    pool: Database,
    clock: Clock,
    peers: StorePeers | None = None,
    tier: Tier | None = None,
    fence: AppendFence | None = None,
) -> SegmentStoreServer:
    """A listening store whose storage measures its segments' traffic and sends their scale
    reports until the server closes (with `peers`, store 0 of the group reports for all: the
    others send it what they measure)."""
    tls = server_context(settings, ())
    forward = peers.observe if peers is not None and not peers.judges else None
    # A crash test's window between an append's commit and its DataAppended (a writer that
    # reconnects after the crash must be told the stored event number, not append twice).
    after_append = failpoint_hook("segmentstore.append.before_ack")
    # And a group formed, before it goes to PostgreSQL: a crash there must acknowledge nothing of it.
    before_group_commit = failpoint_hook("segmentstore.append.before_group_commit")
    stored = PgSegmentStorage(
        PatientDatabase(pool, settings.segment_store_db_wait_s),
        clock,
        after_append,
        before_group_commit,
        chunks=tier.chunks if tier is not None else None,
        fence=fence,
    )
    if tier is not None:
        stored.throttle = tier.throttle
        _share_throttle(tier.throttle, peers, settings)
    storage = measured_storage(stored, settings, pool, clock, forward)
    if peers is not None and peers.judges:
        peers.on_observed(storage.apply)
    reserve = _descriptor_reserve(settings)

    async def close() -> None:
        reserve.close()
        await storage.close()

    storage.start()
    try:
        # The store counts its own connections against its cap; this listener only keeps the
        # process's reserved descriptors out of a flood's reach (a refused one is closed at once).
        sockets = await reserving_listeners(
            settings.segment_store_host, settings.segment_store_port, reserve, reuse_port=settings.reuse_port
        )
        server = await SegmentStoreServer.start(
            storage,
            settings.segment_store_host,
            settings.segment_store_port,
            tail_wait_s=settings.segment_store_tail_wait_s,
            tail_linger_s=settings.segment_store_tail_linger_s,
            on_close=close,
            tokens=_token_gate(settings),
            tls=tls,
            reuse_port=settings.reuse_port,
            peers=peers,
            limits=_connection_limits(settings),
            sockets=sockets,
            read_index=ReadIndex(
                settings.segment_store_read_index_segment_bytes, settings.segment_store_read_index_bytes
            ),
            read_ahead_bytes=settings.segment_store_read_ahead_bytes,
        )
    except BaseException:
        await close()
        raise
    reserve.port_name = f"segment store port {server.address[1]}"
    return server


def _descriptor_reserve(settings: Settings) -> ConnectionCap:
    return ConnectionCap(
        f"segment store port {settings.segment_store_port}",
        settings.segment_store_max_connections,
        descriptor_ceiling(settings.fd_reserve),
    )


class RunningStore:
    """A listening segment store and, when it is a cluster member, its membership: registration,
    heartbeats, and the container map it follows (its own notification connection). Its
    background tasks run under the process's supervision (`loops`)."""

    def __init__(
        self,
        server: SegmentStoreServer,
        loops: BackgroundLoops,
        membership: StoreMembership | None = None,
        listener: PgListener | None = None,
        orphans: OrphanTransients | None = None,
        peers: StorePeers | None = None,
        tier: Tier | None = None,
    ) -> None:
        self.server = server
        self.tier = tier
        self.membership = membership
        self.orphans = orphans
        self.peers = peers
        self._loops = loops
        self._listener = listener
        self._tasks: list[asyncio.Task[None]] = []

    @property
    def address(self) -> tuple[str, int]:
        return self.server.address

    async def join(self) -> None:
        """Registers, reads the map, then follows it and heartbeats in the background; sweeps
        the orphan transient segments of the containers it gains (of all, without a map)."""
        if self.orphans is not None:
            self._start("segment-store-orphans", self.orphans.run)
        # One storage writer and collector per group: store 0 (or the only store) runs them.
        if self.tier is not None and (self.peers is None or self.peers.judges):
            if self.server.ownership is not None:
                self.tier.writer.owns = self.server.ownership.owns
            self._start("segment-store-storage-writer", self.tier.writer.run)
            self._start("segment-store-chunk-collector", self.tier.collector.run)
        if self.membership is None:
            return
        await self.membership.start()
        if self._listener is not None:
            self._listener.on_cluster_change(self.membership.changed)
            self._listener.on_connected(self.membership.wake)
            self._start("segment-store-listener", self._listener.run)
        self._start("segment-store-membership", self.membership.run)

    def _start(self, name: str, task: Callable[[], Coroutine[Any, Any, None]]) -> None:
        self._tasks.append(self._loops.start(name, task))

    def tier_health(self) -> dict[str, str]:
        """The long-term tier's part of the store's health details: where it is, and while the
        storage writer or the collector cannot reach it, "degraded" and why (the store still
        takes appends into PostgreSQL meanwhile, so it stays UP)."""
        if self.tier is None:
            return {}
        details = {"tier": self.tier.chunks.description}
        failure = self.tier.writer.failure or self.tier.collector.failure
        details["tier-status"] = "ok" if failure is None else "degraded"
        if failure is not None:
            details["tier-error"] = failure[:300]
        return details

    def died(self) -> BaseException | None:
        """The failure of a background task that died, if any (they run until cancelled)."""
        for task in self._tasks:
            failure = self._loops.failure(task.get_name())
            if failure is not None:
                return failure
        return None

    async def close(self) -> None:
        # Cancelled here too: a start that failed half-way has not reached the process's cancel.
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self.membership is not None:
            await self.membership.leave()
        await self.server.close()
        if self.peers is not None:
            self.peers.close()
        if self.tier is not None:
            await self.tier.chunks.close()


async def start_segment_store(
    settings: Settings,
    pool: Database,
    clock: Clock,
    loops: BackgroundLoops,
    url: str,
    static_hosts: Sequence[HostAddress],
) -> RunningStore:
    """A segment store that joins the cluster: it registers its address, heartbeats, and serves
    only the containers the map gives it (containers the map does not name go to `static_hosts`,
    as getURI answers)."""
    if not settings.segment_store_heartbeat_s < settings.segment_store_expiry_s:
        raise ValueError(
            f"--segment-store-heartbeat-s ({settings.segment_store_heartbeat_s}) must be below "
            f"--segment-store-expiry-s ({settings.segment_store_expiry_s})"
        )
    tier = await open_tier(settings, pool, clock)
    peers = _peers(settings)
    if peers is not None:
        peers.start()  # before listening: a change made by a sibling is heard from the first read
    fence = AppendFence(settings.container_count)
    try:
        server = await _start_measured_server(settings, pool, clock, peers, tier, fence)
    except BaseException:
        if peers is not None:
            peers.close()
        if tier is not None:
            await tier.chunks.close()
        raise
    me = fence.me = embedded_store_address(settings, server)
    statics = list(static_hosts) or [me]
    # Set before the first await after listening: no connection is accepted without it.
    server.ownership = ContainerOwnership(me, settings.container_count, statics)
    membership = StoreMembership(
        PgContainerMapStore(pool),
        clock,
        server.ownership,
        server.disown,
        heartbeat_s=settings.segment_store_heartbeat_s,
        expiry_s=settings.segment_store_expiry_s,
        # A group shares its address: one host row, left by store 0, which the supervisor stops last.
        shared=peers is not None,
        leaves=peers is None or peers.judges,
    )
    # A previous owner still serving stops within the expiry (it reads the map, or fences
    # itself when it cannot heartbeat): its transient segments are left alone until then.
    orphans = OrphanTransients(
        PgSegmentStorage(pool, clock),
        clock,
        server.live_transients,
        server.ownership,
        grace_ms=int(settings.segment_store_expiry_s * 1000),
        group=(peers.index, peers.size) if peers is not None else None,
    )
    store = RunningStore(server, loops, membership, PgListener(url, RecordCache()), orphans, peers, tier)
    try:
        await store.join()
    except BaseException:
        await store.close()
        raise
    return store


async def start_embedded_segment_store(
    settings: Settings, pool: Database, clock: Clock, loops: BackgroundLoops, url: str
) -> RunningStore | None:
    """The embedded segment store, listening (None with --no-embedded-segment-store): it joins
    the cluster as any `pgcontroller segment-store` does (its own address is the static host
    until the leader's first map)."""
    if settings.no_embedded_segment_store:
        return None
    return await start_segment_store(settings, pool, clock, loops, url, ())


def embedded_store_address(settings: Settings, server: SegmentStoreServer) -> HostAddress:
    """Where clients and the controller reach the embedded store (getURI's answer, its registration):
    the host it was given when that is a name, as Pravega publishes its configured host name
    (`pravegaservice.service.published.host.nameOrIp`), since a TLS certificate may name the host
    and no IP address; the advertised host when it listens on every interface; its bound address
    when given an IP address (the same address, written as the socket reports it)."""
    configured, (bound, port) = settings.segment_store_host, server.address
    if configured in _ANY_INTERFACE:
        return HostAddress(settings.advertised_host(), port)
    return HostAddress(bound if _is_ip_address(configured) else configured, port)


def _is_ip_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def with_embedded_store(settings: Settings, store: RunningStore | None) -> Settings:
    """The settings the controller is wired with: the embedded store, when it runs, is the host
    getURI names (and the controller's client calls) until the leader's first container map."""
    if store is None:
        return settings
    return replace(settings, segment_store_hosts=(embedded_store_address(settings, store.server),))
