"""Auto-scaling: the intake that turns segment stores' scale reports into AUTO_SCALE requests, the
cold markers the scale workflow reads, and (with --simulate-traffic) the traffic simulator that
judges the embedded segment store's appends as a segment store would and reports to the intake."""

from __future__ import annotations

import functools
from dataclasses import dataclass

from app.api.rest import autoscale as autoscale_routes
from app.config import Settings
from app.segmentstore.traffic import TrafficSimulator
from app.services.autoscale import AutoScaleIntake
from app.store.autoscale import PgAutoScaleStore
from app.wiring.resources import Contribution, Resources


@dataclass(frozen=True)
class AutoScaling:
    store: PgAutoScaleStore
    intake: AutoScaleIntake
    traffic: TrafficSimulator | None
    contribution: Contribution


def wire_autoscale(settings: Settings, resources: Resources) -> AutoScaling:
    store = PgAutoScaleStore(resources.pool)
    intake = AutoScaleIntake(store, resources.clock)
    traffic = TrafficSimulator(intake, resources.clock) if settings.simulate_traffic else None
    loops = (
        {"traffic-reports": functools.partial(traffic.run, settings.traffic_report_period_s)}
        if traffic is not None
        else {}
    )
    return AutoScaling(
        store, intake, traffic, Contribution(rest=(autoscale_routes.extension(intake),), loops=loops)
    )
