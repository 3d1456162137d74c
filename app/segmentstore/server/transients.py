"""Transient segments (the large-event writer's staging segments) and their lifetime.

Invariant: a transient segment lives only as long as the connection that created it: whatever of
it was not merged away is deleted when that connection closes (and, when its store died, by the
orphan sweep of orphans.py). The stores of one `serve --processes N` run tag the names they make
with their index, so that each sweeps only what an earlier life of its own index left.
"""

from __future__ import annotations

import logging
import uuid
from typing import Final

from app.domain.segment_names import transient_segment_name
from app.segmentstore import storage as st

log = logging.getLogger(__name__)


TAG_HEX: Final = 4  # the tag's hex digits, at the start of the name's random part


def transient_name(parent: str, writer_id: int, tag: int | None = None) -> str:
    """Pravega's name of a transient segment under `parent` (segment_names.transient_segment_name),
    its random part 32 hex digits; with `tag`, the random part starts with it (4 hex), the rest
    stays random."""
    random = uuid.uuid4().hex
    if tag is not None:
        random = f"{tag:0{TAG_HEX}x}{random[TAG_HEX:]}"
    return transient_segment_name(parent, writer_id, random)


def transient_tag(name: str) -> int | None:
    """The tag a tagged name carries; for an untagged one, the number its first random digits
    happen to make (the sweep's rule holds for either); None for a name not made here."""
    _, dot, random = name.rpartition(".")
    if not dot or len(random) != 32:
        return None
    try:
        return int(random[:TAG_HEX], 16)
    except ValueError:
        return None


class Transients:
    """The transient segments one connection created and has not seen merged or deleted."""

    def __init__(self, tag: int | None = None) -> None:
        self._names: set[str] = set()
        self.tag = tag  # this store's index in its `serve --processes N` run, if any

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
