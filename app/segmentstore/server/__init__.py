"""The embedded segment store's wire server: Pravega's segment-store protocol over asyncio TCP,
its state kept by a `SegmentStorage` (PostgreSQL in production)."""

from app.segmentstore.server.server import SegmentStoreServer

__all__ = ["SegmentStoreServer"]
