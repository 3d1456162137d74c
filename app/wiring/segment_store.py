"""The data plane's seam: the embedded segment store `serve` starts (a TCP server in Pravega's wire
protocol over PostgreSQL), and the controller's client of segment stores.

Invariant: the controller reaches every segment store, the embedded one included, only through
`WireSegmentStore` over TCP, at the host the container map names; nothing else in the process names
the concrete store.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from app.config import Settings
from app.ports import Clock, SegmentStoreLocator
from app.segmentstore.client import WireSegmentStore
from app.segmentstore.hosts import HostAddress
from app.segmentstore.server import SegmentStoreServer
from app.segmentstore.storage import AppendResult
from app.store.db import Database
from app.store.segment_data import PgSegmentStorage
from app.wiring.autoscale import measured_storage
from app.wiring.resources import Contribution, Resources
from workers.failpoints import failpoint

_ANY_INTERFACE = ("", "0.0.0.0", "::")


@dataclass(frozen=True)
class SegmentStorage:
    store: WireSegmentStore
    client: WireSegmentStore
    contribution: Contribution


def wire_segment_store(
    settings: Settings, resources: Resources, locator: SegmentStoreLocator
) -> SegmentStorage:
    client = WireSegmentStore(locator, request_timeout_s=settings.segment_store_timeout_s)
    return SegmentStorage(client, client, Contribution())


class _FailpointStorage(PgSegmentStorage):
    """The failpoint `segmentstore.append.before_ack` sits between an append's commit and its
    DataAppended, the window a crash test needs to prove that a writer reconnecting after a
    crash is told the stored event number (and does not append those events twice)."""

    async def append(
        self,
        name: str,
        writer_id: int,
        data: bytes,
        last_event_number: int,
        num_events: int,
        expected_offset: int | None,
    ) -> AppendResult:
        result = await super().append(name, writer_id, data, last_event_number, num_events, expected_offset)
        await failpoint("segmentstore.append.before_ack")
        return result


async def start_embedded_segment_store(
    settings: Settings, pool: Database, clock: Clock
) -> SegmentStoreServer | None:
    """The embedded segment store, listening (None with --no-embedded-segment-store); it measures
    its segments' traffic and sends their scale reports until it is closed."""
    if settings.no_embedded_segment_store:
        return None
    storage = measured_storage(_FailpointStorage(pool, clock), settings, pool, clock)
    storage.start()
    try:
        return await SegmentStoreServer.start(
            storage,
            settings.segment_store_host,
            settings.segment_store_port,
            tail_wait_s=settings.segment_store_tail_wait_s,
            on_close=storage.close,
        )
    except BaseException:
        await storage.close()
        raise


def embedded_store_address(settings: Settings, server: SegmentStoreServer) -> HostAddress:
    """Where clients reach the embedded store: its bound address, or the advertised host when it
    listens on every interface."""
    host, port = server.address[0], server.address[1]
    if settings.segment_store_host in _ANY_INTERFACE:
        host = settings.advertised_host()
    return HostAddress(host, port)


def with_embedded_store(settings: Settings, server: SegmentStoreServer | None) -> Settings:
    """The settings the controller is wired with: the embedded store, when it runs, is the host
    getURI names (and the controller's client calls) until other stores register."""
    if server is None:
        return settings
    return replace(settings, segment_store_hosts=(embedded_store_address(settings, server),))
