"""Watermarks: writers' marks recorded through the API, and the periodic computation of each
stream's watermark for the watermark buckets this process owns, appended to its `_MARK` segment."""

from __future__ import annotations

from dataclasses import dataclass

from app.api.grpc.watermarks import WatermarkRpcs
from app.api.rest import watermarks as watermark_routes
from app.segmentstore.client import WireSegmentStore
from app.segmentstore.client.marks import WireMarkStream
from app.services.watermarks import WatermarkService
from app.settings import Settings
from app.store.watermarks import PgWatermarkStore
from app.wiring.resources import Contribution, Resources
from workers.buckets import BucketClaims
from workers.watermarking import WatermarkWorker


@dataclass(frozen=True)
class Watermarks:
    service: WatermarkService
    worker: WatermarkWorker
    contribution: Contribution


def wire_watermarks(
    settings: Settings, resources: Resources, claims: BucketClaims, segments: WireSegmentStore
) -> Watermarks:
    """`claims` are this process's watermark buckets; `segments` carries each watermark to its
    stream's `_MARK` segment."""
    service = WatermarkService(PgWatermarkStore(resources.pool), resources.clock, WireMarkStream(segments))
    worker = WatermarkWorker(
        service,
        claims.owned,
        settings.bucket_counts.watermarks,
        claims.fence_for,
        resources.clock,
        period_ms=settings.watermark_period_ms,
    )
    contribution = Contribution(
        grpc=(WatermarkRpcs(service),),
        rest=(watermark_routes.extension(service),),
        loops={"watermarks": worker.run},
    )
    return Watermarks(service, worker, contribution)
