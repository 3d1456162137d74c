"""Real services over a real database, as app.main wires them (minus the servers)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app.clock import SystemClock
from app.ports import ControllerEndpoint
from app.segmentstore.embedded import EmbeddedSegmentStore
from app.segmentstore.hosts import HostAddress, StaticContainerMap
from app.services.scopes import ScopeService
from app.services.segments import SegmentQueries
from app.services.streams import StreamService
from app.store.embedded_segments import PgEmbeddedSegmentRows
from app.store.pool import create_pool
from app.store.scopes import PgScopeStore
from app.store.streams import PgStreamStore

SEGMENT_STORE_HOSTS = (HostAddress("10.0.0.1", 12345), HostAddress("10.0.0.2", 12346))


class FixedCluster:
    def __init__(self, endpoints: list[ControllerEndpoint]) -> None:
        self.endpoints = endpoints

    async def live_controllers(self) -> list[ControllerEndpoint]:
        return self.endpoints


@dataclass
class Services:
    pool: Any
    clock: SystemClock
    scope_store: PgScopeStore
    stream_store: PgStreamStore
    segment_store: EmbeddedSegmentStore
    locator: StaticContainerMap
    scopes: ScopeService
    streams: StreamService
    segments: SegmentQueries
    cluster: FixedCluster


async def build_services(url: str) -> Services:
    pool = await create_pool(url, min_size=1, max_size=10)
    clock = SystemClock()
    scope_store = PgScopeStore(pool)
    stream_store = PgStreamStore(pool)
    segment_store = EmbeddedSegmentStore(PgEmbeddedSegmentRows(pool), clock)
    locator = StaticContainerMap(4, SEGMENT_STORE_HOSTS)
    return Services(
        pool=pool,
        clock=clock,
        scope_store=scope_store,
        stream_store=stream_store,
        segment_store=segment_store,
        locator=locator,
        scopes=ScopeService(scope_store, clock),
        streams=StreamService(stream_store, segment_store, clock),
        segments=SegmentQueries(stream_store, locator),
        cluster=FixedCluster([ControllerEndpoint("127.0.0.1", 9090)]),
    )
