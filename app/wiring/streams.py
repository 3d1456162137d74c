"""Streams and workflows: scopes, streams and their lifecycle use cases, and the request runner and
dispatcher that carry out those workflows for the request buckets this process owns.

Other capabilities add request kinds (reader groups, tables) and what deleting a scope also
deletes through `RequestExtensions`, so one runner serves every request kind of the queue.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from app.api.rest import requests as parked_routes
from app.api.rest import stream_storage as stream_storage_routes
from app.domain.cluster import BucketService
from app.domain.requests import RequestKind
from app.ports import AutoScaleStore
from app.services.lifecycle import StreamLifecycle
from app.services.parked import ParkedRequests
from app.services.scopes import ScopeService
from app.services.segments import SegmentQueries
from app.services.stream_storage import StreamStorageQuery
from app.services.streams import StreamService
from app.settings import Settings
from app.store.storage_report import PgSegmentStorageReport
from app.wiring.cluster import Cluster
from app.wiring.resources import Contribution, Resources
from workers.creation_sweeper import CreationSweeper
from workers.dispatcher import RequestDispatcher
from workers.handlers import creation_handlers, stream_request_handlers
from workers.handlers.common import WorkflowDeps
from workers.handlers.delete_scope import ScopeMemberDeletion
from workers.runner import RequestHandler, RequestRunner


@dataclass(frozen=True)
class RequestExtensions:
    """Request kinds another capability handles, and its part in deleting a scope."""

    handlers: Mapping[RequestKind, RequestHandler]
    scope_member_deletions: Sequence[ScopeMemberDeletion]


@dataclass(frozen=True)
class Streams:
    scopes: ScopeService
    streams: StreamService
    segments: SegmentQueries
    lifecycle: StreamLifecycle
    dispatcher: RequestDispatcher
    contribution: Contribution


def wire_streams(
    settings: Settings,
    resources: Resources,
    deps: WorkflowDeps,
    cluster: Cluster,
    cold_markers: AutoScaleStore,
    extensions: RequestExtensions,
) -> Streams:
    """`cold_markers` are auto-scaling's, read by the scale workflow."""
    claims = cluster.claims[BucketService.REQUESTS]
    streams = StreamService(resources.stream_store, deps.segment_store, resources.clock)
    handlers = {
        **stream_request_handlers(
            deps, cold_markers=cold_markers, scope_member_deletions=extensions.scope_member_deletions
        ),
        **creation_handlers(deps, streams, resources.requests),
        **extensions.handlers,
    }
    runner = RequestRunner(
        resources.requests,
        handlers,
        resources.clock,
        owns=claims.owns,
        fence_for=claims.fence_for,
        max_failures=settings.request_max_failures,
    )
    dispatcher = RequestDispatcher(
        resources.requests,
        runner,
        claims.owned,
        ceiling=settings.request_concurrency,
        poll_s=settings.request_poll_s,
    )
    cluster.dispatchers.add(dispatcher)
    sweeper = CreationSweeper(
        resources.stream_store, resources.clock, claims.owned, takeover_s=settings.create_takeover_s
    )
    lifecycle = StreamLifecycle.build(
        resources.scope_store,
        resources.stream_store,
        resources.requests,
        resources.clock,
        completion_timeout_s=settings.completion_timeout_s,
        seal_busy_first_s=settings.seal_busy_first_s,
    )
    return Streams(
        ScopeService(resources.scope_store, resources.clock),
        streams,
        SegmentQueries(resources.stream_store, cluster.locator),
        lifecycle,
        dispatcher,
        Contribution(
            rest=(
                parked_routes.extension(ParkedRequests(resources.requests)),
                stream_storage_routes.extension(
                    StreamStorageQuery(resources.stream_store, PgSegmentStorageReport(resources.pool))
                ),
            ),
            loops={"request-dispatcher": dispatcher.run, "creation-sweeper": sweeper.run},
        ),
    )
