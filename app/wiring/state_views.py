"""Customized state views: participants' reported states, and the views the cluster's leader
aggregates from them. The aggregation's writes are fenced by the leader term, so a deposed
leader lands nothing."""

from __future__ import annotations

from dataclasses import dataclass

from app.api.rest import state_views as state_view_routes
from app.services.state_views import StateViewService, ViewAggregation
from app.settings import Settings
from app.store.state_views import PgStateViewStore
from app.wiring.resources import Contribution, Resources
from workers.cluster import ClusterNode
from workers.state_views import StateViewAggregator


@dataclass(frozen=True)
class StateViews:
    service: StateViewService
    aggregator: StateViewAggregator
    contribution: Contribution


def wire_state_views(settings: Settings, resources: Resources, node: ClusterNode) -> StateViews:
    store = PgStateViewStore(resources.pool)
    service = StateViewService(store, resources.clock)
    aggregator = StateViewAggregator(
        ViewAggregation(store, resources.clock),
        is_leader=lambda: node.is_leader,
        leader_term=lambda: node.leader_term,
    )
    listener = resources.listener
    listener.on_state_change(aggregator.wake)
    listener.on_view_change(service.view_changed)
    listener.on_connected(aggregator.wake)
    listener.on_connected(service.wake_all)
    contribution = Contribution(
        rest=(state_view_routes.extension(service),), loops={"state-views": aggregator.run}
    )
    return StateViews(service, aggregator, contribution)
