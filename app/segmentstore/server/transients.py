"""Transient segments (the large-event writer's staging segments) and their lifetime.

Invariant: a transient segment lives only as long as the connection that created it: whatever of
it was not merged away is deleted when that connection closes (and, when its store died, by the
orphan sweep of orphans.py).
"""

from __future__ import annotations

import logging
import uuid

from app.segmentstore import storage as st

log = logging.getLogger(__name__)


def transient_name(parent: str, writer_id: int) -> str:
    """Pravega's name: `<parent>#transient.<writer id, 32 hex>.<random, 32 hex>`."""
    return f"{parent}#transient.{writer_id:032x}.{uuid.uuid4().hex}"


class Transients:
    """The transient segments one connection created and has not seen merged or deleted."""

    def __init__(self) -> None:
        self._names: set[str] = set()

    def add(self, name: str) -> None:
        self._names.add(name)

    def discard(self, name: str) -> None:
        self._names.discard(name)

    def names(self) -> frozenset[str]:
        return frozenset(self._names)

    async def delete_all(self, storage: st.SegmentStorage) -> list[str]:
        """Deletes the ones still there (a merged one is gone already); returns those deleted."""
        deleted = []
        for name in sorted(self._names):
            try:
                await storage.delete(name)
                deleted.append(name)
            except st.NoSuchSegment:
                continue  # merged (or deleted) by its writer already: nothing to clean up
            except Exception:
                log.exception("could not delete transient segment %s", name)
        self._names.clear()
        return deleted
