"""The controller one process runs: its capabilities wired in layer order, and a view of them
under the names the servers and the tests use.

Invariant: each capability is built once, from Settings, the shared Resources and the
capabilities below it; none reaches into another except through what that one returned.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from app.clock import SystemClock
from app.domain.cluster import BucketService
from app.segmentstore.client import WireSegmentStore
from app.segmentstore.hosts import SharedContainerMap
from app.services.cluster import ClusterQueries
from app.services.lifecycle import StreamLifecycle
from app.services.retention import SubscriberService
from app.services.scopes import ScopeService
from app.services.segments import SegmentQueries
from app.services.streams import StreamService
from app.services.transactions import TransactionService
from app.services.watermarks import WatermarkService
from app.settings import Settings
from app.store.cluster import PgClusterStore
from app.store.db import Database
from app.store.notifications import PgListener
from app.store.requests import PgRequestQueue
from app.store.scopes import PgScopeStore
from app.store.streams import PgStreamStore
from app.store.txns import PgTxnStore
from app.wiring.autoscale import AutoScaling, wire_autoscale
from app.wiring.cluster import Cluster, wire_cluster
from app.wiring.readergroups_kvtables import ReaderGroupsAndTables, wire_reader_groups_and_tables
from app.wiring.resources import Contribution, Loop, Resources, RestExtension
from app.wiring.retention import Retention, wire_retention
from app.wiring.segment_store import SegmentStorage, wire_segment_store
from app.wiring.state_views import StateViews, wire_state_views
from app.wiring.streams import Streams, wire_streams
from app.wiring.transactions import Transactions, wire_transactions
from app.wiring.watermarks import Watermarks, wire_watermarks
from workers.cluster import ClusterNode
from workers.dispatcher import RequestDispatcher
from workers.handlers.common import WorkflowDeps
from workers.txn_timeouts import TxnTimeoutSweeper


@dataclass(frozen=True)
class Controller:
    """The capabilities of one process, each with what it contributes to the servers and loops."""

    resources: Resources
    membership: Cluster
    scaling: AutoScaling
    storage: SegmentStorage
    retention: Retention
    watermarking: Watermarks
    views: StateViews
    members: ReaderGroupsAndTables
    workflows: Streams
    txns: Transactions

    def contributions(self) -> tuple[Contribution, ...]:
        return (
            # The shared listener's loop: the wake-ups and cache invalidations every capability uses.
            Contribution(loops={"notifications": self.resources.listener.run}),
            self.membership.contribution,
            self.scaling.contribution,
            self.storage.contribution,
            self.retention.contribution,
            self.watermarking.contribution,
            self.views.contribution,
            self.members.contribution,
            self.workflows.contribution,
            self.txns.contribution,
        )

    def loops(self) -> dict[str, Loop]:
        """The background loops by name; each runs until cancelled (the cluster's until released)."""
        loops: dict[str, Loop] = {}
        for contribution in self.contributions():
            for name, loop in contribution.loops.items():
                if name in loops:
                    raise ValueError(f"two capabilities contribute a loop named {name!r}")
                loops[name] = loop
        return loops

    async def stop_workers(self, timeout_s: float) -> None:
        """Requests in flight get `timeout_s`; then the buckets and leadership are given back."""
        await self.membership.dispatchers.stop(timeout_s)
        await self.membership.node.release()

    def advertise(self, host: str, grpc_port: int, rest_port: int) -> None:
        """Sets the endpoints this process registers under; call before the loops start."""
        node = self.membership.node
        node.advertise(replace(node.member, host=host, grpc_port=grpc_port, rest_port=rest_port))

    # --- every wired object under its own name (the API servers and the tests use these) ---

    @property
    def pool(self) -> Database:
        return self.resources.pool

    @property
    def clock(self) -> SystemClock:
        return self.resources.clock

    @property
    def listener(self) -> PgListener:
        return self.resources.listener

    @property
    def scope_store(self) -> PgScopeStore:
        return self.resources.scope_store

    @property
    def stream_store(self) -> PgStreamStore:
        return self.resources.stream_store

    @property
    def requests(self) -> PgRequestQueue:
        return self.resources.requests

    @property
    def txn_store(self) -> PgTxnStore:
        return self.resources.txn_store

    @property
    def cluster_store(self) -> PgClusterStore:
        return self.membership.store

    @property
    def cluster_node(self) -> ClusterNode:
        return self.membership.node

    @property
    def cluster_queries(self) -> ClusterQueries:
        return self.membership.queries

    @property
    def locator(self) -> SharedContainerMap:
        return self.membership.locator

    @property
    def segment_store(self) -> WireSegmentStore:
        return self.storage.store

    @property
    def subscribers(self) -> SubscriberService:
        return self.retention.subscribers

    @property
    def watermarks(self) -> WatermarkService:
        return self.watermarking.service

    @property
    def scopes(self) -> ScopeService:
        return self.workflows.scopes

    @property
    def streams(self) -> StreamService:
        return self.workflows.streams

    @property
    def segments(self) -> SegmentQueries:
        return self.workflows.segments

    @property
    def lifecycle(self) -> StreamLifecycle:
        return self.workflows.lifecycle

    @property
    def dispatcher(self) -> RequestDispatcher:
        return self.workflows.dispatcher

    @property
    def transactions(self) -> TransactionService:
        return self.txns.transactions

    @property
    def txn_sweeper(self) -> TxnTimeoutSweeper:
        return self.txns.sweeper


def wire(settings: Settings, resources: Resources) -> Controller:
    """Every capability, each from the ones below it: cluster and buckets first (everything
    works buckets), then the segment store, then the capabilities the workflows use, then the
    workflows (streams, transactions) themselves."""
    membership = wire_cluster(settings, resources)
    scaling = wire_autoscale(settings, resources)
    storage = wire_segment_store(settings, resources, membership.locator)
    deps = WorkflowDeps(
        resources.stream_store, resources.scope_store, storage.store, resources.clock, resources.txn_store
    )
    claims = membership.claims
    retention = wire_retention(settings, resources, storage.store, claims[BucketService.RETENTION])
    watermarking = wire_watermarks(settings, resources, claims[BucketService.WATERMARKS], storage.client)
    views = wire_state_views(settings, resources, membership.node)
    members = wire_reader_groups_and_tables(settings, resources, deps, retention.subscribers, storage.tokens)
    workflows = wire_streams(settings, resources, deps, membership, scaling.store, members.requests)
    txns = wire_transactions(settings, resources, deps, membership, watermarking.service)
    return Controller(
        resources, membership, scaling, storage, retention, watermarking, views, members, workflows, txns
    )


def grpc_extensions(controller: Controller) -> list[object]:
    """The capability objects serving RPCs beyond ControllerService's own."""
    return [handler for contribution in controller.contributions() for handler in contribution.grpc]


def rest_extensions(controller: Controller) -> list[RestExtension]:
    """The capabilities' routes, for create_app."""
    return [routes for contribution in controller.contributions() for routes in contribution.rest]
