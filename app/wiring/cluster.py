"""Cluster and buckets: this process's membership, its bucket claims, leadership with its duties,
and the segment-container map.

One lock session (Resources.locks) carries presence, leadership and every claim. The request
dispatchers of every capability (requests, commits, aborts) register here, so a lost request
bucket stops in all of them at once and a gained one wakes them all.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass

from app.api.grpc.cluster import ClusterRpcs
from app.api.rest import cluster as cluster_routes
from app.api.rest import cluster_hosts
from app.domain.cluster import BucketService, Member
from app.segmentstore.hosts import SharedContainerMap
from app.services.cluster import ClusterQueries, LocalView
from app.services.containers import ContainerMapService
from app.settings import Settings
from app.store.cluster import PgClusterStore
from app.store.containers import PgContainerMapStore
from app.wiring.resources import Contribution, Resources
from workers.buckets import BucketClaims
from workers.cluster import ClusterNode
from workers.containers import ContainerBalancerDuty
from workers.dispatcher import RequestDispatcher


class RequestDispatchers:
    """Every dispatcher working request buckets, told together when those buckets move."""

    def __init__(self, resources: Resources) -> None:
        self._listener = resources.listener
        self._all: list[RequestDispatcher] = []
        resources.listener.on_connected(self.wake_all)

    def add(self, dispatcher: RequestDispatcher) -> None:
        self._all.append(dispatcher)
        self._listener.on_request(dispatcher.wake)

    def buckets_lost(self, buckets: frozenset[int]) -> None:
        for each in self._all:
            each.buckets_lost(buckets)

    def wake_all(self, *_args: object) -> None:
        for each in self._all:
            each.wake()

    async def stop(self, timeout_s: float) -> None:
        """Requests in flight get `timeout_s`; unfinished ones stay queued for the next owner."""
        await asyncio.gather(*(each.stop(timeout_s) for each in self._all))


@dataclass(frozen=True)
class Cluster:
    store: PgClusterStore
    claims: Mapping[BucketService, BucketClaims]
    node: ClusterNode
    queries: ClusterQueries
    locator: SharedContainerMap
    container_map: ContainerMapService
    dispatchers: RequestDispatchers
    contribution: Contribution


def wire_cluster(settings: Settings, resources: Resources) -> Cluster:
    store = PgClusterStore(resources.pool)
    dispatchers = RequestDispatchers(resources)
    claims = _claims(resources, store, dispatchers)
    node = _node(settings, resources, store, claims)
    locator, container_map = _container_map(settings, resources, node)

    def local_view() -> LocalView:
        return LocalView(
            node.member.id, node.is_leader, {service: c.owned() for service, c in claims.items()}
        )

    queries = ClusterQueries(store, resources.clock, _ms(settings.member_ttl_s), local_view)
    contribution = Contribution(
        grpc=(ClusterRpcs(queries),),
        rest=(cluster_routes.extension(queries), cluster_hosts.extension(container_map)),
        loops={"cluster": node.run, "container-map": locator.run},
    )
    return Cluster(store, claims, node, queries, locator, container_map, dispatchers, contribution)


def _ms(seconds: float) -> int:
    # The cluster's rows and clock are in milliseconds; its settings are in seconds.
    return round(seconds * 1000)


def _claims(
    resources: Resources, store: PgClusterStore, dispatchers: RequestDispatchers
) -> dict[BucketService, BucketClaims]:
    def claims(service: BucketService) -> BucketClaims:
        common = (service, resources.locks, store, resources.clock, resources.member_id)
        if service is BucketService.REQUESTS:
            return BucketClaims(*common, on_lost=dispatchers.buckets_lost, on_gained=dispatchers.wake_all)
        return BucketClaims(*common)

    return {service: claims(service) for service in BucketService}


def _node(
    settings: Settings,
    resources: Resources,
    store: PgClusterStore,
    claims: Mapping[BucketService, BucketClaims],
) -> ClusterNode:
    now = resources.clock.now_ms()
    node = ClusterNode(
        store,
        resources.locks,
        resources.clock,
        # Endpoints are unknown until the servers listen: `Controller.advertise` sets them.
        Member(resources.member_id, "", 0, 0, now, now),
        claims,
        settings.bucket_counts,
        interval_s=settings.cluster_interval_s,
        member_ttl_ms=_ms(settings.member_ttl_s),
        rebalance_delay_ms=_ms(settings.rebalance_delay_s),
    )
    resources.listener.on_cluster_change(node.wake)
    return node


def _container_map(
    settings: Settings, resources: Resources, node: ClusterNode
) -> tuple[SharedContainerMap, ContainerMapService]:
    """The map getURI reads (kept fresh by its loop) and the one the leader balances."""
    hosts = settings.segment_store_hosts
    store = PgContainerMapStore(resources.pool)
    locator = SharedContainerMap(settings.container_count, hosts, store)
    service = ContainerMapService(store, resources.clock, settings.container_count, list(hosts))
    balancer = ContainerBalancerDuty(
        service,
        resources.clock,
        rebalance_delay_s=settings.container_rebalance_delay_s,
        host_expiry_s=settings.segment_store_expiry_s,
    )

    async def balance_containers() -> None:
        await balancer.run_once()

    node.add_leader_duty(balance_containers, on_leadership=balancer.reset)
    resources.listener.on_connected(locator.wake)
    resources.listener.on_cluster_change(locator.changed)
    return locator, service
