"""Auto-scaling: the intake that turns segment stores' scale reports into AUTO_SCALE requests, the
cold markers the scale workflow reads, and the segment store's side (its storage measured by an
AutoScaleMonitor whose reports go to that intake).

A segment store reaches the intake through the database alone (the intake writes the request row
the controllers' workers take, as Pravega's store writes to `_requeststream`), so a store in a
process of its own needs nothing but its pool to report.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from app.api.rest import autoscale as autoscale_routes
from app.domain.autoscale import TrafficWindows
from app.ports import Clock
from app.segmentstore.autoscaler import AutoScaleMonitor, AutoScalerConfig
from app.segmentstore.measured_storage import MeasuredStorage, Observation
from app.segmentstore.storage import SegmentStorage
from app.services.autoscale import AutoScaleIntake
from app.settings import Settings
from app.store.autoscale import PgAutoScaleStore
from app.store.db import Database
from app.wiring.resources import Contribution, Resources


@dataclass(frozen=True)
class AutoScaling:
    store: PgAutoScaleStore
    intake: AutoScaleIntake
    contribution: Contribution


def wire_autoscale(settings: Settings, resources: Resources) -> AutoScaling:
    store = PgAutoScaleStore(resources.pool)
    intake = AutoScaleIntake(store, resources.clock)
    return AutoScaling(store, intake, Contribution(rest=(autoscale_routes.extension(intake),)))


def autoscaler_config(settings: Settings) -> AutoScalerConfig:
    """The segment store's auto-scaler settings (Pravega's autoScale.* with its defaults)."""
    return AutoScalerConfig(
        cooldown_ms=round(settings.autoscale_cooldown_s * 1000),
        mute_ms=round(settings.autoscale_mute_s * 1000),
        cache_expiry_ms=round(settings.autoscale_cache_expiry_s * 1000),
        cache_cleanup_ms=max(1, round(settings.autoscale_cache_cleanup_s * 1000)),
        windows=TrafficWindows().scaled(settings.autoscale_time_scale),
    )


def measured_storage(
    storage: SegmentStorage,
    settings: Settings,
    pool: Database,
    clock: Clock,
    forward: Callable[[Observation], None] | None = None,
) -> MeasuredStorage:
    """`storage` with its appends measured and the scale reports they trigger sent to the
    controllers' request queue in `pool` (or, with `forward`, what it measures sent to the store
    that judges for its group); start() it, and close() it after the store stops."""
    sink = AutoScaleIntake(PgAutoScaleStore(pool), clock)
    monitor = AutoScaleMonitor(sink, clock, autoscaler_config(settings))
    return MeasuredStorage(storage, monitor, clock, forward)
