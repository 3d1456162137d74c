"""Retention: the periodic cycle that records stream cuts and truncates streams for the retention
buckets this process owns, and the subscribers whose positions bound what it may truncate."""

from __future__ import annotations

from dataclasses import dataclass

from app.api.grpc.subscribers import SubscriberRpcs
from app.ports import SegmentStore
from app.services.retention import RetentionService, SubscriberService
from app.settings import Settings
from app.store.retention import PgRetentionStore
from app.wiring.resources import Contribution, Resources
from workers.buckets import BucketClaims
from workers.retention import RetentionWorker


@dataclass(frozen=True)
class Retention:
    store: PgRetentionStore
    subscribers: SubscriberService
    worker: RetentionWorker
    contribution: Contribution


def wire_retention(
    settings: Settings, resources: Resources, segment_store: SegmentStore, claims: BucketClaims
) -> Retention:
    """`claims` are this process's retention buckets."""
    store = PgRetentionStore(resources.pool)
    subscribers = SubscriberService(resources.stream_store, store, resources.clock)
    service = RetentionService(
        resources.stream_store,
        store,
        segment_store,
        resources.clock,
        frequency_ms=settings.retention_frequency_ms,
    )
    worker = RetentionWorker(
        store,
        service,
        resources.clock,
        owned=claims.owned,
        bucket_count=settings.bucket_counts.retention,
        fence_for=claims.fence_for,
        frequency_ms=settings.retention_frequency_ms,
    )
    contribution = Contribution(grpc=(SubscriberRpcs(subscribers),), loops={"retention": worker.run})
    return Retention(store, subscribers, worker, contribution)
