"""The segment store the workflows call (create, seal, truncate, merge, delete segments).

This is the data plane's seam: today the embedded store, in-process over this database; a client
of segment-store servers (and the embedded server `serve` would start) replaces this module's
body, and nothing else in the process names the concrete store.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.config import Settings
from app.segmentstore.embedded import EmbeddedSegmentStore
from app.segmentstore.traffic import AppendingSegmentStore, TrafficRecordingSegmentStore, TrafficSimulator
from app.store.embedded_segments import PgEmbeddedSegmentRows
from app.wiring.resources import Contribution, Resources


@dataclass(frozen=True)
class SegmentStorage:
    store: AppendingSegmentStore
    contribution: Contribution


def wire_segment_store(
    settings: Settings, resources: Resources, traffic: TrafficSimulator | None
) -> SegmentStorage:
    """`traffic` (auto-scaling's simulator, when configured) is told of every append."""
    store: AppendingSegmentStore = EmbeddedSegmentStore(
        PgEmbeddedSegmentRows(resources.pool), resources.clock
    )
    if traffic is not None:
        # Appends are counted as traffic and turned into scale reports, as a segment store would.
        store = TrafficRecordingSegmentStore(store, traffic)
    return SegmentStorage(store, Contribution())
