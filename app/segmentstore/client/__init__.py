"""The controller's client of Pravega segment stores: the SegmentStore port over the wire
protocol (`store`), its pooled connections (`connections`), how it reads replies (`replies`), and
the revisioned `_MARK` segments watermarks are appended to and read from (`marks`)."""

from app.segmentstore.client.store import WireSegmentStore

__all__ = ["WireSegmentStore"]
