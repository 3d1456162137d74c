"""The controller's client of Pravega segment stores: the SegmentStore port over the wire
protocol (`store`), its pooled connections (`connections`) and how it reads replies (`replies`)."""

from app.segmentstore.client.store import WireSegmentStore

__all__ = ["WireSegmentStore"]
